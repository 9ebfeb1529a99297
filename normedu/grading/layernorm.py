"""Checks for the ``layernorm`` assignment (numpy; x of shape (..., D), normalized over D).

Student functions:
- ``layernorm_forward(x, gamma, beta, eps=1e-5) -> out``
- ``layernorm_backward(dout, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)``

References: :func:`normedu.functional.layer_norm` and its backward (tested against PyTorch),
and central finite differences with a random upstream gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.grading.compare import GradingError, assert_array, call, unchanged
from normedu.grading.diagnose import (
    Hypothesis,
    check_affine_backward,
    check_against,
    explained_by_rerun,
    norm_relations,
    normalize,
    normalize_backward,
)
from normedu.grading.gradcheck import numerical_gradient
from normedu.grading.guard import assert_no_shortcut
from normedu.grading.messages import EPS_IGNORED, EPS_OUT, NO_BETA, NO_GAMMA, NO_SQRT, SWAPPED

__all__ = [
    "check_forward_shapes",
    "check_forward_values",
    "check_forward_3d",
    "check_forward_on",
    "check_backward_shapes",
    "check_backward_values",
    "check_backward_3d",
    "check_backward_on",
]

AXIS = "you normalized over axis 0 (across the batch, like BatchNorm); LayerNorm normalizes each sample over its features: mean and variance along the last axis (axis=-1, keepdims=True)"  # noqa: E501
AXIS_3D = "for a 3-D input (B, T, D) LayerNorm normalizes each of the B·T vectors over its D features only: reduce over the last axis (axis=-1), not over axis 0, axis 1 or several axes"  # noqa: E501
ALL = "you normalized with the mean and variance of the whole array; LayerNorm takes them per sample, over the last axis (axis=-1, keepdims=True)"  # noqa: E501
UNBIASED = "your variance divides by D−1; LayerNorm normalizes with the biased variance (divide by D, np.var's default ddof=0)"  # noqa: E501
NO_CENTER = "you forgot to subtract the mean (that is RMSNorm); LayerNorm centers each row first"
ONE_PASS = "E[x²] − E[x]² loses all precision when a row has a large offset; compute the variance of the centered row, mean((x − μ)²) (or np.var)"  # noqa: E501
DX_VAR = "dx is missing the term that comes from the variance depending on x: dx = (1/σ)·(g − mean(g) − x̂·mean(g·x̂)) with g = γ·dout, means over the last axis"  # noqa: E501
DX_MEAN = "dx is missing the term that comes from the mean depending on x: subtract mean(γ·dout) over the last axis"  # noqa: E501
DX_CONST = "dx treats μ and σ as constants (dx = γ·dout/σ); they depend on x, which adds two terms: dx = (1/σ)·(g − mean(g) − x̂·mean(g·x̂))"  # noqa: E501
DX_GAMMA = "dx must include γ: the upstream gradient reaches x̂ as g = γ·dout"
DX_UNBIASED = "your backward uses the unbiased variance; the forward normalizes with the biased one (divide by D)"  # noqa: E501
DX_AXIS = "your backward takes its means over axis 0; LayerNorm's statistics, and so the means in dx, are over the last axis"  # noqa: E501
DG_X = "dγ = Σ dout·x̂ (the normalized input x̂), not dout·x"
DG_MEAN = "dγ and dβ are sums over every leading axis, not means"
DG_AXES = "dγ and dβ have one value per feature: sum over EVERY leading axis (for (B, T, D) input, axes 0 and 1), e.g. .reshape(-1, D).sum(axis=0)"  # noqa: E501


def _probe(shape: tuple, seed: int, offset: float = 0.0, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    d = shape[-1]
    x = offset + scale * rng.standard_normal(shape) + rng.standard_normal(shape[:-1] + (1,))
    return x, rng.uniform(0.5, 2.0, d), rng.standard_normal(d)


def _fwd(f: Callable, x, gamma, beta, eps=1e-5):
    args = [a.copy() for a in (x, gamma, beta)]
    out = call(f, *args, eps=eps)
    for name, before, after in zip(("x", "gamma", "beta"), (x, gamma, beta), args, strict=True):
        unchanged(before, after, name, f.__name__)
    return assert_array(out, x.shape, "out")


def _hypotheses(x, gamma, beta, eps) -> list[Hypothesis]:
    def v(**kw):
        return lambda: normalize(x, -1, gamma, beta, eps, **kw)

    lead = tuple(range(x.ndim - 1))
    return [
        (AXIS, lambda: normalize(x, 0, gamma, beta, eps)),
        (AXIS_3D, lambda: normalize(x, 1, gamma, beta, eps)),
        (AXIS_3D, lambda: normalize(x, (1, 2), gamma, beta, eps)),
        (AXIS_3D, lambda: normalize(x, lead, gamma, beta, eps)),
        (ALL, lambda: normalize(x, tuple(range(x.ndim)), gamma, beta, eps)),
        (UNBIASED, v(ddof=1)),
        (EPS_OUT, v(eps_mode="outside")),
        (EPS_IGNORED, v(eps_mode="none")),
        (EPS_IGNORED, lambda: normalize(x, -1, gamma, beta, 1e-5)),
        (EPS_IGNORED, lambda: normalize(x, -1, gamma, beta, 1e-8)),
        (NO_SQRT, v(sqrt=False)),
        (NO_CENTER, lambda: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma + beta),
        (NO_CENTER, lambda: x / np.sqrt(x.var(-1, keepdims=True) + eps) * gamma + beta),
        (NO_BETA, lambda: normalize(x, -1, gamma, None, eps)),
        (NO_GAMMA, lambda: normalize(x, -1, None, beta, eps)),
        (SWAPPED, lambda: normalize(x, -1, beta, gamma, eps)),
        (ONE_PASS, v(one_pass=True)),
    ]


def _check_fwd(f, shape, seed, eps=1e-5, offset=0.0, scale=1.0, rtol=1e-6, atol=1e-8):
    x, gamma, beta = _probe(shape, seed, offset, scale)
    check_forward_on(f, x, gamma, beta, eps, rtol=rtol, atol=atol)


def check_forward_on(
    f: Callable,
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float = 1e-5,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    what: str | None = None,
) -> None:
    """``f(x, gamma, beta, eps=eps)`` against the reference on inputs the caller chooses.

    x: (..., D); gamma, beta: (D,). A float64 probe that fails is diagnosed against the
    known mistakes; a float32 one only compared (pass a looser ``rtol``/``atol``).
    """
    assert_no_shortcut(f)
    out = _fwd(f, x, gamma, beta, eps)
    float64 = np.asarray(x).dtype == np.float64
    with explained_by_rerun(
        lambda g, b: _fwd(f, x, g, b, eps), lambda g, b: ref.layer_norm(x, g, b, eps), gamma, beta
    ):
        check_against(
            out,
            ref.layer_norm(x, gamma, beta, eps),
            what
            or f"out for x of shape {x.shape}, eps={eps}" + ("" if float64 else f" ({x.dtype})"),
            _hypotheses(x, gamma, beta, eps) if float64 else (),
            rtol=rtol,
            atol=atol,
            relations=norm_relations(x, -1, gamma, beta, eps),
        )


def check_forward_shapes(f: Callable) -> None:
    """Output shape equals the input shape, for 2-D and 3-D float64/float32 input."""
    assert_no_shortcut(f)
    for shape in ((4, 6), (2, 3, 5)):
        for dtype in (np.float64, np.float32):
            x, gamma, beta = (a.astype(dtype) for a in _probe(shape, 1))
            _fwd(f, x, gamma, beta)


def check_forward_values(f: Callable) -> None:
    """2-D input against the reference, with the default eps and with eps = 0.3."""
    assert_no_shortcut(f)
    _check_fwd(f, (6, 5), 2)
    _check_fwd(f, (6, 5), 3, eps=0.3, scale=0.4)


def check_forward_3d(f: Callable) -> None:
    """3-D input (B, T, D): each of the B·T vectors is normalized on its own."""
    assert_no_shortcut(f)
    _check_fwd(f, (3, 4, 5), 4)


def _bwd(b: Callable, dout, x, gamma, eps=1e-5):
    args = [a.copy() for a in (dout, x, gamma)]
    res = call(b, *args, eps=eps)
    if not isinstance(res, tuple) or len(res) != 3:
        raise GradingError(f"{b.__name__} must return a tuple (dx, dgamma, dbeta)")
    dx, dgamma, dbeta = res
    d = x.shape[-1]
    for name, val in (("dgamma", dgamma), ("dbeta", dbeta)):
        v = np.asarray(val)
        if v.shape != (d,) and v.shape[-1:] == (d,):
            raise GradingError(f"{name} has shape {v.shape}, expected ({d},): {DG_AXES}")
    dx = assert_array(dx, x.shape, "dx")
    dgamma = assert_array(np.asarray(dgamma), (d,), "dgamma")
    return dx, dgamma, assert_array(np.asarray(dbeta), (d,), "dbeta")


def _dx_hypotheses(dout, x, gamma, eps) -> list[Hypothesis]:
    def v(**kw):
        return lambda: normalize_backward(dout, x, -1, gamma, eps, **kw)

    return [
        (DX_CONST, v(mean_term=False, var_term=False)),
        (DX_VAR, v(var_term=False)),
        (DX_MEAN, v(mean_term=False)),
        (DX_GAMMA, v(use_gamma=False)),
        (DX_UNBIASED, v(ddof=1)),
        (DX_AXIS, lambda: normalize_backward(dout, x, 0, gamma, eps)),
        (DX_AXIS, lambda: _dx_means_over_axis0(dout, x, gamma, eps)),
    ]


def _dx_means_over_axis0(dout, x, gamma, eps):
    """Row statistics right, but the two means of the backward taken over axis 0."""
    x_hat = normalize(x, -1, eps=eps)
    rstd = 1.0 / np.sqrt(x.var(-1, keepdims=True) + eps)
    g = dout * gamma
    return rstd * (g - g.mean(0, keepdims=True) - x_hat * (g * x_hat).mean(0, keepdims=True))


def _dparam_hypotheses(dout, x, eps) -> list[Hypothesis]:
    x_hat = normalize(x, -1, eps=eps)
    lead = tuple(range(x.ndim - 1))
    m = x.size // x.shape[-1]
    return [
        (DG_X, lambda: ((dout * x).sum(lead), dout.sum(lead))),
        (DG_MEAN, lambda: ((dout * x_hat).mean(lead), dout.mean(lead))),
        (DG_MEAN, lambda: ((dout * x_hat).sum(lead), dout.sum(lead) / m)),
    ]


def _check_bwd(b, shape, seed, eps=1e-5, offset=0.0, numeric=False, rtol=1e-6, atol=1e-8):
    x, gamma, beta = _probe(shape, seed, offset)
    dout = np.random.default_rng(seed + 100).standard_normal(shape)
    if numeric:
        expected = (
            numerical_gradient(lambda x_: normalize(x_, -1, gamma, beta, eps), x, dout),
            numerical_gradient(lambda g: normalize(x, -1, g, beta, eps), gamma, dout),
            numerical_gradient(lambda bb: normalize(x, -1, gamma, bb, eps), beta, dout),
        )
    else:
        expected = ref.layer_norm_backward(dout, x, gamma, eps)
    label = f"for x of shape {shape}, eps={eps}" + (" (vs finite differences)" if numeric else "")
    _compare_bwd(b, dout, x, gamma, eps, expected, label, rtol, atol)


def check_backward_on(
    b: Callable,
    dout: np.ndarray,
    x: np.ndarray,
    gamma: np.ndarray,
    eps: float = 1e-5,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-8,
) -> None:
    """``b(dout, x, gamma, eps=eps)`` against the reference backward on the caller's inputs.

    dout, x: (..., D); gamma: (D,). Returns nothing; raises with the likely mistake.
    """
    assert_no_shortcut(b)
    expected = ref.layer_norm_backward(dout, x, gamma, eps)
    label = f"for x of shape {x.shape}, eps={eps}"
    _compare_bwd(b, dout, x, gamma, eps, expected, label, rtol, atol)


def _compare_bwd(b, dout, x, gamma, eps, expected, label, rtol, atol):
    dx, dgamma, dbeta = _bwd(b, dout, x, gamma, eps)
    check_affine_backward(
        (dx, dgamma, dbeta),
        expected,
        label,
        _dparam_hypotheses(dout, x, eps),
        _dx_hypotheses(dout, x, gamma, eps),
        rtol=rtol,
        atol=atol,
    )


def check_backward_shapes(b: Callable) -> None:
    """dx like x; dgamma and dbeta of shape (D,) for 2-D and 3-D input."""
    assert_no_shortcut(b)
    for shape in ((4, 6), (2, 3, 5)):
        x, gamma, _ = _probe(shape, 10)
        _bwd(b, np.random.default_rng(11).standard_normal(shape), x, gamma)


def check_backward_values(b: Callable) -> None:
    """2-D input against central finite differences with a random upstream gradient."""
    assert_no_shortcut(b)
    _check_bwd(b, (4, 5), 12, numeric=True, rtol=1e-5, atol=1e-7)


def check_backward_3d(b: Callable) -> None:
    """3-D input: dgamma and dbeta summed over both leading axes."""
    assert_no_shortcut(b)
    _check_bwd(b, (2, 3, 4), 13, numeric=True, rtol=1e-5, atol=1e-7)
