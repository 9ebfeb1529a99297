"""normedu.experiments.drift (small sizes) and the drift claims."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normedu.experiments import drift as D

TINY = D.DriftSize(
    depth=12,
    width=32,
    train_depth=6,
    train_width=32,
    steps=30,
    batch=32,
    probe_every=10,
    lin_width=256,
    lin_batch=128,
    lin_depth=40,
)


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    # One thread: these are tiny models, and the machine is shared.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("NORMEDU_PRESET", "cpu")
    monkeypatch.setitem(D.SIZES, "cpu", TINY)
    for fn in (
        D.linear_scale_vs_depth,
        D.init_stats,
        D.init_gain_sweep,
        D.train_digits,
        D.norm_output_stats,
    ):
        fn.cache_clear()
    yield
    torch.set_num_threads(threads)
    for fn in (
        D.linear_scale_vs_depth,
        D.init_stats,
        D.init_gain_sweep,
        D.train_digits,
        D.norm_output_stats,
    ):
        fn.cache_clear()


def test_compounding_is_exact_powers():
    c = D.compounding(gains=(1.05, 0.95), depths=(50, 100))
    assert c[(1.05, 50)] == pytest.approx(math.exp(50 * math.log(1.05)), rel=1e-12)
    assert round(c[(1.05, 50)], 1) == 11.5 and abs(c[(1.05, 100)] - 131) < 1
    assert round(c[(0.95, 100)], 3) == 0.006


def test_linear_net_follows_the_closed_form():
    r = D.linear_scale_vs_depth(gains=(0.9, 1.0, 1.1))
    assert r["depth"].tolist() == list(range(41))
    for g in (0.9, 1.0, 1.1):
        # log-std after L random layers of width 256 stays within ~0.4 of L*log(g).
        assert abs(math.log(r[f"g={g:g}"][-1]) - 40 * math.log(g)) < 0.4
    assert r["g=0.9"][-1] < r["g=1"][-1] < r["g=1.1"][-1]


def test_init_stats_vanish_without_norm_and_not_with_it():
    small = D.init_stats("none", "tanh", 0.3)
    bn = D.init_stats("batchnorm", "tanh", 0.3)
    assert len(small) == len(bn) == 12
    assert small[-1].act_std < 1e-4 * small[0].act_std  # 0.3**11 ~ 2e-6
    assert 0.5 < bn[-1].act_std < 0.75  # tanh of a unit Gaussian has std ~0.63
    rows = D.init_gain_sweep(gains=(0.5, 3.0), norms=("none", "batchnorm"))
    bn_std = [r["last_std"] for r in rows if r["norm"] == "batchnorm"]
    assert max(bn_std) / min(bn_std) < 1.02


def test_norm_output_stats_are_the_norm_layers_outputs():
    """The recorded layers are the BatchNorms (one per block), and the first one's statistics
    match a hand computation: the first Linear's output, standardized per feature."""
    from normedu.data import digits
    from normedu.mlp import deep_mlp

    recs = D.norm_output_stats("batchnorm", 3.0)
    assert len(recs) == TINY.depth and all("Norm" in r.kind for r in recs)
    model = deep_mlp(64, TINY.width, 10, TINY.depth, norm="batchnorm", act="tanh", gain=3.0)
    with torch.no_grad():
        z = model[0](digits().x_train[:512])
    z = (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=False) + 1e-5)
    assert recs[0].act_mean == pytest.approx(float(z.mean()), abs=1e-6)
    assert recs[0].act_std == pytest.approx(float(z.std(unbiased=False)), rel=1e-5)
    assert all(abs(r.act_mean) < 1e-4 and abs(r.act_std - 1) < 1e-3 for r in recs)


def _manual_probe(model, x, y, lr, eta):
    """Gradient-change ratio for one step size, computed on a deep copy (independent of _probe)."""
    import copy

    m = copy.deepcopy(model)
    g0 = torch.autograd.grad(F.cross_entropy(m(x), y), list(m.parameters()))
    with torch.no_grad():
        for p, g in zip(m.parameters(), g0, strict=False):
            p -= eta * lr * g
    g1 = torch.autograd.grad(F.cross_entropy(m(x), y), list(m.parameters()))
    flat = lambda gs: torch.cat([g.reshape(-1) for g in gs])  # noqa: E731
    return float((flat(g1) - flat(g0)).norm() / (eta * lr * flat(g0).norm()))


def test_probe_matches_manual_and_restores_the_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    before = [p.detach().clone() for p in model.parameters()]
    res = D._probe(model, x, y, lr=0.5, etas=(1.0, 2.0))
    after = list(model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=False))
    expected = max(_manual_probe(model, x, y, 0.5, e) for e in (1.0, 2.0))
    assert res["grad_lipschitz"] == pytest.approx(expected, rel=1e-4)
    assert res["loss_range"] >= 0


def test_probe_leaves_batchnorm_buffers_alone():
    from normedu.mlp import deep_mlp

    model = deep_mlp(64, 16, 10, 2, norm="batchnorm", seed=0)
    bufs = [b.clone() for b in model.buffers()]
    x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
    D._probe(model, x, y, lr=0.1)
    assert all(torch.equal(a, b) for a, b in zip(bufs, model.buffers(), strict=False))


def test_training_runs_are_deterministic_and_divergence_is_detected():
    a = D.train_digits("batchnorm", "relu", 0.1, probe=True)
    D.train_digits.cache_clear()
    b = D.train_digits("batchnorm", "relu", 0.1, probe=True)
    np.testing.assert_array_equal(a.loss, b.loss)
    assert len(a.probes) == 3 and a.loss.shape == (30,)
    assert not a.diverged and 0 <= a.test_acc <= 1
    # A loss that starts at ln(10) and must go down with a sane learning rate.
    assert a.loss[0] == pytest.approx(math.log(10), abs=0.2) and a.loss[-5:].mean() < a.loss[0]
    boom = D.train_digits("none", "relu", 50.0)
    assert boom.diverged and np.isnan(boom.test_acc) and not np.isfinite(boom.loss).all()


def test_fragility_rows():
    rows = D.fragility()
    assert [r["setting"] for r in rows] == [label for label, _ in D.FRAGILITY]
    assert all(set(r) == {"setting", "final_loss", "test_acc", "diverged"} for r in rows)


def test_second_moments_match_closed_form_and_monte_carlo():
    # ReLU: E[relu(z)^2] = var / 2 exactly (half the mass of z^2 by symmetry).
    for var in (0.5, 1.0, 4.0):
        assert D.relu_second_moment(var) == pytest.approx(var / 2, rel=1e-3)
    # tanh has no closed form: compare with a one-million-sample Monte Carlo estimate.
    z = np.random.default_rng(0).standard_normal(1_000_000)
    assert D.tanh_second_moment(1.0) == pytest.approx(np.mean(np.tanh(z) ** 2), abs=2e-3)
    assert 1.58 < 1 / math.sqrt(D.tanh_second_moment(1.0)) < 1.60


def test_preactivation_profile_follows_the_variance_recursion():
    # std_L = (g / sqrt 2)^L for ReLU: log within 0.35 of the closed form at depth 10.
    for g in (1.0, 2.0):
        p = D.preactivation_std_profile("relu", g, depth=10, width=128, batch=128, nets=2)
        assert p.shape == (11,) and abs(p[0] - 1) < 0.05
        assert abs(math.log(p[-1]) - 10 * math.log(g / math.sqrt(2))) < 0.35
    p = D.preactivation_std_profile("relu", math.sqrt(2), depth=10, width=128, batch=128, nets=2)
    assert 0.6 < p[-1] < 1.6


def test_update_ratios_match_a_manual_first_step():
    from normedu.data import digits
    from normedu.mlp import deep_mlp, hidden_linears

    run = D.train_digits("none", "relu", 0.1)
    assert run.update_ratios.shape == (30, 6)
    # Rebuild the same model and first batch independently and compute the ratio by hand.
    data = digits()
    torch.manual_seed(0)
    model = deep_mlp(64, 32, 10, 6, norm="none", act="relu", seed=0)
    idx = torch.randint(0, len(data.x_train), (32,), generator=torch.Generator().manual_seed(1))
    F.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
    manual = [
        math.log10(float((0.1 * m.weight.grad).std() / m.weight.detach().std()))
        for m in hidden_linears(model)
    ]
    np.testing.assert_allclose(run.update_ratios[0], manual, rtol=1e-5)


def test_initial_loss_is_ln10_with_a_small_head_and_higher_with_a_large_one():
    assert D.initial_loss("none", "relu") == pytest.approx(math.log(10), abs=0.05)
    assert D.initial_loss("none", "relu", head_gain=3.0) > math.log(10) + 0.3


def test_stacked_seeds_train_as_each_seed_alone():
    """Each seed of the stack is train_digits(seed=s): same initialization, batches and SGD
    steps, so the same losses to float rounding (which a deep net amplifies over many steps:
    compared over the first ten); the whole-set loss is the trained model's on all the data."""
    from normedu.experiments import drift_stack as S

    S.train_seeds.cache_clear()
    losses, whole = S.train_seeds("batchnorm", "relu", 0.1, None, (0, 1), steps=10)
    for s in (0, 1):
        alone = D.train_digits("batchnorm", "relu", 0.1, seed=s).loss[:10]
        np.testing.assert_allclose(losses[s], alone, rtol=1e-4)
    assert whole.shape == (2,) and np.all(np.isfinite(whole)) and whole.min() > 0
    with pytest.raises(ValueError, match="norm"):
        S.train_seeds("layernorm", "relu")


def test_drift_words_follow_the_seed_rule():
    """Hand-made per-seed values: a norm is "flatter" only where the rule finds its |log span|
    below the plain network's, and "lower" only where every seed (or 2 SE) agrees."""
    from normedu.claims import drift as DC

    plain = [100.0, 110.0, 90.0]
    spans = {"plain, gain 5/3": plain, "BatchNorm": [105.0, 95.0, 100.0], "LayerNorm": [60.0] * 3}
    assert DC.flatter_words(spans) == "flatter only with LayerNorm"
    spans["BatchNorm"] = [50.0, 55.0, 45.0]
    assert DC.flatter_words(spans) == "flatter with both"
    final = {
        ("tanh", "none"): [0.4, 0.3, 0.5],
        ("tanh", "batchnorm"): [0.3, 0.35, 0.45],  # lower on 2 of 3 seeds only
        ("relu", "none"): [2.0, 2.1, 1.9],
        ("relu", "batchnorm"): [1.3, 1.4, 1.2],
    }
    words = DC.faster_words(final)
    assert words.startswith("with tanh, no difference detectable with 3 seeds")
    assert words.endswith("with relu, BatchNorm's final loss is lower on all 3 seeds")
