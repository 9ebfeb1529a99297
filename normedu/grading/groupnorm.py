# ruff: noqa: E501  (a table's causes are one line each: a message reads best beside its variant)
"""Checks for the ``groupnorm`` assignment (numpy; x of shape (N, C, *spatial), G groups).

Student functions:
- ``groupnorm_forward(x, gamma, beta, G, eps=1e-5) -> out``
- ``groupnorm_backward(dout, x, gamma, G, eps=1e-5) -> (dx, dgamma, dbeta)``

Group g holds the adjacent channels ``g*C/G .. (g+1)*C/G - 1`` (PyTorch's convention); each
(sample, group) is normalized over its channels and every spatial position, and gamma/beta
are per channel. A C that G does not divide must raise a ``ValueError`` (any message: one
that names C and G is praised in the feedback, not required); that is graded in its own
visible cell (:func:`check_forward_indivisible`, :func:`check_backward_indivisible`) and in
no numeric one.

The table :data:`GROUPNORM` holds what is GroupNorm's own (references
:func:`normedu.functional.group_norm` and its backward, called by keyword only, causes and
messages); the checks are :class:`~normedu.grading.normcheck.NormTable`'s.

The generic checks :func:`check_forward`, :func:`check_backward` and :func:`check_indivisible`
take the inputs as arguments, so that a notebook's hidden test cell can hold its own inputs;
the ``check_*_shapes/values/limits`` functions are the visible tests' probes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.conventions import DEFAULT_EPS
from normedu.grading.causes import param_grad_causes, switched
from normedu.grading.diagnose import normalize, normalize_backward
from normedu.grading.messages import EPS_IGNORED, EPS_OUT, NO_BETA, NO_GAMMA, NO_SQRT, SWAPPED
from normedu.grading.normcheck import NormTable, Probe
from normedu.grading.validation import expect_value_error

__all__ = [
    "check_forward",
    "check_backward",
    "check_indivisible",
    "check_forward_shapes",
    "check_forward_values",
    "check_forward_limits",
    "check_forward_indivisible",
    "check_backward_indivisible",
    "check_backward_shapes",
    "check_backward_values",
    "check_backward_limits",
]

SPATIAL = "your function must accept any number of spatial axes: (N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W); take N, C = x.shape[:2] and reshape to (N, G, -1) instead of unpacking N, C, H, W"
NO_ERROR = "C not divisible by G must raise a ValueError: a reshape to (N, G, -1) can succeed anyway and silently mix channels of different groups; check C % G and raise ValueError (naming C and G helps whoever reads it)"
DX_INSTANCE = "your backward normalizes each channel on its own (InstanceNorm's backward, G = C): a group's statistics, and so x̂ and the means in dx, are over all its C/G channels and positions"
DX_PER_POSITION = "your backward takes its statistics per spatial position: x̂ and the means in dx, like the forward's statistics, are over a group's C/G channels AND every position (reshape to (N, G, -1))"
DX_UNBIASED = "your backward uses the unbiased variance; the forward normalizes with the biased one"


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


def _gn(p: Probe, G: int | None = None, **switches) -> np.ndarray:
    """GroupNorm of the probe (``G`` groups, default the probe's) by :func:`normalize` on the
    (N, G, -1) rows, with its mistake switches."""
    x = np.asarray(p.x, dtype=np.float64)
    rows = normalize(x.reshape(x.shape[0], G or p.G, -1), -1, eps=p.eps, **switches)
    return _affine(rows.reshape(x.shape), p.gamma, p.beta)


def _regrouped(p: Probe, shape: Callable, axes) -> np.ndarray:
    """Statistics over ``axes`` of x reshaped to ``shape(n, c, G)``: groups of other channels."""
    n, c = p.x.shape[:2]
    rows = normalize(p.x.reshape(shape(n, c, p.G)), axes, eps=p.eps)
    return _affine(rows.reshape(p.x.shape), p.gamma, p.beta)


def _per_position(p: Probe) -> np.ndarray:
    """Statistics over the group's channels at each spatial position separately."""
    n, c = p.x.shape[:2]
    xg = np.asarray(p.x, np.float64).reshape(n, p.G, c // p.G, -1)
    return _affine(normalize(xg, 2, eps=p.eps).reshape(p.x.shape), p.gamma, p.beta)


def _dx_per_position(p: Probe) -> np.ndarray:
    """The backward of :func:`_per_position` (LayerNorm's dx over the channels of a group)."""
    n, c = p.x.shape[:2]
    g = p.dout * np.asarray(p.gamma, np.float64).reshape(_bshape(p.x))
    shape = (n, p.G, c // p.G, -1)
    return normalize_backward(g.reshape(shape), p.x.reshape(shape), 2, eps=p.eps).reshape(p.x.shape)


def _dx(p: Probe, gamma_mode="before", groups=None, use_gamma=True, **switches) -> np.ndarray:
    """dx of GroupNorm by :func:`normalize_backward` on the (N, G, -1) rows, with switches.

    gamma_mode: "before" (correct, g = gamma * dout), "after" (dx of the rows times gamma);
    use_gamma=False forgets gamma. groups: the backward's means over other groups than G.
    """
    x, G, n = np.asarray(p.x, dtype=np.float64), p.G, p.x.shape[0]
    gb = np.asarray(p.gamma, dtype=np.float64).reshape(_bshape(x))
    g = p.dout * gb if gamma_mode == "before" and use_gamma else np.asarray(p.dout, np.float64)
    if groups is None:
        rows = normalize_backward(
            g.reshape(n, G, -1), x.reshape(n, G, -1), -1, eps=p.eps, **switches
        )
        dx = rows.reshape(x.shape)
    else:
        # Forward statistics per G groups, backward means over `groups` groups.
        xg = x.reshape(n, G, -1)
        rstd = 1.0 / np.sqrt(xg.var(-1, keepdims=True) + p.eps)
        x_hat = ((xg - xg.mean(-1, keepdims=True)) * rstd).reshape(n, groups, -1)
        rstd = np.broadcast_to(rstd, xg.shape).reshape(n, groups, -1)
        gg = g.reshape(n, groups, -1)
        dx = rstd * (gg - gg.mean(-1, keepdims=True) - x_hat * (gg * x_hat).mean(-1, keepdims=True))
        dx = dx.reshape(x.shape)
    return dx * gb if gamma_mode == "after" else dx


def _param_axes(p: Probe) -> tuple[int, ...]:
    return (0,) + tuple(range(2, p.x.ndim))


def _x_hat(p: Probe, **switches) -> np.ndarray:
    return _gn(p.replace(gamma=None, beta=None), **switches)


GROUPNORM = NormTable(
    inputs=("x", "gamma", "beta", "G"),
    reference=ref.group_norm,
    causes=[
        ("you normalized each sample over all of its channels at once (that is LayerNorm, GroupNorm with G = 1); GroupNorm splits the C channels into G groups and takes a mean and variance per group: x.reshape(N, G, -1), statistics over the last axis",
         lambda p: _gn(p, 1)),
        ("you normalized each channel on its own (that is InstanceNorm, GroupNorm with G = C); a group holds C/G channels, and its mean and variance are taken over all of them together",
         lambda p: _gn(p, p.x.shape[1])),
        ("your statistics are per spatial position: each (sample, group) needs ONE mean and variance over its C/G channels AND every spatial position (x.reshape(N, G, -1), statistics over the last axis), not one per position",
         lambda p: _per_position(p)),
        ("your statistics include the batch axis; GroupNorm normalizes each sample on its own (per sample and group), so reduce over the group's channels and positions only, never over axis 0",
         lambda p: _regrouped(p, lambda n, c, G: (n, G, -1), (0, 2)),
         lambda p: _affine(normalize(p.x, _param_axes(p), eps=p.eps), p.gamma, p.beta)),
        ("your groups are not blocks of adjacent channels: group 0 must hold channels 0 .. C/G − 1 (x.reshape(N, G, -1)); a reshape such as (N, C // G, G, ...) or (N, -1, G) puts channels of different groups together",
         lambda p: _regrouped(p, lambda n, c, G: (n, c // G, G, -1), (1, 3)),
         lambda p: _regrouped(p, lambda n, c, G: (n, -1, G), 1)),
        *switched(_gn, unbiased="your variance divides by M−1; GroupNorm normalizes with the biased variance: divide by M, the number of values in the group (C/G channels times every position), np.var's default ddof=0"),
        *switched(_gn, eps_outside=EPS_OUT, no_sqrt=NO_SQRT, no_beta=NO_BETA, no_gamma=NO_GAMMA, swapped=SWAPPED),
        *switched(_gn, one_pass="E[x²] − E[x]² loses all precision when the data has a large offset; compute the variance of the centered values, mean((x − μ)²) (or np.var)"),
    ],
    backward_inputs=("dout", "x", "gamma", "G"),
    backward_reference=ref.group_norm_backward,
    grads=(("dx", "x"), ("dgamma", "gamma"), ("dbeta", "beta")),
    grad_checks=[
        (("dgamma", "dbeta"), [
            *param_grad_causes(_x_hat, _param_axes,
                               uses_x="dγ = Σ dout·x̂ (the normalized input x̂), not dout·x",
                               means="dγ and dβ are sums over N and the spatial axes, not means"),
            (DX_UNBIASED, lambda p: ((p.dout * _x_hat(p, ddof=1)).sum(_param_axes(p)), p.dout.sum(_param_axes(p)))),
            (DX_INSTANCE, lambda p: ((p.dout * _x_hat(p.replace(G=p.x.shape[1]))).sum(_param_axes(p)), p.dout.sum(_param_axes(p)))),
            (DX_PER_POSITION, lambda p: ((p.dout * _per_position(p.replace(gamma=None, beta=None))).sum(_param_axes(p)), p.dout.sum(_param_axes(p)))),
        ]),
        (("dx",), [
            *switched(_dx, constants="dx treats μ and σ as constants (dx = γ·dout/σ); they depend on x: in your graph, dx also receives gradient through each group's σ² and μ, two more terms, each with a sum over the group"),
            *switched(_dx, no_var_term="dx is missing the term that comes from the variance depending on x: per (sample, group) row, follow the path x → σ² → x̂ in your graph; it adds a term proportional to x̂, with a sum over the group (of g = γ[c]·dout times x̂)"),
            *switched(_dx, no_mean_term="dx is missing the term that comes from the mean depending on x: subtract mean(γ[c]·dout) over each (sample, group) row"),
            ("γ must multiply dout before the group means (g = γ[c]·dout, then the means over the group): γ differs between the channels of one group, so multiplying LayerNorm's dx by γ afterwards is wrong",
             lambda p: _dx(p, gamma_mode="after")),
            *switched(_dx, dx_no_gamma="dx must include γ: the upstream gradient reaches x̂ as g = γ[c]·dout", unbiased=DX_UNBIASED),
            ("the means in your dx are not taken over the same (sample, group) rows as the forward's statistics: reshape g = γ[c]·dout to (N, G, -1) and average over the last axis",
             lambda p: _dx(p, groups=1), lambda p: _dx(p, groups=p.x.shape[1])),
            (DX_INSTANCE, lambda p: _dx(p.replace(G=p.x.shape[1]))),
            (DX_PER_POSITION, _dx_per_position),
        ]),
    ],
    eps_ignored=EPS_IGNORED,
    affine=("gamma", "beta"),
    grad_shape_hint="dγ and dβ were summed over the wrong axes (or kept them, keepdims): they have one value per channel, shape (C,): sum over N and every spatial axis (axis 0 and axes 2, 3, ...)",
    keep_dtype="float32 input must give float32 output, as in PyTorch; do not convert x to float64 (or cast the result back with .astype(x.dtype))",
    call_hint=lambda p: None if p.x.ndim == 4 else f"For an input with {p.x.ndim} axes: {SPATIAL}",
    dx_layout=lambda p: (lambda a: a.reshape(p.x.shape[0], p.G, -1), p.dout * p.gamma.reshape(_bshape(p.x)), -1, True),
)  # fmt: skip


def _tolerances(x: np.ndarray) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 1e-5} if x.dtype == np.float32 else {"rtol": 1e-6, "atol": 1e-8}


def check_forward(f: Callable, x, gamma, beta, G: int, eps: float = DEFAULT_EPS) -> None:
    """``f(x, gamma, beta, G, eps=eps)`` against the reference, naming a matched mistake.

    x (N, C, *spatial) of any float dtype; float32 input must come back as float32.
    """
    x, gamma, beta = (np.asarray(a) for a in (x, gamma, beta))
    probe = Probe({"x": x, "gamma": gamma, "beta": beta, "G": G}, {"eps": eps})
    GROUPNORM.check_forward(f, probe, **_tolerances(x))


def check_backward(
    b: Callable, dout, x, gamma, G: int, eps: float = DEFAULT_EPS, numeric: bool = False
) -> None:
    """``b(dout, x, gamma, G, eps=eps)`` against the reference backward (or, with
    ``numeric=True``, central finite differences of the reference forward), naming a matched
    mistake. dout must be random: with dout and gamma all ones dx is zero for any
    normalization."""
    dout, x, gamma = (np.asarray(a) for a in (dout, x, gamma))
    args = {"dout": dout, "x": x, "gamma": gamma, "beta": np.zeros_like(gamma), "G": G}
    tolerances = {"rtol": 1e-5, "atol": 1e-7} if numeric else _tolerances(x)
    GROUPNORM.check_backward(b, Probe(args, {"eps": eps}), numeric=numeric, **tolerances)


def check_indivisible(fn: Callable, args: tuple, C: int, G: int) -> None:
    """``fn(*args)`` (a call with C channels and G groups, C % G != 0) must raise a
    ``ValueError``; any message passes. A message that names both C and G is praised (a
    printed note), one that does not gets a printed suggestion: never a lost point."""
    msg = str(expect_value_error(fn, args, f"for C = {C}, G = {G}", NO_ERROR))
    if all(re.search(rf"(?<!\d){v}(?!\d)", msg) for v in (C, G)):
        print(f"Note: your ValueError names C = {C} and G = {G}: a clear message, well done.")
    else:
        print(
            f"Note: any ValueError earns the point; yours ({msg!r}) could also name the values, "
            f"e.g. 'C = {C} is not divisible by G = {G}'."
        )


# --------------------------------------------------------------------------- visible probes


def _probe(shape: tuple, seed: int, G: int, dtype=np.float64, eps: float = DEFAULT_EPS) -> Probe:
    rng = np.random.default_rng(seed)
    c = shape[1]
    # A different offset per (sample, channel), so that the wrong axis is never harmless.
    offsets = rng.standard_normal((shape[0], c) + (1,) * (len(shape) - 2))
    x = rng.standard_normal(shape) * 2 + offsets
    arrays = {"x": x, "gamma": rng.uniform(0.5, 2.0, c), "beta": rng.standard_normal(c)}
    arrays["dout"] = np.random.default_rng(seed + 100).standard_normal(shape)
    return Probe({k: a.astype(dtype) for k, a in arrays.items()} | {"G": G}, {"eps": eps})


def check_forward_shapes(f: Callable) -> None:
    """Output shape equals the input shape for (N, C, H, W) input; float32 stays float32."""
    GROUPNORM.check_shapes(
        f, [_probe((2, 6, 3, 3), 1, 3, dtype) for dtype in (np.float64, np.float32)]
    )


def _forward(f: Callable, probe: Probe) -> None:
    GROUPNORM.check_forward(f, probe, **_tolerances(probe.x))


def check_forward_values(f: Callable) -> None:
    """(N, C, H, W) input against the reference, with the default eps and with eps = 0.3."""
    _forward(f, _probe((2, 6, 3, 4), 2, 3))
    _forward(f, _probe((3, 4, 2, 2), 3, 2, eps=0.3))


def check_forward_limits(f: Callable) -> None:
    """G = 1 (LayerNorm over C, H, W), G = C (InstanceNorm), inputs (N, C) and (N, C, L),
    data with a large offset (1e6), a constant group (its output is β) and float32 values."""
    for shape, seed, G in (
        ((2, 4, 3, 3), 4, 1),
        ((2, 4, 3, 3), 5, 4),
        ((5, 6), 6, 2),
        ((2, 8, 5), 7, 4),
    ):
        _forward(f, _probe(shape, seed, G))
    p = _probe((3, 4, 5), 17, 2)
    _forward(f, p.replace(x=p.x + 1e6))
    x = p.x.copy()
    x[1, 2:4] = 2.5
    GROUPNORM.check_forward(f, p.replace(x=x), what="out with a constant group (expected: β)")
    _forward(f, _probe((2, 8, 3, 3), 18, 4, np.float32))


def check_forward_indivisible(f: Callable) -> None:
    """C = 6 channels and G = 4 groups, then C = 6 and G = 5: a ValueError (any message)."""
    p = _probe((2, 6, 2), 8, 4)
    check_indivisible(f, (p.x, p.gamma, p.beta, 4), 6, 4)
    check_indivisible(f, (p.x, p.gamma, p.beta, 5), 6, 5)


def check_backward_indivisible(b: Callable) -> None:
    """The backward with C = 6 channels and G = 4 groups: a ValueError (any message)."""
    p = _probe((2, 6, 2), 9, 4)
    check_indivisible(b, (p.dout, p.x, p.gamma, 4), 6, 4)


def check_backward_shapes(b: Callable) -> None:
    """dx like x; dgamma and dbeta of shape (C,) for (N, C, H, W) input; float32 stays."""
    probes = [_probe((2, 6, 3, 3), 10, 3, dtype) for dtype in (np.float64, np.float32)]
    GROUPNORM.check_shapes(b, probes, backward=True)


def check_backward_values(b: Callable) -> None:
    """(N, C, H, W) input against finite differences with a random upstream gradient."""
    probe = _probe((2, 4, 2, 3), 12, 2)
    GROUPNORM.check_backward(b, probe, numeric=True, rtol=1e-5, atol=1e-7)


def check_backward_limits(b: Callable) -> None:
    """G = 1, G = C and (N, C) input, data with a large offset (1e4) and float32 input,
    against the reference backward."""
    for shape, G, seed in (((2, 4, 3, 3), 1, 14), ((2, 4, 3, 3), 4, 15), ((5, 6), 3, 16)):
        GROUPNORM.check_backward(b, _probe(shape, seed, G))
    p = _probe((3, 4, 5), 19, 2)
    GROUPNORM.check_backward(b, p.replace(x=p.x + 1e4), rtol=1e-5, atol=1e-6)
    p = _probe((2, 8, 3, 3), 20, 4, np.float32)
    GROUPNORM.check_backward(b, p, **_tolerances(p.x))
