"""Training without normalization: DyT, ReZero, the tanh fit and the chapter's comparison."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from normedu import nn as nnu
from normedu.claims import since2020_nonorm as C
from normedu.claims import since2020_nonorm_words as W
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


def test_the_stored_records_hold_the_chapters_sizes_seeds_and_variants():
    """The committed multi-seed record measured what the code trains now (sizes, seeds,
    variants), and the speed record timed every variant in every round. (Placed before the
    tests that use the ``tiny`` fixture, which shrinks ``SIZES["cpu"]`` for the module.)"""
    from normedu import records
    from normedu.experiments import since2020_nonorm_seeds as S

    size = E.SIZES["cpu"]
    D = records.read(S.SEEDS_RECORD)["data"]
    params = records.RECORDS[S.SEEDS_RECORD].params
    assert [s["seed"] for s in D["per_seed"]] == D["seeds"] == params["seeds"]
    assert (D["steps"], D["long_steps"]) == (size.steps, size.long_steps)
    for s in D["per_seed"]:
        assert set(s["runs"]) == set(E.VARIANTS)
        long = {n for n, r in s["runs"].items() if r["final_long"] is not None}
        assert long == set(size.long_variants)
    T = records.read(S.SPEED_RECORD)["data"]
    reps = records.RECORDS[S.SPEED_RECORD].params["reps"]
    assert T["variants"] == list(E.VARIANTS)
    assert all(len(T["seconds"][n]) == reps for n in E.VARIANTS)


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
        assert len(r.losses) == 4 and len(r.grad_init) == 2
    assert len(tiny.run("dyt").scalars) == 5 and len(tiny.run("rezero").scalars) == 4
    assert tiny.curve.names == [
        "block0.norm1",
        "block0.norm2",
        "block1.norm1",
        "block1.norm2",
        "final",
    ]
    assert E.Comparison.from_json(tiny.to_json()) == tiny


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


def test_the_embedding_scalar_multiplies_the_stream_by_a_learnable_sqrt_d():
    """GPTConfig(embed_scale=True): block 0 reads sqrt(D) times the embeddings' sum, and the
    scalar is a parameter that gets a gradient (Zhu et al., App. A)."""
    cfg = GPTConfig(n_layers=1, d_model=16, norm="dyt")
    plain, scaled = TinyGPT(cfg), TinyGPT(cfg.with_(embed_scale=True))
    idx = torch.randint(0, 32, (2, 5), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(scaled.embed(idx), 4.0 * plain.embed(idx))  # sqrt(16) = 4
    scaled(idx).sum().backward()
    assert scaled.embed_gain.grad is not None and plain.embed_gain is None


def _D(finals: dict, longs: dict | None = None, alpha1=None, n: int = 3) -> dict:
    """FAKE TEST DATA: a multi-seed record whose runs end at ``finals[name]`` (one value per
    seed, or one for all) and ``longs[name]``; chance 2.64 (half 1.32)."""
    longs = longs or {}

    def per(v, i):
        return None if v is None else (v[i] if isinstance(v, list) else v)

    seeds = []
    for i in range(n):
        runs = {
            name: {
                "final": per(finals.get(name, 0.02), i),
                "final_long": per(longs.get(name), i),
                "diverged": False,
                "grad_init": [1.0, 2.0],
                "falling": True,
                "falling_long": False,
            }
            for name in E.VARIANTS
        }
        init = {"embedding_rms": 0.3, "branch_input_rms": 0.2, "logits_rms": 0.1}
        seeds.append(
            {
                "seed": i,
                "runs": runs,
                "curve": {
                    "r2_tanh": 0.99,
                    "r2_line": 0.99,
                    "alpha": 0.1,
                    "c": 5.0,
                    "sigma_spread": 1.5,
                    "r2_gaps": [0.0, 0.03],
                },
                "dyt_alpha0": {"1": per(alpha1 if alpha1 is not None else 2.6, i), "0.2": 2.3},
                "init": {k: dict(init) for k in ("layernorm", "dyt", "dyt_scaled", "dyt_alpha1")},
            }
        )
    return {
        "seeds": list(range(n)),
        "chance": 2.64,
        "steps": 80,
        "long_steps": 240,
        "per_seed": seeds,
    }


def test_the_page_verdicts_follow_the_seeds_by_the_rule():
    slow = _D({"none": 2.3, "dyt": [1.8, 2.0, 1.9]}, {"none": 0.1, "dyt": 0.05, "rezero": 0.2})
    assert W.none_verdict(slow) == "slower" and W.dyt_verdict(slow) == "learns more slowly than"
    text = W.describe_comparison(slow, 8, 5e-3)
    assert "learns far more slowly" in text and "trained on all 3 seeds" in text
    assert "**learns more slowly than** LayerNorm" in text
    # one seed of three below the threshold and the others far above: no verdict either way
    mixed = _D({"none": [0.1, 2.3, 2.4]}, {"none": [0.1, 2.3, 2.4]})
    assert W.below_half(mixed, "none").sign == 0 and W.none_verdict(mixed) == "fails"
    assert W.dyt_verdict(_D({"dyt": 0.05})) == "matches"
    assert W.dyt_verdict(_D({"dyt": 0.05, "layernorm": 2.0})) == "does not match"  # no reference
    fails = _D({"dyt": 1.9}, {"dyt": 1.0})
    assert W.dyt_verdict(fails) == "does not match"
    assert "trained" in W.trained_rule(slow, 16) and "| DyT |" in W.table(slow, E.LABELS)


def test_the_alpha0_and_scalar_sentence_follows_the_runs():
    worse = _D({"dyt": [1.8, 2.0, 1.9], "dyt_scaled": [0.2, 0.3, 0.6]}, alpha1=[2.6, 2.6, 2.7])
    text = W.describe_scalar(worse)
    assert "higher than from α₀ = 0.5 on all 3 seeds" in text
    assert "lower than plain DyT's on all 3 seeds" in text
    same = _D({"dyt": [1.8, 2.0, 1.9]}, alpha1=[1.7, 2.1, 1.9])
    assert "no difference detectable with 3 seeds" in W.describe_scalar(same)


def test_speed_words_need_every_round_or_two_standard_errors_beyond_five_percent():
    assert W.speed_word([1.10, 1.12, 1.09]) == "faster than"
    # four reruns of one machine: 3.4-6.6% faster on every round, not shown beyond 5%
    assert W.speed_word([1.037, 1.066, 1.060, 1.034]) == "slightly faster than"
    assert W.speed_word([0.90, 0.92, 0.91]) == "slower than"
    assert W.speed_word([0.97, 1.03, 1.01]) == "as fast as"
    T = {
        "variants": ["layernorm", "none"],
        "seconds": {"layernorm": [2.0, 2.0], "none": [1.0, 1.6]},
    }
    # the no-norm step takes 1.0 and 1.6 of LayerNorm's 2.0: the norms' share 50% and 20%
    assert W.norm_share(T) == pytest.approx(0.35)


def test_stream_and_gain_words_follow_the_data():
    # LayerNorm: variance 1 + l, one more per block; no norm: RMS factors 1.1, 1.1, 1.3, 1.5
    lin = {"layernorm": [np.sqrt(1 + l) for l in range(5)], "none": [1, 1.1, 1.21, 1.573, 2.36]}
    text = W.describe_stream([lin, lin, lin])
    assert "variance grows about linearly" in text and "larger in the second half" in text
    # variance doubling per block: the increments grow exactly as the variance does
    geo = {"layernorm": [2 ** (l / 2) for l in range(5)], "none": [1, 1.5, 2.25, 2.7, 3.24]}
    geo2 = {**geo, "layernorm": [2 ** (l / 2) * (1 + 0.01 * l * l) for l in range(5)]}
    text = W.describe_stream([geo2, geo2, geo2])
    assert "grow with the stream, as in geometric" in text and "smaller in the second" in text
    g = {"attn": [0.1, 0.1, 0.2, 0.5, 0.6, 0.7], "mlp": [0.2, 0.2, 0.2, 0.2, 0.3, 0.3]}
    assert "more than the MLP's on all 3 seeds" in W.describe_gains([g, g, g])
