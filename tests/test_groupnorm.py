"""GroupNorm and InstanceNorm (normedu.functional and normedu.nn) against independent references.

- forwards against torch.nn.functional.group_norm / instance_norm / layer_norm (float64);
- the hand-written backward against torch autograd and central finite differences, always with
  a random upstream gradient (all-ones upstream gives dx = 0 for any normalization);
- the two limits: G = 1 is LayerNorm over (C, *spatial), G = C is InstanceNorm;
- the torch module against torch.nn.GroupNorm, forward and backward;
- dtypes and clear errors.
"""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from normedu import functional as F
from normedu import nn as nnu
from normedu.conventions import DEFAULT_EPS

REPO = Path(__file__).resolve().parent.parent

# (shape, G): no spatial axis, one, two and three spatial axes, G = 1 and G = C included.
CASES = [((3, 6), 2), ((2, 4, 5), 4), ((2, 6, 3, 4), 3), ((2, 4, 2, 3, 2), 1), ((1, 8, 3), 8)]


def t(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def sample(shape, seed):
    r = np.random.default_rng(seed)
    c = shape[1]
    x = r.normal(size=shape) * r.uniform(0.5, 3) + r.normal() * 4
    return x, r.normal(size=c), r.normal(size=c), r.normal(size=shape)


@pytest.mark.parametrize("shape, G", CASES)
def test_forward_and_backward_match_torch_autograd(shape, G):
    x, g, b, dy = sample(shape, seed=len(shape) * 10 + G)
    for eps in (DEFAULT_EPS, 0.1):
        want = TF.group_norm(t(x), G, t(g), t(b), eps).numpy()
        np.testing.assert_allclose(F.group_norm(x, g, b, G, eps), want, rtol=1e-10, atol=1e-10)
    xt, gt, bt = t(x, True), t(g, True), t(b, True)
    TF.group_norm(xt, G, gt, bt, DEFAULT_EPS).backward(t(dy))
    dx, dg, db = F.group_norm_backward(dy, x, g, G)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dg, gt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-8, atol=1e-10)
    # Without gamma/beta: identity affine.
    np.testing.assert_allclose(
        F.group_norm(x, None, None, G), TF.group_norm(t(x), G).numpy(), rtol=1e-10, atol=1e-10
    )


def numeric_grad(f, x, h=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        fp = f(x)
        x[i] = old - h
        fm = f(x)
        x[i] = old
        grad[i] = (fp - fm) / (2 * h)
    return grad


def test_backward_matches_finite_differences():
    x, g, b, dy = sample((2, 4, 3), seed=5)
    dx, dg, db = F.group_norm_backward(dy, x, g, 2)
    kw = dict(rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        dx, numeric_grad(lambda z: np.sum(F.group_norm(z, g, b, 2) * dy), x.copy()), **kw
    )
    np.testing.assert_allclose(
        dg, numeric_grad(lambda z: np.sum(F.group_norm(x, z, b, 2) * dy), g.copy()), **kw
    )
    np.testing.assert_allclose(
        db, numeric_grad(lambda z: np.sum(F.group_norm(x, g, z, 2) * dy), b.copy()), **kw
    )


def test_one_group_is_layernorm_and_c_groups_is_instancenorm():
    x, g, b, _ = sample((3, 4, 5, 2), seed=6)
    # G = 1: LayerNorm over (C, H, W) with no affine, then GroupNorm's per-channel gamma/beta.
    ln = TF.layer_norm(t(x), x.shape[1:]).numpy()
    np.testing.assert_allclose(F.group_norm(x, None, None, 1), ln, rtol=1e-10, atol=1e-10)
    # G = C: InstanceNorm, torch's instance_norm with per-channel weight and bias.
    want = TF.instance_norm(t(x), weight=t(g), bias=t(b), eps=DEFAULT_EPS).numpy()
    np.testing.assert_allclose(F.group_norm(x, g, b, 4), want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(F.instance_norm(x, g, b), want, rtol=1e-10, atol=1e-10)


def test_a_sample_does_not_depend_on_its_batchmates():
    x, g, b, _ = sample((5, 6, 4), seed=7)
    alone = F.group_norm(x[:1], g, b, 3)
    np.testing.assert_array_equal(F.group_norm(x, g, b, 3)[:1], alone)


def test_dtypes_are_preserved_for_every_output():
    x, g, b, dy = sample((2, 4, 3), seed=8)
    x32, dy32 = x.astype(np.float32), dy.astype(np.float32)
    assert F.group_norm(x32, g, b, 2).dtype == np.float32
    assert F.instance_norm(x32.astype(np.float16)).dtype == np.float16
    outs = F.group_norm_backward(dy32, x32, g.astype(np.float32), 2)
    assert [o.dtype for o in outs] == [np.float32] * 3
    np.testing.assert_allclose(
        F.group_norm(x32, g, b, 2), TF.group_norm(t(x32), 2, t(g), t(b)).numpy(), atol=1e-6
    )


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: F.group_norm(np.ones((2, 6, 3)), None, None, 4), ["C = 6", "G = 4", "divisible"]),
        (
            lambda: F.group_norm_backward(np.ones((2, 6)), np.ones((2, 6)), None, 5),
            ["C = 6", "G = 5"],
        ),
        (lambda: F.group_norm(np.ones(6), None, None, 2), ["(6,)", "(N, C"]),
        (lambda: F.group_norm(np.ones((2, 4)), None, None, 0), ["positive"]),
        (lambda: F.group_norm(np.ones((2, 4)), np.ones(2), None, 2), ["gamma", "(2,)", "(4,)"]),
        (
            lambda: F.group_norm_backward(np.ones((2, 3)), np.ones((2, 4)), None, 2),
            ["dout", "(2, 3)"],
        ),
        (lambda: nnu.GroupNorm(4, 6), ["C = 6", "G = 4"]),
        (lambda: nnu.group_norm(torch.ones(2, 6), 4), ["C = 6", "G = 4"]),
    ],
)
def test_bad_input_raises_clear_errors(call, words):
    with pytest.raises(ValueError) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in message: {info.value}"


def _solution_signature(name: str) -> list[str]:
    """Parameter names of ``name`` as the groupnorm assignment's solution notebook defines it."""
    nb = json.loads((REPO / "solutions" / "groupnorm" / "groupnorm.ipynb").read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        for node in ast.walk(ast.parse(src)) if f"def {name}(" in src else ():
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return [a.arg for a in node.args.args]
    raise AssertionError(f"no def {name} in the groupnorm solution notebook")


@pytest.mark.parametrize(
    "ours, theirs",
    [("group_norm", "groupnorm_forward"), ("group_norm_backward", "groupnorm_backward")],
)
def test_reference_takes_the_exercise_argument_order(ours, theirs):
    # One GroupNorm order for the reference and the exercise, so that F.group_norm(x, gamma,
    # beta, G) can be compared with a student's groupnorm_forward(x, gamma, beta, G) as is.
    assert list(inspect.signature(getattr(F, ours)).parameters) == _solution_signature(theirs)


@pytest.mark.parametrize("shape, G", [((4, 8), 2), ((2, 6, 3, 3), 3)])
def test_module_matches_torch_groupnorm_forward_and_backward(shape, G):
    c = shape[1]
    mine, ref = nnu.GroupNorm(G, c).double(), torch.nn.GroupNorm(G, c).double()
    gen = torch.Generator().manual_seed(G)
    with torch.no_grad():
        w, b = torch.randn(c, generator=gen, dtype=torch.float64), torch.randn(c, generator=gen)
        mine.weight.copy_(w), mine.bias.copy_(b), ref.weight.copy_(w), ref.bias.copy_(b)
    x1 = (torch.randn(*shape, generator=gen, dtype=torch.float64) * 3 + 2).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    up = torch.randn(*shape, generator=gen, dtype=torch.float64)
    y1, y2 = mine(x1), ref(x2)
    torch.testing.assert_close(y1, y2)
    y1.backward(up), y2.backward(up)
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(mine.weight.grad, ref.weight.grad)
    torch.testing.assert_close(mine.bias.grad, ref.bias.grad)


def test_make_norm_builds_groupnorm_with_groups_of_eight():
    m = nnu.make_norm("GroupNorm", 64)
    assert isinstance(m, nnu.GroupNorm) and m.groups == 8
    assert nnu.make_norm("groupnorm", 12).groups == 1
    half = torch.randn(3, 16).to(torch.bfloat16)
    assert nnu.make_norm("groupnorm", 16)(half).dtype == torch.bfloat16


# --------------------------------------------------------------------------- chapter pieces


def test_batchmates_measurement_against_a_direct_computation():
    from normedu.experiments.groupnorm import batchmates

    r = batchmates(batch=4, n_batches=5, channels=4, groups=2, size=3, seed=1)
    # Recompute batch 0 independently with torch: the same RNG draws, torch's norms.
    rng = np.random.default_rng(1)
    sample = rng.normal(size=(4, 3, 3))
    mates = rng.normal(rng.normal(0, 1), rng.uniform(0.5, 2.0), size=(3, 4, 3, 3))
    x = t(np.concatenate([sample[None], mates]))
    bn = TF.batch_norm(x, None, None, training=True)[0, 0, 0, 0].item()
    gn = TF.group_norm(x, 2)[0, 0, 0, 0].item()
    assert r["batchnorm"][0] == pytest.approx(bn, abs=1e-12)
    assert r["groupnorm"][0] == pytest.approx(gn, abs=1e-12)
    assert r["alone"] == pytest.approx(TF.group_norm(x[:1], 2)[0, 0, 0, 0].item(), abs=1e-12)
    assert r["max_change"]["groupnorm"] == 0.0 and r["max_change"]["batchnorm"] > 0.1
    with pytest.raises(ValueError, match="batch must be >= 2"):
        batchmates(batch=1)


def test_plots_return_figures_with_the_data():
    from normedu.plots import groupnorm as P

    fig = P.normalization_cubes(n=2, c=4, hw=2, groups=2)
    assert [ax.get_gid() for ax in fig.axes] == list(P.CUTS)
    assert all(ax.get_title() for ax in fig.axes)
    with pytest.raises(ValueError, match="must divide"):
        P.normalization_cubes(c=6, groups=4)
    mask = P._highlight("groupnorm", 2, 4, 3, 2)
    assert mask.sum() == 2 * 3 and mask[0, :2].all() and not mask[1].any()
    sweep = {"batch_sizes": [2, 4], "batchnorm": [0.5, 0.1], "groupnorm": [0.1, 0.1]}
    fig = P.batch_size_errors(sweep, norms=("batchnorm", "groupnorm"))
    lines = fig.axes[0].get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), [50, 10])
    fig = P.batchmates({"batchnorm": [0.1, 0.3], "groupnorm": [0.2, 0.2]}, alone=0.2)
    assert len(fig.axes[0].collections) == 2


def test_claims_are_registered_and_follow_their_rules(tmp_path, monkeypatch):
    from normedu import claims, ledger  # noqa: F401  (importing claims registers them)
    from normedu.experiments import convnet as CN

    # The CNN claims on a tiny sweep: one batch size, two seeds, two values of G.
    tiny = CN.ConvSize((32,), 1, (0, 1), 32, (1, 16), 32, 1, (0, 1))
    monkeypatch.setenv("NORMEDU_PRESET", "cpu")
    monkeypatch.setitem(CN.SIZES, "cpu", tiny)
    fns = (CN.train_cnn, CN.train_cnns, CN.batch_size_sweep, CN.group_sweep)
    for fn in fns:
        fn.cache_clear()
    try:
        got = {c.id: c for c in ledger.check("groupnorm", directory=tmp_path)}
        sweep, gs = CN.batch_size_sweep(), CN.group_sweep()
    finally:
        for fn in fns:
            fn.cache_clear()
    assert set(got) == {
        "gn.limits", "gn.batch_independent", "gn.small_batch", "gn.cnn_small_batch",
        "gn.imagenet", "gn.groups",
    }  # fmt: skip
    fixed = ("gn.limits", "gn.batch_independent", "gn.small_batch")
    assert {got[k].verdict for k in fixed} <= {"confirmed", "cited"}
    # The CNN verdicts follow from the runs by the rule each claim states.
    small = "confirmed" if sweep["crossover"] is not None else "not reproduced"
    assert got["gn.cnn_small_batch"].verdict == small
    assert got["gn.groups"].verdict == ("confirmed" if gs["beats_both"] else "not reproduced")
    assert got["gn.groups"].per_seed["G=1"] == gs["all"][0]
    assert f"batch {sweep['batch_sizes'][0]}" in got["gn.cnn_small_batch"].measured


def test_cnn_sweep_verdict_counts_the_clear_sizes_of_each_winner():
    from normedu.claims import groupnorm as GC

    noise = {"diff": 0.004, "se": 0.004, "clear": False}
    gn_wins = {"diff": -0.03, "se": 0.005, "clear": True}
    bn_wins = {"diff": 0.03, "se": 0.005, "clear": True}
    sweep = {
        "batch_sizes": [2, 4, 8, 16],
        "seeds": [0, 1, 2],
        "crossover": None,  # GroupNorm is not clearly better at batch 2
        "gn_minus_bn": [noise, bn_wins, gn_wins, noise],
        "batchnorm_all": [[0.05, 0.06, 0.05]] * 4,
        "groupnorm_all": [[0.05, 0.07, 0.05]] * 4,
    }
    text = GC.describe_cnn_sweep(sweep)
    assert "at the smallest batch, 2. Of the 4 batch sizes" in text
    assert (
        "lower by the rule at 1 and BatchNorm's at 1; GroupNorm's mean error is lower at 1" in text
    )
    sweep["gn_minus_bn"] = [noise] * 4
    assert "at 0 and BatchNorm's at 0" in GC.describe_cnn_sweep(sweep)
    sweep["crossover"] = 4
    assert "at batch 4 and below" in GC.describe_cnn_sweep(sweep)


@pytest.mark.parametrize("shape, G", [((0, 2), 1), ((0, 4, 3), 2)])
def test_an_empty_batch_gives_an_empty_result_as_torch_does(shape, G):
    # PyTorch's OpInfo samples include x of shape (0, 2) with G = 1: F.group_norm returns an
    # empty tensor (and an empty gradient); a reshape with -1 cannot size an empty group.
    x = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    w = torch.ones(shape[1], dtype=torch.float64, requires_grad=True)
    want = TF.group_norm(x, G, w, None)
    got = nnu.group_norm(x, G, w, None)
    assert got.shape == want.shape == shape and got.dtype == want.dtype
    got.sum().backward()
    assert x.grad.shape == shape and torch.equal(w.grad, torch.zeros(shape[1], dtype=w.dtype))
