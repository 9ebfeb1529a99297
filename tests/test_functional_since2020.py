"""DyT and QK-norm attention (normedu._functional_since2020, re-exported by functional)
against torch, written out here with torch operations and differentiated by autograd.

dyt_backward's finite-difference and dtype checks are the sweeps of test_functional.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normedu import functional as F


def t(a, grad: bool = False) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 4)])
def test_dyt_and_its_backward_match_torch_autograd(shape):
    r = np.random.default_rng(len(shape))
    x, dy = r.normal(size=shape) * 2, r.normal(size=shape)
    alpha, g, b = 0.7, r.normal(size=shape[-1]), r.normal(size=shape[-1])
    xt, at, gt, bt = t(x, True), t(alpha, True), t(g, True), t(b, True)
    out = gt * torch.tanh(at * xt) + bt
    out.backward(t(dy))
    np.testing.assert_allclose(F.dyt(x, alpha, g, b), out.detach().numpy(), rtol=1e-12)
    dx, da, dg, db = F.dyt_backward(dy, x, np.float64(alpha), g)
    assert np.shape(da) == ()
    for got, want in ((dx, xt), (da, at), (dg, gt), (db, bt)):
        np.testing.assert_allclose(got, want.grad.numpy(), rtol=1e-10, atol=1e-12)


def _torch_qk(q, k, v, gq, gk, eps, causal):
    """Written out with torch operations (torch's own attention does the softmax)."""

    def rms(z, g):
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps) * g

    return torch.nn.functional.scaled_dot_product_attention(
        rms(q, gq), rms(k, gk), v, is_causal=causal
    )


@pytest.mark.parametrize("causal", [False, True])
def test_qk_norm_attention_matches_torch(causal):
    r = np.random.default_rng(3)
    q, k, v = (r.normal(size=(2, 3, 5, 8)) * 3 + 1 for _ in range(3))
    gq, gk = r.uniform(0.5, 2, 8), r.uniform(0.5, 2, 8)
    want = _torch_qk(t(q), t(k), t(v), t(gq), t(gk), 1e-6, causal).numpy()
    got = F.qk_norm_attention(q, k, v, gq, gk, causal=causal)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # float32 in, float32 out, computed as the float64 of the same inputs
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    out32 = F.qk_norm_attention(q32, k32, v32, gq.astype(np.float32), gk.astype(np.float32))
    assert out32.dtype == np.float32


def test_qk_norm_attention_stays_finite_and_causal_weights_are_exactly_zero():
    r = np.random.default_rng(4)
    q, k, v = (r.normal(size=(1, 2, 6, 4)) for _ in range(3))
    big = np.full(4, 1e4)
    # scores up to about 1e8 · 2: a plain exp overflows (the test can fail) ...
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.all(np.isfinite(np.exp(1e8 * np.ones(3)) / np.exp(1e8 * np.ones(3))))
    want = _torch_qk(t(q), t(k), t(v), t(big), t(big), 1e-6, False).numpy()
    np.testing.assert_allclose(F.qk_norm_attention(q, k, v, big, big), want, rtol=1e-9)
    # ... causal: query 0 sees only key 0, whatever the later values are (even 1e300)
    v2 = v.copy()
    v2[..., 1:, :] = 1e300
    out = F.qk_norm_attention(q, k, v2, np.ones(4), np.ones(4), causal=True)
    np.testing.assert_array_equal(out[..., 0, :], v[..., 0, :])


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: F.dyt(np.ones((2, 4)), np.ones(4), np.ones(4), np.ones(4)), ["alpha", "(4,)"]),
        (lambda: F.dyt(np.ones((2, 4)), 0.5, np.ones(3), np.ones(4)), ["gamma", "(3,)"]),
        (lambda: F.dyt_backward(np.ones((2, 3)), np.ones((2, 4)), 0.5, np.ones(4)), ["dout"]),
        (
            lambda: F.qk_norm_attention(np.ones((1, 1, 3, 4)), np.ones((1, 1, 2, 4)),
                                        np.ones((1, 1, 2, 4)), np.ones(4), np.ones(4)),
            ["one shape", "(1, 1, 2, 4)"],
        ),
        (
            lambda: F.qk_norm_attention(*[np.ones((1, 1, 3, 4))] * 3, np.ones(1), np.ones(4)),
            ["g_q", "(1,)"],
        ),
    ],
)  # fmt: skip
def test_bad_input_raises_clear_errors(call, words):
    with pytest.raises(ValueError) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in message: {info.value}"
