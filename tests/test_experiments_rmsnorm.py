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
