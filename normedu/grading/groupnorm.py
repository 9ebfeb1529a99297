"""Checks for the ``groupnorm`` assignment (numpy; x of shape (N, C, *spatial), G groups).

Student functions:
- ``groupnorm_forward(x, gamma, beta, G, eps=1e-5) -> out``
- ``groupnorm_backward(dout, x, gamma, G, eps=1e-5) -> (dx, dgamma, dbeta)``

Group g holds the adjacent channels ``g*C/G .. (g+1)*C/G - 1`` (PyTorch's convention); each
(sample, group) is normalized over its channels and every spatial position, and gamma/beta
are per channel. A C that G does not divide must raise a ``ValueError`` naming C and G.

References: :func:`normedu.functional.group_norm` and its backward (tested against PyTorch),
and central finite differences with a random upstream gradient.

The generic checks :func:`check_forward`, :func:`check_backward` and :func:`check_indivisible`
take the inputs as arguments, so that a notebook's hidden test cell can hold its own inputs;
the ``check_*_shapes/values/limits`` functions are the visible tests' probes.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.grading.compare import GradingError, assert_array, call, unchanged
from normedu.grading.diagnose import (
    Hypothesis,
    check_affine_backward,
    check_against,
    normalize,
    normalize_backward,
)
from normedu.grading.gradcheck import numerical_gradient
from normedu.grading.guard import assert_no_shortcut, library_blocked
from normedu.grading.messages import EPS_IGNORED, EPS_OUT, NO_BETA, NO_GAMMA, NO_SQRT, SWAPPED

__all__ = [
    "check_forward",
    "check_backward",
    "check_indivisible",
    "check_forward_shapes",
    "check_forward_values",
    "check_forward_limits",
    "check_forward_indivisible",
    "check_backward_shapes",
    "check_backward_values",
    "check_backward_limits",
]

ALL_CHANNELS = "you normalized each sample over all of its channels at once (that is LayerNorm, GroupNorm with G = 1); GroupNorm splits the C channels into G groups and takes a mean and variance per group: x.reshape(N, G, -1), statistics over the last axis"  # noqa: E501
BATCH = "your statistics include the batch axis; GroupNorm normalizes each sample on its own (per sample and group), so reduce over the group's channels and positions only, never over axis 0"  # noqa: E501
PER_CHANNEL = "you normalized each channel on its own (that is InstanceNorm, GroupNorm with G = C); a group holds C/G channels, and its mean and variance are taken over all of them together"  # noqa: E501
INTERLEAVED = "your groups are not blocks of adjacent channels: group 0 must hold channels 0 .. C/G − 1 (x.reshape(N, G, -1)); a reshape such as (N, C // G, G, ...) or (N, -1, G) puts channels of different groups together"  # noqa: E501
UNBIASED = "your variance divides by M−1; GroupNorm normalizes with the biased variance: divide by M, the number of values in the group (C/G channels times every position), np.var's default ddof=0"  # noqa: E501
ONE_PASS = "E[x²] − E[x]² loses all precision when the data has a large offset; compute the variance of the centered values, mean((x − μ)²) (or np.var)"  # noqa: E501
SPATIAL = "your function must accept any number of spatial axes: (N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W); take N, C = x.shape[:2] and reshape to (N, G, -1) instead of unpacking N, C, H, W"  # noqa: E501
DTYPE = "float32 input must give float32 output, as in PyTorch; do not convert x to float64 (or cast the result back with .astype(x.dtype))"  # noqa: E501
NO_ERROR = "C not divisible by G must raise a ValueError: a reshape to (N, G, -1) can succeed anyway and silently mix channels of different groups; check C % G and raise ValueError naming C and G"  # noqa: E501
DX_VAR = "dx is missing the term that comes from the variance depending on x: per (sample, group) row, dx = (1/σ)·(g − mean(g) − x̂·mean(g·x̂)) with g = γ[c]·dout"  # noqa: E501
DX_MEAN = "dx is missing the term that comes from the mean depending on x: subtract mean(γ[c]·dout) over each (sample, group) row"  # noqa: E501
DX_CONST = "dx treats μ and σ as constants (dx = γ·dout/σ); they depend on x, which adds two terms: dx = (1/σ)·(g − mean(g) − x̂·mean(g·x̂)) per group"  # noqa: E501
DX_GAMMA = "dx must include γ: the upstream gradient reaches x̂ as g = γ[c]·dout"
DX_GAMMA_AFTER = "γ must multiply dout before the group means (g = γ[c]·dout, then the means over the group): γ differs between the channels of one group, so multiplying LayerNorm's dx by γ afterwards is wrong"  # noqa: E501
DX_UNBIASED = "your backward uses the unbiased variance; the forward normalizes with the biased one"
DX_GROUPS = "the means in your dx are not taken over the same (sample, group) rows as the forward's statistics: reshape g = γ[c]·dout to (N, G, -1) and average over the last axis"  # noqa: E501
DG_X = "dγ = Σ dout·x̂ (the normalized input x̂), not dout·x"
DG_MEAN = "dγ and dβ are sums over N and the spatial axes, not means"
DG_AXES = "dγ and dβ have one value per channel: sum over N and every spatial axis (axis 0 and axes 2, 3, ...)"  # noqa: E501


def _bshape(x: np.ndarray) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _affine(x_hat, gamma, beta):
    shape = _bshape(x_hat)
    out = x_hat
    if gamma is not None:
        out = out * np.asarray(gamma, dtype=np.float64).reshape(shape)
    if beta is not None:
        out = out + np.asarray(beta, dtype=np.float64).reshape(shape)
    return out


def _gn(x, G, gamma, beta, eps, **kw):
    """GroupNorm by :func:`normalize` on the (N, G, -1) rows, with its mistake switches."""
    x = np.asarray(x, dtype=np.float64)
    rows = normalize(x.reshape(x.shape[0], G, -1), -1, eps=eps, **kw)
    return _affine(rows.reshape(x.shape), gamma, beta)


def _hypotheses(x, gamma, beta, G, eps) -> list[Hypothesis]:
    x = np.asarray(x, dtype=np.float64)
    n, c = x.shape[:2]

    def v(**kw):
        return lambda: _gn(x, G, gamma, beta, eps, **kw)

    def interleaved():
        xi = x.reshape(n, c // G, G, -1)
        return _affine(normalize(xi, (1, 3), eps=eps).reshape(x.shape), gamma, beta)

    def strided():
        return _affine(normalize(x.reshape(n, -1, G), 1, eps=eps).reshape(x.shape), gamma, beta)

    def batch_groups():
        rows = normalize(x.reshape(n, G, -1), (0, 2), eps=eps)
        return _affine(rows.reshape(x.shape), gamma, beta)

    spatial = (0,) + tuple(range(2, x.ndim))
    return [
        (ALL_CHANNELS, lambda: _gn(x, 1, gamma, beta, eps)),
        (PER_CHANNEL, lambda: _gn(x, c, gamma, beta, eps)),
        (BATCH, batch_groups),
        (BATCH, lambda: _affine(normalize(x, spatial, eps=eps), gamma, beta)),
        (INTERLEAVED, interleaved),
        (INTERLEAVED, strided),
        (UNBIASED, v(ddof=1)),
        (EPS_OUT, v(eps_mode="outside")),
        (EPS_IGNORED, v(eps_mode="none")),
        (EPS_IGNORED, lambda: _gn(x, G, gamma, beta, 1e-5)),
        (NO_SQRT, v(sqrt=False)),
        (NO_BETA, lambda: _gn(x, G, gamma, None, eps)),
        (NO_GAMMA, lambda: _gn(x, G, None, beta, eps)),
        (SWAPPED, lambda: _gn(x, G, beta, gamma, eps)),
        (ONE_PASS, v(one_pass=True)),
    ]


def _call(fn: Callable, args: tuple, ndim: int, eps: float):
    """Call the student's function; a failure on a non-4-D input points at the spatial axes."""
    try:
        return call(fn, *args, eps=eps)
    except GradingError as e:
        if ndim != 4 and "NotImplementedError" not in str(e):
            raise GradingError(f"{e}. For an input with {ndim} axes: {SPATIAL}") from e
        raise


def _tolerances(x: np.ndarray) -> tuple[float, float]:
    return (1e-4, 1e-5) if x.dtype == np.float32 else (1e-6, 1e-8)


def check_forward(f: Callable, x, gamma, beta, G: int, eps: float = 1e-5) -> None:
    """``f(x, gamma, beta, G, eps=eps)`` against the reference, naming a matched mistake.

    x (N, C, *spatial) of any float dtype; float32 input must come back as float32.
    """
    assert_no_shortcut(f)
    x, gamma, beta = (np.asarray(a) for a in (x, gamma, beta))
    args = tuple(a.copy() for a in (x, gamma, beta))
    out = _call(f, (*args, G), x.ndim, eps)
    for name, before, after in zip(("x", "gamma", "beta"), (x, gamma, beta), args, strict=True):
        unchanged(before, after, name, f.__name__)
    out = assert_array(out, x.shape, "out")
    if x.dtype == np.float32 and out.dtype != np.float32:
        raise GradingError(f"out has dtype {out.dtype} for float32 input: {DTYPE}")
    rtol, atol = _tolerances(x)
    check_against(
        out,
        ref.group_norm(x.astype(np.float64), gamma, beta, G, eps),
        f"out for x of shape {x.shape} ({x.dtype}), G={G}, eps={eps}",
        _hypotheses(x, gamma, beta, G, eps),
        rtol=rtol,
        atol=atol,
    )


def _dx(dout, x, G, gamma, eps, gamma_mode="before", groups=None, **kw):
    """dx of GroupNorm by :func:`normalize_backward` on the (N, G, -1) rows, with switches.

    gamma_mode: "before" (correct, g = gamma * dout), "after" (dx of the rows times gamma),
    "none" (gamma forgotten). groups: take the backward's means over other groups than G.
    """
    x = np.asarray(x, dtype=np.float64)
    gb = np.asarray(gamma, dtype=np.float64).reshape(_bshape(x))
    g = dout * gb if gamma_mode == "before" else np.asarray(dout, dtype=np.float64)
    n = x.shape[0]
    if groups is None:
        rows = normalize_backward(g.reshape(n, G, -1), x.reshape(n, G, -1), -1, eps=eps, **kw)
        dx = rows.reshape(x.shape)
    else:
        # Forward statistics per G groups, backward means over `groups` groups.
        xg = x.reshape(n, G, -1)
        rstd = 1.0 / np.sqrt(xg.var(-1, keepdims=True) + eps)
        x_hat = ((xg - xg.mean(-1, keepdims=True)) * rstd).reshape(n, groups, -1)
        rstd = np.broadcast_to(rstd, xg.shape).reshape(n, groups, -1)
        gg = g.reshape(n, groups, -1)
        dx = rstd * (gg - gg.mean(-1, keepdims=True) - x_hat * (gg * x_hat).mean(-1, keepdims=True))
        dx = dx.reshape(x.shape)
    return dx * gb if gamma_mode == "after" else dx


def _dx_hypotheses(dout, x, gamma, G, eps) -> list[Hypothesis]:
    def v(**kw):
        return lambda: _dx(dout, x, G, gamma, eps, **kw)

    c = x.shape[1]
    return [
        (DX_CONST, v(mean_term=False, var_term=False)),
        (DX_VAR, v(var_term=False)),
        (DX_MEAN, v(mean_term=False)),
        (DX_GAMMA_AFTER, v(gamma_mode="after")),
        (DX_GAMMA, v(gamma_mode="none")),
        (DX_UNBIASED, v(ddof=1)),
        (DX_GROUPS, v(groups=1)),
        (DX_GROUPS, v(groups=c)),
    ]


def _dparam_hypotheses(dout, x, G, eps) -> list[Hypothesis]:
    x_hat = _gn(x, G, None, None, eps)
    axes = (0,) + tuple(range(2, x.ndim))
    m = x.size // x.shape[1]
    x_hat_unbiased = _gn(x, G, None, None, eps, ddof=1)
    return [
        (DG_X, lambda: ((dout * x).sum(axes), dout.sum(axes))),
        (DX_UNBIASED, lambda: ((dout * x_hat_unbiased).sum(axes), dout.sum(axes))),
        (DG_MEAN, lambda: ((dout * x_hat).mean(axes), dout.mean(axes))),
        (DG_MEAN, lambda: ((dout * x_hat).sum(axes), dout.sum(axes) / m)),
    ]


def _bwd(b: Callable, dout, x, gamma, G, eps):
    args = tuple(a.copy() for a in (dout, x, gamma))
    res = _call(b, (*args, G), x.ndim, eps)
    for name, before, after in zip(("dout", "x", "gamma"), (dout, x, gamma), args, strict=True):
        unchanged(before, after, name, b.__name__)
    if not isinstance(res, tuple) or len(res) != 3:
        raise GradingError(f"{b.__name__} must return a tuple (dx, dgamma, dbeta)")
    dx, dgamma, dbeta = res
    c = x.shape[1]
    for name, val in (("dgamma", dgamma), ("dbeta", dbeta)):
        shape = np.shape(val)
        if shape != (c,):
            raise GradingError(f"{name} has shape {shape}, expected ({c},): {DG_AXES}")
    out = (
        assert_array(dx, x.shape, "dx"),
        assert_array(np.asarray(dgamma), (c,), "dgamma"),
        assert_array(np.asarray(dbeta), (c,), "dbeta"),
    )
    if x.dtype == np.float32:
        for name, val in zip(("dx", "dgamma", "dbeta"), out, strict=True):
            if val.dtype != np.float32:
                raise GradingError(f"{name} has dtype {val.dtype} for float32 input: {DTYPE}")
    return out


def check_backward(
    b: Callable, dout, x, gamma, G: int, eps: float = 1e-5, numeric: bool = False
) -> None:
    """``b(dout, x, gamma, G, eps=eps)`` against the reference backward (or, with
    ``numeric=True``, central finite differences of the reference forward), naming a matched
    mistake. dout must be random: with dout and gamma all ones dx is zero for any
    normalization."""
    assert_no_shortcut(b)
    dout, x, gamma = (np.asarray(a) for a in (dout, x, gamma))
    x64, d64 = x.astype(np.float64), dout.astype(np.float64)
    if numeric:
        beta = np.zeros(x.shape[1])
        expected = (
            numerical_gradient(lambda z: ref.group_norm(z, gamma, beta, G, eps), x64, d64),
            numerical_gradient(lambda z: ref.group_norm(x64, z, beta, G, eps), gamma, d64),
            numerical_gradient(lambda z: ref.group_norm(x64, gamma, z, G, eps), beta, d64),
        )
    else:
        expected = ref.group_norm_backward(d64, x64, gamma, G, eps)
    grads = _bwd(b, dout, x, gamma, G, eps)
    rtol, atol = (1e-5, 1e-7) if numeric else _tolerances(x)
    label = f"for x of shape {x.shape} ({x.dtype}), G={G}, eps={eps}" + (
        " (vs finite differences)" if numeric else ""
    )
    check_affine_backward(
        grads,
        expected,
        label,
        _dparam_hypotheses(d64, x64, G, eps),
        _dx_hypotheses(d64, x64, gamma, G, eps),
        rtol=rtol,
        atol=atol,
    )


def check_indivisible(fn: Callable, args: tuple, C: int, G: int) -> None:
    """``fn(*args)`` (a call with C channels and G groups, C % G != 0) must raise a
    ``ValueError`` whose message names both C and G."""
    name = getattr(fn, "__name__", "your function")
    assert_no_shortcut(fn)
    with warnings.catch_warnings(), np.errstate(all="ignore"), library_blocked():
        warnings.simplefilter("ignore")
        try:
            fn(*(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        except NotImplementedError as e:
            raise GradingError(f"{name} is not implemented yet") from e
        except GradingError:
            raise
        except ValueError as e:
            msg = str(e)
        except Exception as e:  # noqa: BLE001 - any other exception is the wrong kind
            raise GradingError(
                f"{name} raised {type(e).__name__} ({e}) for C = {C}, G = {G}: {NO_ERROR}"
            ) from e
        else:
            raise GradingError(f"{name} returned a result for C = {C}, G = {G}: {NO_ERROR}")
    missing = [str(v) for v in (C, G) if not re.search(rf"(?<!\d){v}(?!\d)", msg)]
    if missing:
        raise GradingError(
            f"{name} raised ValueError({msg!r}), which does not name "
            f"{' and '.join(missing)}: say which C and G do not fit, e.g. "
            f"'C = {C} is not divisible by G = {G}'"
        )


# --------------------------------------------------------------------------- visible probes


def _probe(shape: tuple, seed: int, dtype=np.float64):
    rng = np.random.default_rng(seed)
    c = shape[1]
    # A different offset per (sample, channel), so that the wrong axis is never harmless.
    offsets = rng.standard_normal((shape[0], c) + (1,) * (len(shape) - 2))
    x = rng.standard_normal(shape) * 2 + offsets
    arrays = x, rng.uniform(0.5, 2.0, c), rng.standard_normal(c)
    return tuple(a.astype(dtype) for a in arrays)


def check_forward_shapes(f: Callable) -> None:
    """Output shape equals the input shape for (N, C, H, W) input; float32 stays float32."""
    assert_no_shortcut(f)
    for dtype in (np.float64, np.float32):
        x, gamma, beta = _probe((2, 6, 3, 3), 1, dtype)
        out = _call(f, (x, gamma, beta, 3), 4, 1e-5)
        out = assert_array(out, x.shape, "out")
        if out.dtype != dtype:
            raise GradingError(f"out has dtype {out.dtype} for {np.dtype(dtype)} input: {DTYPE}")


def check_forward_values(f: Callable) -> None:
    """(N, C, H, W) input against the reference, with the default eps and with eps = 0.3."""
    check_forward(f, *_probe((2, 6, 3, 4), 2), 3)
    check_forward(f, *_probe((3, 4, 2, 2), 3), 2, eps=0.3)


def check_forward_limits(f: Callable) -> None:
    """G = 1 (LayerNorm over C, H, W), G = C (InstanceNorm), and inputs (N, C), (N, C, L)."""
    check_forward(f, *_probe((2, 4, 3, 3), 4), 1)
    check_forward(f, *_probe((2, 4, 3, 3), 5), 4)
    check_forward(f, *_probe((5, 6), 6), 2)
    check_forward(f, *_probe((2, 8, 5), 7), 4)


def check_forward_indivisible(f: Callable) -> None:
    """C = 6 channels and G = 4 groups: a ValueError that names 6 and 4."""
    x, gamma, beta = _probe((2, 6, 2), 8)
    check_indivisible(f, (x, gamma, beta, 4), 6, 4)


def check_backward_shapes(b: Callable) -> None:
    """dx like x; dgamma and dbeta of shape (C,) for (N, C, H, W) input; float32 stays."""
    assert_no_shortcut(b)
    for dtype in (np.float64, np.float32):
        x, gamma, _ = _probe((2, 6, 3, 3), 10, dtype)
        dout = np.random.default_rng(11).standard_normal(x.shape).astype(dtype)
        _bwd(b, dout, x, gamma, 3, 1e-5)


def check_backward_values(b: Callable) -> None:
    """(N, C, H, W) input against finite differences with a random upstream gradient."""
    x, gamma, _ = _probe((2, 4, 2, 3), 12)
    dout = np.random.default_rng(13).standard_normal(x.shape)
    check_backward(b, dout, x, gamma, 2, numeric=True)


def check_backward_limits(b: Callable) -> None:
    """G = 1, G = C and (N, C) input, against the reference backward."""
    for shape, G, seed in (((2, 4, 3, 3), 1, 14), ((2, 4, 3, 3), 4, 15), ((5, 6), 3, 16)):
        x, gamma, _ = _probe(shape, seed)
        dout = np.random.default_rng(seed + 100).standard_normal(shape)
        check_backward(b, dout, x, gamma, G)
