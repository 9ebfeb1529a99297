"""Training without normalization: DyT, ReZero, the tanh fit and the chapter's comparison."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from normedu import nn as nnu
from normedu.claims import since2020_nonorm as C
from normedu.experiments import since2020_nonorm as E
from normedu.transformer import GPTConfig, TinyGPT


def _double(seed: int, *shape) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_dyt_forward_and_gradients_match_the_closed_forms():
    """y = γ tanh(αx) + β; dx = g γ α (1 − t²), dα = Σ g γ x (1 − t²), dγ = Σ g t, dβ = Σ g."""
    layer = nnu.DyT(6, alpha0=0.7).double()
    with torch.no_grad():
        layer.weight.copy_(_double(1, 6))
        layer.bias.copy_(_double(2, 6))
    x = (3 * _double(3, 4, 5, 6)).requires_grad_(True)
    g = _double(4, 4, 5, 6)
    y = layer(x)
    y.backward(g)
    xd, gam, bet = x.detach(), layer.weight.detach(), layer.bias.detach()
    a = layer.alpha.detach()  # 0.7 rounded to float32 when the module was built
    assert a.dtype == torch.float64 and float(a) == pytest.approx(0.7, rel=1e-7)
    t = torch.tanh(a * xd)
    torch.testing.assert_close(y.detach(), gam * t + bet, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(x.grad, g * gam * a * (1 - t**2), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(layer.alpha.grad, (g * gam * xd * (1 - t**2)).sum())
    torch.testing.assert_close(layer.weight.grad, (g * t).sum((0, 1)))
    torch.testing.assert_close(layer.bias.grad, g.sum((0, 1)))
    assert layer.alpha.shape == () and sum(p.numel() for p in layer.parameters()) == 2 * 6 + 1


def test_dyt_defaults_and_its_registry_entry_have_no_eps():
    layer = nnu.make_norm("dyt", 8, eps=1e-3)  # eps is not DyT's: it is dropped, not an error
    assert isinstance(layer, nnu.DyT) and not hasattr(layer, "eps")
    assert float(layer.alpha.detach()) == 0.5  # the paper's default alpha0
    half = torch.randn(2, 8).to(torch.bfloat16)
    assert layer(half).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="alpha must be a scalar"):
        nnu.dyt(torch.ones(2, 8), torch.ones(8))


def test_tinygpt_resets_dyt_alpha_and_rezero_gates():
    model = TinyGPT(GPTConfig(n_layers=2, norm="dyt"))
    rz = TinyGPT(GPTConfig(n_layers=2, norm="none", residual_scale="rezero"))
    with torch.no_grad():
        for p in (*model.parameters(), *rz.parameters()):
            p.add_(1.0)
    model.reset_parameters()
    rz.reset_parameters()
    assert all(float(m.alpha.detach()) == 0.5 for m in model.modules() if isinstance(m, nnu.DyT))
    assert all(b.gate1.item() == 0 and b.gate2.item() == 0 for b in rz.blocks)


def test_rezero_stack_at_init_is_the_identity_and_its_gates_get_the_derivation_s_gradient():
    """x_L = x_0 exactly; every block's output gradient is the same vector; and the gate's
    gradient is <g, F(x)>, with F the branch computed independently of the block."""
    model = TinyGPT(GPTConfig(n_layers=3, norm="none", residual_scale="rezero")).double()
    idx = torch.randint(0, 32, (2, 7), generator=torch.Generator().manual_seed(0))
    x0 = model.tok(idx) + model.pos(torch.arange(7))
    assert torch.equal(model.hidden(idx), x0)
    rz = E.rezero_identity(depth=4)
    assert rz.max_stream_change == 0 and rz.max_grad_change == 0 and len(rz.block_grads) == 4
    # Adam's first step is lr * m / (sqrt(v) + eps) with m = (1-b1) g / (1-b1), v likewise:
    # lr * sign(g), whatever |g| (up to eps / |g|).
    expected = -rz.lr * np.sign(rz.gate_grads)
    np.testing.assert_allclose(rz.gates_after_step, expected, rtol=1e-4)
    assert max(map(abs, rz.gate_grads)) > 2 * min(map(abs, rz.gate_grads))  # |g| do differ

    # dL/d(gate1 of the last block) with L = <w, x_L>: the upstream gradient is w, and the
    # branch there reads x_L's predecessor, which is x0.
    w = _double(5, 2, 7, 64)
    (model.hidden(idx) * w).sum().backward()
    branch = model.blocks[-1].attn(x0.detach())
    torch.testing.assert_close(model.blocks[-1].gate1.grad, (w * branch).sum())
    assert model.blocks[-1].attn.proj.weight.grad.abs().max() == 0  # a zero gate: no gradient


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(residual_scale="fixup"), "residual_scale must be one of"),
        (dict(residual_scale="rezero", residual=False), "needs residual=True"),
    ],
)
def test_residual_scale_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**kw)


def test_fit_tanh_recovers_known_parameters_and_beats_a_line_only_on_a_bent_cloud():
    rng = np.random.default_rng(0)
    x = rng.uniform(-6, 6, 2000)
    y = 1.7 * np.tanh(0.8 * x) + 0.01 * rng.standard_normal(x.size)
    fit = E.fit_tanh(x, y)
    assert fit.alpha == pytest.approx(0.8, rel=0.01) and fit.c == pytest.approx(1.7, rel=0.01)
    assert fit.r2_tanh > 0.999 > fit.r2_line
    line = E.fit_tanh(x, 0.3 * x)  # a straight line: tanh fits it only in its linear part
    assert line.r2_line == pytest.approx(1.0) and line.r2_tanh > 0.999 and line.alpha < 0.05
    # LayerNorm's element-wise cloud: straight when all tokens share one scale, bent when not
    assert not C.bends(E.token_scale_demo(0.0).fit) and C.bends(E.token_scale_demo(1.0).fit)


@pytest.fixture(scope="module")
def tiny(request):
    """The chapter's comparison at a tiny size (two blocks, four steps)."""
    old = E.SIZES["cpu"]
    E.SIZES["cpu"] = dataclasses.replace(
        old, depth=2, d_model=16, steps=4, curve_batch=4, long_steps=6, long_variants=("dyt",)
    )
    E.compare.cache_clear()
    try:
        yield E.compare("cpu")
    finally:
        E.SIZES["cpu"] = old
        E.compare.cache_clear()


def test_comparison_records_every_variant_and_the_layernorm_curve(tiny):
    assert [r.name for r in tiny.runs] == list(E.VARIANTS)
    for r in tiny.runs:
        assert len(r.losses) == 4 and len(r.grad_init) == 2 and r.tokens_per_s > 0
    assert tiny.speed_vs_layernorm("layernorm") == 1.0
    assert len(tiny.run("dyt").scalars) == 5 and len(tiny.run("rezero").scalars) == 4
    assert tiny.curve.names == [
        "block0.norm1",
        "block0.norm2",
        "block1.norm1",
        "block1.norm2",
        "final",
    ]
    assert E.Comparison.from_json(tiny.to_json()) == tiny
    claims = {c.id: c for c in C.check("cpu")}  # on the cached tiny run
    assert len(claims) == 8 and claims["nonorm.rezero_identity"].verdict == "confirmed"
    slow = not tiny.run("none").trained and tiny.run("layernorm").trained
    assert (claims["nonorm.none_slow"].verdict == "confirmed") == slow


def test_the_longer_run_is_the_same_training_continued(tiny):
    """DyT's 6 steps (4 in lockstep, 2 alone) against a DyT trained alone for 6 steps on the
    same batches, outside compare; the others do not go on."""
    from normedu.sequence_tasks import lm_loss, make_batch
    from normedu.training import adam

    size = E.SIZES["cpu"]
    model = TinyGPT(E.variant_config("dyt", size))
    opt = adam(model.parameters(), lr=size.lr, betas=(0.9, 0.98))
    alone = []
    for step in range(6):
        b = make_batch(size.task, size.batch, size.n_items, size.vocab, seed=10_000 + step)
        loss = lm_loss(model(b.x), b)
        opt.zero_grad()
        loss.backward()
        opt.step()
        alone.append(loss.item())
    dyt = tiny.run("dyt")
    np.testing.assert_allclose(dyt.losses + dyt.long_losses, alone, rtol=1e-5)
    assert dyt.final_loss_long == pytest.approx(alone[-1], rel=1e-5)  # last tenth of 6: 1 step
    assert tiny.run("none").long_losses == [] and tiny.run("none").final_loss_long is None


def test_figures_draw(tiny):
    from normedu.plots import since2020_nonorm as P

    demos = [E.token_scale_demo(s) for s in (0.0, 1.0)]
    for fig in (P.curve_figure(tiny, demos), P.training_figure(tiny), P.grad_figure(tiny)):
        assert fig.axes and fig.get_facecolor()[:3] == (1.0, 1.0, 1.0)


def _fake(none: float, dyt: float, none_long=None, dyt_long=None) -> E.Comparison:
    """Losses after ``steps`` (and after ``long_steps`` for DyT and no norm); trained below
    half of chance, 1.32."""

    def run(name, loss, long=None):
        r = E.Run(name, [loss], loss, loss < 1.32, False, 1.0, 100.0, [1.0], [1.0])
        if long is not None:
            r.long_losses, r.final_loss_long, r.trained_long = [long], long, long < 1.32
        return r

    runs = [
        run("layernorm", 0.02),
        run("rmsnorm", 0.02),
        run("dyt", dyt, dyt_long),
        run("rezero", 0.05),
        run("none", none, none_long),
    ]
    curve = E.LNCurve(
        ["final"], [dataclasses.asdict(E.fit_tanh([1, 2, 3], [1, 2, 3]))], [1.0], "final", [], []
    )
    return E.Comparison(runs, dataclasses.asdict(E.SIZES["cpu"]), 2.64, curve)


def test_the_page_verdicts_follow_the_measurements():
    slow = _fake(2.4, 1.9, none_long=0.2, dyt_long=0.05)
    text = C.describe_comparison(slow)
    assert "learns far more slowly" in text and "it does train, to 0.20" in text
    assert "**learns more slowly than** LayerNorm" in text and C.none_verdict(slow) == "slower"
    fails = _fake(2.4, 1.9, none_long=2.3, dyt_long=1.0)
    text = C.describe_comparison(fails)
    assert C.none_verdict(fails) == "fails" and "**does not match**" in text
    assert C.dyt_verdict(_fake(2.4, 0.05)) == "matches"
    trains = C.describe_comparison(_fake(0.1, 1.9))
    assert "even the stack without any normalization trained" in trains
    assert C.speed_word(1.2) == "faster than" and C.speed_word(1.01) == "as fast as"
