"""RMSNorm chapter helpers against closed forms and torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normedu.experiments import rmsnorm as R


def test_worked_example_closed_form():
    ex = R.worked_example()
    assert ex["mean"] == 2.0 and ex["var"] == 3.5
    assert ex["mean_sq"] == 7.5 and ex["rms"] == pytest.approx(math.sqrt(7.5), abs=1e-15)
    expected = np.array([2.0, 4.0, -1.0, 3.0]) / math.sqrt(7.5)
    np.testing.assert_allclose(ex["rms_out"], expected, rtol=1e-14)
    np.testing.assert_allclose(ex["rms_out"].round(4), [0.7303, 1.4606, -0.3651, 1.0954])
    assert round(ex["rms_out_mean"], 4) == 0.7303
    np.testing.assert_allclose(ex["ln"], (np.array([2, 4, -1, 3]) - 2) / math.sqrt(3.5))
    np.testing.assert_allclose(ex["torch_rms"], ex["rms_out"], rtol=1e-12)
    np.testing.assert_allclose(ex["torch_ln"], ex["ln"], rtol=1e-12, atol=1e-15)
    assert ex["rms_out_ms"] == pytest.approx(1.0) and ex["ln_var"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="vector"):
        R.worked_example([1.0])


def test_example_markdown_has_the_numbers():
    md = R.example_markdown(R.worked_example())
    assert md.startswith("| step | LayerNorm | RMSNorm |")
    for s in ("0.7303", "1.4606", "-0.3651", "1.0954", "2.7386", "√7.5"):
        assert s in md


def test_param_counts():
    assert R.param_counts(768) == {"layernorm": 1536, "rmsnorm": 768}


def test_partial_rms_numpy_and_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 32))
    got = R.partial_rms(x, 0.25)
    expected = x / np.sqrt((x[:, :8] ** 2).mean(1, keepdims=True))
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(R.partial_rms(x, 1.0), x / np.sqrt((x**2).mean(1, keepdims=True)))
    gt = R.partial_rms(torch.tensor(x), 0.25)
    assert isinstance(gt, torch.Tensor)
    np.testing.assert_allclose(gt.numpy(), expected)
    with pytest.raises(ValueError, match="fraction"):
        R.partial_rms(x, 0.0)


def test_prms_check_untimed():
    res = R.prms_check(ps=(0.125, 0.5, 1.0), n=256, d=64, timed=False)
    assert res.rel_err_equal[-1] == 0 and res.rel_err_unequal[-1] == 0
    # more features, better estimate; unequal scales are worse than equal ones
    assert res.rel_err_equal[0] > res.rel_err_equal[1] > 0
    assert (res.rel_err_unequal[:2] > res.rel_err_equal[:2]).all()
    assert np.isnan(res.time_ratio).all()


def test_eps_check_matches_formula():
    rows = R.eps_check(scales=(1.0, 1e-3), d=64)
    feps = torch.finfo(torch.float32).eps
    for row in rows:
        s = row["scale"]
        # the inputs have RMS exactly s, so the output RMS is s / sqrt(s^2 + eps)
        assert row["default"] == pytest.approx(s / math.sqrt(s * s + feps), rel=1e-4)
        assert row["1e-5"] == pytest.approx(s / math.sqrt(s * s + 1e-5), rel=1e-4)
        assert row["1e-6"] == pytest.approx(s / math.sqrt(s * s + 1e-6), rel=1e-4)


@pytest.mark.parametrize("eps", [0.0, 1e-2])
def test_backward_walk_against_finite_differences(eps):
    bc = R.backward_check(d=6, seed=3, eps=eps)
    x = bc["x"]
    rng = np.random.default_rng(3)  # the same draws as backward_check: x, gamma, dout
    rng.normal(size=x.shape)
    gamma = rng.uniform(0.5, 1.5, size=6)
    dout = rng.normal(size=x.shape)

    def loss(z):
        y = gamma * z / np.sqrt((z * z).mean(-1, keepdims=True) + eps)
        return float((y * dout).sum())

    h, fd = 1e-6, np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        fd[idx] = (loss(x + e) - loss(x - e)) / (2 * h)
    np.testing.assert_allclose(bc["dx_walk"], fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(bc["dx_compact"], fd, rtol=1e-6, atol=1e-8)
    # dx is orthogonal to x up to the eps term, and does not sum to zero
    s = (x * x).mean(-1)
    want = (gamma * dout * x).sum(-1) / np.sqrt(s + eps) * eps / (s + eps)
    np.testing.assert_allclose((x * fd).sum(-1), want, atol=1e-8)
    assert np.abs(fd.sum(-1)).min() > 1e-3


def test_gamma_breaks_mean_square_one():
    ms = R.gamma_mean_square(d=256, seed=1)
    assert ms["ms_xhat"] == pytest.approx(1.0, abs=1e-12)
    assert ms["ms_out"] > 1.3 and ms["ms_out"] == pytest.approx(ms["mean_gamma_sq"], rel=0.1)


def test_center_norm_recentres_without_rescaling():
    m = R.CenterNorm(5)
    with torch.no_grad():
        m.weight.copy_(torch.arange(1.0, 6.0))
        m.bias.fill_(0.5)
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)) * 7
    want = torch.arange(1.0, 6.0) * (x - x.mean(-1, keepdim=True)) + 0.5
    torch.testing.assert_close(m(x), want)
    torch.testing.assert_close(m(2 * x) - 0.5, 2 * (m(x) - 0.5))  # no re-scaling


def test_recentre_ablation_tiny():
    size = R.AblationSize(depth=2, width=8, epochs=1, gains=(1.0, 3.0), seeds=(0,))
    res = R.recentre_ablation(size)
    assert set(res.acc) == {1.0, 3.0}
    for gain in size.gains:
        assert list(res.acc[gain]) == list(R.ABLATION_NORMS)
        assert all(0.0 <= a <= 1.0 for accs in res.acc[gain].values() for a in accs)
    # the variants start from the same Linear weights
    a = R._ablation_model("center", 3.0, 0, size)
    b = R._ablation_model("none", 3.0, 0, size)
    torch.testing.assert_close(a[0].weight, b[0].weight)
    assert isinstance(a[1], R.CenterNorm) and isinstance(b[1], torch.nn.Identity)
