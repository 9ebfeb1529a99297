"""Per-layer gradient-norm collectors and the gradient-flow experiments, against autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from normedu import functional as NF
from normedu.experiments import gradflow as G
from normedu.gradflow import (
    GradProfile,
    OutputGradRecorder,
    gradient_profile,
    param_grad_norms,
    spread,
)


def _stack(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 7), nn.Tanh(), nn.Linear(7, 3))


def _loss(model, x, w):
    # A random linear functional of the output: the upstream gradient is not all-ones.
    return (model(x) * w).sum()


def test_param_grad_norms_match_manual():
    model = _stack()
    x, w = torch.randn(4, 5), torch.randn(4, 3)
    _loss(model, x, w).backward()
    layers = {"a": model[0], "b": model[2], "c": model[4]}
    got = param_grad_norms(layers)
    for name, m in layers.items():
        expected = torch.sqrt(m.weight.grad.pow(2).sum() + m.bias.grad.pow(2).sum())
        assert got[name] == pytest.approx(float(expected), rel=1e-6)


def test_param_grad_norms_need_backward():
    model = _stack()
    with pytest.raises(ValueError, match="backward"):
        param_grad_norms({"a": model[0]})
    with pytest.raises(TypeError, match="mapping"):
        param_grad_norms([model[0]])
    with pytest.raises(TypeError, match="nn.Module"):
        param_grad_norms({"a": 3})


def test_output_grad_recorder_matches_autograd_grad():
    model = _stack(1)
    x, w = torch.randn(4, 5), torch.randn(4, 3)
    # Independent reference: autograd.grad w.r.t. the intermediate activations.
    h1 = model[0](x)
    h2 = model[2](model[1](h1))
    out = model[4](model[3](h2))
    g1, g2 = torch.autograd.grad((out * w).sum(), (h1, h2))
    with OutputGradRecorder({"first": model[0], "middle": model[2]}) as rec:
        _loss(model, x, w).backward()
    assert rec.norms["first"] == pytest.approx(float(g1.norm()), rel=1e-6)
    assert rec.norms["middle"] == pytest.approx(float(g2.norm()), rel=1e-6)
    # hooks are removed on exit: a second pass records nothing new
    _loss(model, x, w).backward()
    assert rec.norms["first"] == pytest.approx(float(g1.norm()), rel=1e-6)


def test_output_grad_recorder_sums_shared_layer_calls():
    lin = nn.Linear(3, 3)
    x, w = torch.randn(2, 3), torch.randn(2, 3)
    a = lin(x)
    b = lin(a)
    ga, gb = torch.autograd.grad((b * w).sum(), (a, b))
    with OutputGradRecorder({"lin": lin}) as rec:
        (lin(lin(x)) * w).sum().backward()
    expected = float(torch.sqrt(ga.pow(2).sum() + gb.pow(2).sum()))
    assert rec.norms["lin"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("kind", ["param", "output"])
def test_gradient_profile(kind):
    model = _stack(2)
    x, w = torch.randn(4, 5), torch.randn(4, 3)
    layers = {"a": model[0], "c": model[4]}
    prof = gradient_profile(model, layers, lambda m: _loss(m, x, w), kind=kind)
    assert isinstance(prof, GradProfile) and prof.names == ("a", "c") and prof.kind == kind
    assert prof.norms.shape == (2,) and (prof.norms > 0).all()
    assert prof.spread == pytest.approx(prof.norms.max() / prof.norms.min())
    assert prof.last_over_first == pytest.approx(prof.norms[1] / prof.norms[0])
    # calling twice gives the same numbers: stale .grad is cleared first
    again = gradient_profile(model, layers, lambda m: _loss(m, x, w), kind=kind)
    np.testing.assert_allclose(again.norms, prof.norms)


def test_gradient_profile_errors():
    model = _stack()
    with pytest.raises(ValueError, match="kind"):
        gradient_profile(model, {"a": model[0]}, lambda m: m(torch.ones(1, 5)).sum(), kind="x")
    with pytest.raises(ValueError, match="scalar"):
        gradient_profile(model, {"a": model[0]}, lambda m: m(torch.ones(1, 5)))


def test_spread():
    assert spread([2.0, 1.0, 4.0]) == 4.0
    assert spread([0.0, 1.0]) == float("inf")
    with pytest.raises(ValueError):
        spread([])


# --------------------------------------------------------------------------- experiments


def test_jacobian_demo_parts_sum_and_match_autograd():
    demo = G.jacobian_demo(d=7, seed=3)
    np.testing.assert_allclose(
        demo.scaling + demo.centering + demo.decorrelation, demo.jac, atol=1e-14
    )
    assert demo.max_abs_error < 1e-12
    # an independent finite-difference check of the closed form, with eps
    x, h = demo.x, 1e-6
    fd = np.stack(
        [(NF.layer_norm(x + h * e) - NF.layer_norm(x - h * e)) / (2 * h) for e in np.eye(7)], axis=1
    )
    np.testing.assert_allclose(demo.jac, fd, atol=1e-7)
    np.testing.assert_allclose(demo.eigenvalues, demo.predicted_eigenvalues, atol=1e-10)
    assert demo.null_residuals["ones"] < 1e-12
    eff = demo.effects()
    assert eff["gain_scaling"] == pytest.approx(1 / demo.sigma)
    assert abs(eff["mean_after_centering"]) < 1e-12 and abs(eff["mean_of_g"]) > 1e-3
    assert abs(eff["along_x_hat_after_all"]) < 1e-4 < abs(eff["along_x_hat_before"])
    with pytest.raises(ValueError, match="d must be"):
        G.jacobian_demo(d=2)


def test_self_regulation_gain_is_one_over_sigma():
    sr = G.self_regulation(scales=(0.1, 1.0, 10.0), d=16)
    np.testing.assert_allclose(sr.gain, sr.predicted, rtol=1e-8)
    prod = sr.gain * sr.sigma
    assert prod.max() / prod.min() < 1.001
    assert sr.gain[0] > 50 * sr.gain[-1]
    with pytest.raises(ValueError, match="positive"):
        G.self_regulation(scales=(0.0, 1.0))


def test_highway_grid_small(monkeypatch):
    monkeypatch.setitem(
        G.SIZES,
        "cpu",
        G.HighwaySize(
            depth=6, d_model=16, n_heads=2, batch=4, n_items=3, vocab=10, seeds=2, threads=1
        ),
    )
    G.highway_grid.cache_clear()
    try:
        grid = G.highway_grid("cpu")
        assert set(grid.norms) == {k for k, *_ in G.CELLS}
        # the small-init cell is built with GPT-2's init: its spread is the narrowest of the
        # two residual stacks without a norm (the same blocks under Xavier init)
        assert grid.spread(G.SMALL_INIT) < grid.spread("no norm+residual")
        assert all(len(v) == 6 for v in grid.norms.values())
        # each seed's profile is kept, and the plotted profile is their mean
        for key, profiles in grid.per_seed.items():
            assert np.shape(profiles) == (2, 6) and profiles[0] != profiles[1]
            np.testing.assert_allclose(grid.norms[key], np.mean(profiles, axis=0))
            assert grid.seed_spreads(key) == [max(p) / min(p) for p in profiles]
        # the unnormalized, residual-free stack has the widest spread
        assert grid.spread("no norm, no residual") > grid.spread("layernorm+residual")
        again = G.HighwayGrid.from_json(grid.to_json())
        assert again == grid
    finally:
        G.highway_grid.cache_clear()


def test_highway_grid_default_preset_shares_the_cache(monkeypatch):
    monkeypatch.setenv("NORMEDU_PRESET", "cpu")
    monkeypatch.setitem(
        G.SIZES,
        "cpu",
        G.HighwaySize(
            depth=2, d_model=8, n_heads=2, batch=2, n_items=2, vocab=8, seeds=1, threads=1
        ),
    )
    G.highway_grid.cache_clear()
    try:
        assert G.highway_grid() is G.highway_grid("cpu")
    finally:
        G.highway_grid.cache_clear()
