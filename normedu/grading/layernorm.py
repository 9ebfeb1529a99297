# ruff: noqa: E501  (a table's causes are one line each: a message reads best beside its variant)
"""Checks for the ``layernorm`` assignment (numpy; x of shape (..., D), normalized over D).

Student functions:
- ``layernorm_forward(x, gamma, beta, eps=1e-5) -> out``
- ``layernorm_backward(dout, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)``

The table :data:`LAYERNORM` holds what is LayerNorm's own (references
:func:`normedu.functional.layer_norm` and its backward, the causes and their messages); the
checks themselves are :class:`~normedu.grading.normcheck.NormTable`'s.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.conventions import DEFAULT_EPS
from normedu.grading.causes import param_grad_causes, switched
from normedu.grading.diagnose import norm_relations, normalize, normalize_backward
from normedu.grading.messages import EPS_IGNORED, EPS_OUT, NO_BETA, NO_GAMMA, NO_SQRT, SWAPPED
from normedu.grading.normcheck import NormTable, Probe, backward_on

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


def _ln(p: Probe, axes=-1, **switches) -> np.ndarray:
    """LayerNorm of the probe over ``axes`` with :func:`normalize`'s mistake switches."""
    return normalize(p.x, axes, p.gamma, p.beta, p.eps, **switches)


def _dx(p: Probe, axes=-1, **switches) -> np.ndarray:
    return normalize_backward(p.dout, p.x, axes, p.gamma, p.eps, **switches)


def _dx_means_over_axis0(p: Probe) -> np.ndarray:
    """Row statistics right, but the two means of the backward taken over axis 0."""
    x_hat = normalize(p.x, -1, eps=p.eps)
    rstd = 1.0 / np.sqrt(p.x.var(-1, keepdims=True) + p.eps)
    g = p.dout * p.gamma
    return rstd * (g - g.mean(0, keepdims=True) - x_hat * (g * x_hat).mean(0, keepdims=True))


def _lead(p: Probe) -> tuple[int, ...]:
    return tuple(range(p.x.ndim - 1))


LAYERNORM = NormTable(
    inputs=("x", "gamma", "beta"),
    reference=ref.layer_norm,
    causes=[
        ("you normalized over axis 0 (across the batch, like BatchNorm); LayerNorm normalizes each sample over its features: mean and variance along the last axis (axis=-1, keepdims=True)", lambda p: _ln(p, 0)),
        ("for a 3-D input (B, T, D) LayerNorm normalizes each of the B·T vectors over its D features only: reduce over the last axis (axis=-1), not over axis 0, axis 1 or several axes",
         lambda p: _ln(p, 1), lambda p: _ln(p, (1, 2)), lambda p: _ln(p, _lead(p))),
        ("you normalized with the mean and variance of the whole array; LayerNorm takes them per sample, over the last axis (axis=-1, keepdims=True)", lambda p: _ln(p, tuple(range(p.x.ndim)))),
        *switched(_ln, unbiased="your variance divides by D−1; LayerNorm normalizes with the biased variance (divide by D, np.var's default ddof=0)", eps_outside=EPS_OUT, no_sqrt=NO_SQRT),
        ("you forgot to subtract the mean (that is RMSNorm); LayerNorm centers each row first",
         lambda p: _ln(p, center=False), lambda p: p.x / np.sqrt(p.x.var(-1, keepdims=True) + p.eps) * p.gamma + p.beta),
        *switched(_ln, no_beta=NO_BETA, no_gamma=NO_GAMMA, swapped=SWAPPED),
        *switched(_ln, one_pass="E[x²] − E[x]² loses all precision when a row has a large offset; compute the variance of the centered row, mean((x − μ)²) (or np.var)"),
    ],
    backward_inputs=("dout", "x", "gamma"),
    backward_reference=ref.layer_norm_backward,
    grads=(("dx", "x"), ("dgamma", "gamma"), ("dbeta", "beta")),
    grad_checks=[
        (("dgamma", "dbeta"), param_grad_causes(
            lambda p: _ln(p.replace(gamma=None, beta=None)), _lead,
            uses_x="dγ = Σ dout·x̂ (the normalized input x̂), not dout·x",
            means="dγ and dβ are sums over every leading axis, not means") + [
            ("your backward uses the unbiased variance; the forward normalizes with the biased one (divide by D)",
             lambda p: ((p.dout * normalize(p.x, -1, eps=p.eps, ddof=1)).sum(_lead(p)), p.dout.sum(_lead(p)))),
            ("dγ needs the forward's x̂ = (x − μ)/sqrt(σ² + ε), ε included; yours leaves ε out of x̂",
             lambda p: ((p.dout * normalize(p.x, -1, eps=0.0)).sum(_lead(p)), p.dout.sum(_lead(p))))]),
        (("dx",), [
            *switched(_dx, constants="dx treats μ and σ as constants (dx = γ·dout/σ); they depend on x: in your graph, dx also receives gradient through σ² and through μ, two more terms, each with a sum over the features of the row"),
            *switched(_dx, no_var_term="dx is missing the term that comes from the variance depending on x: follow the path x → σ² → x̂ in your graph; it adds a term proportional to x̂, with a sum over the last axis (of g = γ·dout times x̂)"),
            *switched(_dx, no_mean_term="dx is missing the term that comes from the mean depending on x: subtract mean(γ·dout) over the last axis"),
            *switched(_dx, dx_no_gamma="dx must include γ: the upstream gradient reaches x̂ as g = γ·dout"),
            *switched(_dx, unbiased="your backward uses the unbiased variance; the forward normalizes with the biased one (divide by D)"),
            ("your backward takes its means over axis 0; LayerNorm's statistics, and so the means in dx, are over the last axis",
             lambda p: _dx(p, 0), _dx_means_over_axis0),
            ("γ must multiply dout before the row means (g = γ·dout, then mean(g) and mean(g·x̂) over the last axis): γ differs between the features of a row, so multiplying the dx of γ = 1 by γ afterwards is wrong",
             lambda p: normalize_backward(p.dout, p.x, -1, None, p.eps) * p.gamma),
        ]),
    ],
    relations=lambda p: norm_relations(p.x, -1, p.gamma, p.beta, p.eps),
    eps_ignored=EPS_IGNORED,
    affine=("gamma", "beta"),
    grad_shape_hint="dγ and dβ were summed over the wrong axis: they have one value per feature, so sum over EVERY leading axis (for (B, T, D) input, axes 0 and 1), e.g. .reshape(-1, D).sum(axis=0), never over the last axis",
    dx_layout=lambda p: (lambda a: a, p.dout * p.gamma, -1, True),
)  # fmt: skip


def _probe(shape: tuple, seed: int, offset: float = 0.0, scale: float = 1.0, eps=DEFAULT_EPS):
    """x with an offset of its own per row; gamma in [0.5, 2); beta and dout normal."""
    rng = np.random.default_rng(seed)
    d = shape[-1]
    x = offset + scale * rng.standard_normal(shape) + rng.standard_normal(shape[:-1] + (1,))
    args = {"x": x, "gamma": rng.uniform(0.5, 2.0, d), "beta": rng.standard_normal(d)}
    args["dout"] = np.random.default_rng(seed + 100).standard_normal(shape)
    return Probe(args, {"eps": eps})


def check_forward_on(f, x, gamma, beta, eps=DEFAULT_EPS, *, rtol=1e-6, atol=1e-8, what=None):
    """``f(x, gamma, beta, eps=eps)`` against the reference on inputs the caller chooses.

    x: (..., D); gamma, beta: (D,). A float64 probe that fails is diagnosed against the
    known mistakes; a float32 one only compared (pass a looser ``rtol``/``atol``).
    """
    probe = Probe({"x": x, "gamma": gamma, "beta": beta}, {"eps": eps})
    LAYERNORM.check_forward(f, probe, rtol=rtol, atol=atol, what=what)


def check_forward_shapes(f: Callable) -> None:
    """Output shape equals the input shape, for 2-D and 3-D float64/float32 input."""
    probes = [_probe(shape, 1) for shape in ((4, 6), (2, 3, 5))]
    LAYERNORM.check_shapes(f, probes + [p.replace(x=p.x.astype(np.float32)) for p in probes])


def check_forward_values(f: Callable) -> None:
    """2-D input against the reference: the default eps and eps = 0.3, rows with a large
    offset (1e6), D = 1, a constant row (its output is β), float32 input."""
    LAYERNORM.check_forward(f, _probe((6, 5), 2))
    LAYERNORM.check_forward(f, _probe((6, 5), 3, scale=0.4, eps=0.3))
    LAYERNORM.check_forward(f, _probe((4, 16), 20, offset=1e6), rtol=1e-5, atol=1e-6)
    LAYERNORM.check_forward(f, _probe((5, 1), 21))
    p = _probe((3, 6), 22)
    x = p.x.copy()
    x[1] = 2.5
    LAYERNORM.check_forward(f, p.replace(x=x), what="out with a constant row (expected: β)")
    p = _probe((8, 32), 23)
    p32 = Probe({k: v.astype(np.float32) for k, v in p.args.items()}, p.options)
    LAYERNORM.check_forward(f, p32, rtol=1e-4, atol=1e-5)


def check_forward_3d(f: Callable) -> None:
    """3-D input (B, T, D): each of the B·T vectors is normalized on its own."""
    LAYERNORM.check_forward(f, _probe((3, 4, 5), 4))


check_backward_on = backward_on(
    LAYERNORM,
    """``b(dout, x, gamma, eps=eps)`` against the reference backward on the caller's inputs.

    dout, x: (..., D); gamma: (D,). Returns nothing; raises with the likely mistake.
    """,
)


def check_backward_shapes(b: Callable) -> None:
    """dx like x; dgamma and dbeta of shape (D,) for 2-D and 3-D input."""
    LAYERNORM.check_shapes(b, [_probe((4, 6), 10), _probe((2, 3, 5), 10)], backward=True)


def check_backward_values(b: Callable) -> None:
    """2-D input against central finite differences with a random upstream gradient; then
    against the reference backward for eps = 0.3, D = 2 and rows with a large offset (1e4)."""
    LAYERNORM.check_backward(b, _probe((4, 5), 12), numeric=True, rtol=1e-5, atol=1e-7)
    LAYERNORM.check_backward(b, _probe((6, 4), 26, eps=0.3), rtol=1e-5, atol=1e-6)
    LAYERNORM.check_backward(b, _probe((6, 2), 24), rtol=1e-5, atol=1e-6)
    LAYERNORM.check_backward(b, _probe((4, 16), 25, offset=1e4), rtol=1e-5, atol=1e-6)


def check_backward_3d(b: Callable) -> None:
    """3-D input: dgamma and dbeta summed over both leading axes."""
    LAYERNORM.check_backward(b, _probe((2, 3, 4), 13), numeric=True, rtol=1e-5, atol=1e-7)
