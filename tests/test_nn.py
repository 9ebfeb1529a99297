"""normedu.nn (textbook torch norms) against torch.nn / torch.nn.functional."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF
from ulp_helpers import naive_half_layer_norm, ulp_error

from normedu import nn as nnu


def randn(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 16), (2, 2, 3, 7)])
def test_layer_norm_module_matches_torch_forward_and_backward(shape):
    d = shape[-1]
    mine = nnu.LayerNorm(d).double()
    ref = torch.nn.LayerNorm(d).double()
    with torch.no_grad():
        w, b = randn(d, seed=1), randn(d, seed=2)
        mine.weight.copy_(w), mine.bias.copy_(b), ref.weight.copy_(w), ref.bias.copy_(b)
    x1 = (randn(*shape, seed=3) * 3 + 2).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    up = randn(*shape, seed=4)
    y1, y2 = mine(x1), ref(x2)
    torch.testing.assert_close(y1, y2)
    y1.backward(up), y2.backward(up)
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(mine.weight.grad, ref.weight.grad)
    torch.testing.assert_close(mine.bias.grad, ref.bias.grad)


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 16)])
def test_rms_norm_module_matches_torch(shape):
    d = shape[-1]
    mine = nnu.RMSNorm(d, eps=1e-5).double()
    ref = torch.nn.RMSNorm(d, eps=1e-5).double()
    with torch.no_grad():
        w = randn(d, seed=5)
        mine.weight.copy_(w), ref.weight.copy_(w)
    x1 = randn(*shape, seed=6).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    up = randn(*shape, seed=7)
    y1, y2 = mine(x1), ref(x2)
    torch.testing.assert_close(y1, y2)
    y1.backward(up), y2.backward(up)
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(mine.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("shape", [(16, 4), (8, 4, 5)])
def test_batch_norm_module_matches_torch_over_steps_and_in_eval(shape):
    mine = nnu.BatchNorm1d(4).double()
    ref = torch.nn.BatchNorm1d(4).double()
    for step in range(5):
        x = randn(*shape, seed=10 + step) * (step + 1) + step
        torch.testing.assert_close(mine(x), ref(x))
    torch.testing.assert_close(mine.running_mean, ref.running_mean)
    torch.testing.assert_close(mine.running_var, ref.running_var)
    mine.eval(), ref.eval()
    x = randn(2, *shape[1:], seed=99)
    torch.testing.assert_close(mine(x), ref(x))


def test_batch_norm_backward_matches_torch():
    x1 = (randn(8, 3, 4, seed=1) * 2).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    up = randn(8, 3, 4, seed=2)
    nnu.batch_norm(x1, training=True).backward(up)
    TF.batch_norm(x2, None, None, training=True).backward(up)
    torch.testing.assert_close(x1.grad, x2.grad)


def test_batch_norm_channel_arrays_are_keyword_only_in_both_modules():
    # Four same-shaped (C,) arrays passed by position could be swapped silently.
    import numpy as np

    from normedu import functional as Fn

    x, c = randn(4, 3, seed=5), torch.ones(3)
    with pytest.raises(TypeError):
        nnu.batch_norm(x, c, c, c, c)
    with pytest.raises(TypeError):
        Fn.batch_norm(x.numpy(), np.ones(3), np.ones(3))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_computed_in_float32(dtype):
    """Within one output ULP of float64 LayerNorm on the same half inputs; a norm that keeps its
    mean and variance in the half dtype (the negative control) is hundreds of ULPs off here."""
    d = 256
    # An offset of 25 standard deviations: the half dtype's spacing at 50 is what a naive mean
    # loses, relative to a unit output.
    x = (randn(4, d, seed=3, dtype=torch.float32) * 2 + 50).to(dtype)
    w = (1 + 0.5 * randn(d, seed=4, dtype=torch.float32)).to(dtype)
    b = randn(d, seed=5, dtype=torch.float32).to(dtype)
    ref = TF.layer_norm(x.double(), (d,), w.double(), b.double(), eps=1e-5)
    out = nnu.layer_norm(x, w, b, eps=1e-5)
    assert out.dtype == dtype
    assert ulp_error(out, ref) <= 1.0
    assert ulp_error(naive_half_layer_norm(x, w, b, eps=1e-5), ref) > 20.0
    rms = nnu.rms_norm(x, w, eps=1e-5)
    assert rms.dtype == dtype
    rms_ref = TF.rms_norm(x.double(), (d,), w.double(), eps=1e-5)
    assert ulp_error(rms, rms_ref) <= 1.0


def test_parameter_counts_match_the_comparison_table():
    d = 768
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(nnu.LayerNorm(d)) == 2 * d == count(torch.nn.LayerNorm(d))
    assert count(nnu.RMSNorm(d)) == d == count(torch.nn.RMSNorm(d))
    bn = nnu.BatchNorm1d(d)
    assert count(bn) == 2 * d
    assert sum(b.numel() for b in bn.buffers()) == 2 * d


def test_make_norm_and_errors():
    assert isinstance(nnu.make_norm("LayerNorm", 4), nnu.LayerNorm)
    assert isinstance(nnu.make_norm("rmsnorm", 4), nnu.RMSNorm)
    assert isinstance(nnu.make_norm("none", 4), torch.nn.Identity)
    with pytest.raises(ValueError, match="unknown norm 'whitening'"):
        nnu.make_norm("whitening", 4)
    with pytest.raises(ValueError, match=r"weight has shape \(3,\), expected \(4,\)"):
        nnu.layer_norm(torch.ones(2, 4), torch.ones(3))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nnu.batch_norm(torch.ones(1, 4), training=True)
    with pytest.raises(TypeError, match="floating-point"):
        nnu.layer_norm(torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="non-empty last"):
        nnu.rms_norm(torch.ones(2, 0))
