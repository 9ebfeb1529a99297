"""Checks for the ``jacobian`` assignment (numpy).

Student function: ``layernorm_jacobian(x, eps=1e-5) -> J`` for a 1-D ``x`` of length D
(LayerNorm without gamma/beta), ``J[i, j] = d out_i / d x_j`` of shape (D, D).

References: central finite differences of an independent LayerNorm forward, and the closed
form :func:`normedu.functional.layer_norm_jacobian` (tested against torch autograd).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.conventions import DEFAULT_EPS
from normedu.grading.compare import GradingError, assert_array, call, unchanged
from normedu.grading.diagnose import Hypothesis, check_against, normalize
from normedu.grading.guard import assert_no_shortcut

__all__ = ["check_shape", "check_values", "check_properties", "check_jacobian_on"]

ONES = "the centering term is 𝟏𝟏ᵀ/D (every entry 1/D), from the mean: J = (1/σ)(I − 𝟏𝟏ᵀ/D − x̂x̂ᵀ/D)"  # noqa: E501
NO_CENTER = "the centering term −𝟏𝟏ᵀ/D is missing (that is RMSNorm's Jacobian): J = (1/σ)(I − 𝟏𝟏ᵀ/D − x̂x̂ᵀ/D)"  # noqa: E501
NO_OUTER = (
    "the term −x̂x̂ᵀ/D from the variance depending on x is missing: J = (1/σ)(I − 𝟏𝟏ᵀ/D − x̂x̂ᵀ/D)"  # noqa: E501
)
OUTER_D = "the outer-product term must be divided by D: x̂x̂ᵀ/D"
NO_SCALE = "the whole matrix must be scaled by 1/σ = 1/sqrt(σ² + ε)"
SCALE_VAR = "scale by 1/σ = 1/sqrt(σ² + ε), not by 1/σ²"
EPS_OUT = "ε must be inside the square root: σ = sqrt(var + ε)"
EPS_IGNORED = "the eps argument is not used (or not inside the square root): σ = sqrt(var + eps) with the eps you were given"  # noqa: E501
UNBIASED = "the variance divides by D−1; LayerNorm uses the biased variance (divide by D)"
RAW_X = "the outer product uses x̂ = (x − μ)/σ, the normalized vector, not the raw x"
SIGN = "check the signs: J = (1/σ)(I − 𝟏𝟏ᵀ/D − x̂x̂ᵀ/D), both correction terms are subtracted"


def _variant(
    x,
    eps,
    *,
    ones=1.0,
    outer=1.0,
    outer_div=True,
    scale="sigma",
    ddof=0,
    eps_mode="inside",
    raw=False,
    sign=1.0,
):
    x = np.asarray(x, dtype=np.float64)
    d = x.size
    xc = x - x.mean()
    var = (xc**2).sum() / (d - ddof)
    sigma = {"inside": np.sqrt(var + eps), "outside": np.sqrt(var) + eps, "none": np.sqrt(var)}[
        eps_mode
    ]
    x_hat = x if raw else xc / sigma
    m = (
        np.eye(d)
        - ones * np.ones((d, d)) / d
        - sign * outer * np.outer(x_hat, x_hat) / (d if outer_div else 1)
    )
    factor = {"sigma": 1 / sigma, "none": 1.0, "var": 1 / sigma**2}[scale]
    return factor * m


def _hypotheses(x, eps) -> list[Hypothesis]:
    d = x.size
    return [
        (NO_CENTER, lambda: _variant(x, eps, ones=0.0)),
        (ONES, lambda: _variant(x, eps, ones=d)),
        (NO_OUTER, lambda: _variant(x, eps, outer=0.0)),
        (OUTER_D, lambda: _variant(x, eps, outer_div=False)),
        (NO_SCALE, lambda: _variant(x, eps, scale="none")),
        (SCALE_VAR, lambda: _variant(x, eps, scale="var")),
        (EPS_OUT, lambda: _variant(x, eps, eps_mode="outside")),
        (EPS_IGNORED, lambda: _variant(x, eps, eps_mode="none")),
        (EPS_IGNORED, lambda: _variant(x, DEFAULT_EPS)),
        (UNBIASED, lambda: _variant(x, eps, ddof=1)),
        (RAW_X, lambda: _variant(x, eps, raw=True)),
        (SIGN, lambda: _variant(x, eps, sign=-1.0)),
        (SIGN, lambda: -_variant(x, eps)),
    ]


def _fd_jacobian(x: np.ndarray, eps: float, h: float = 1e-6) -> np.ndarray:
    """Central differences of an independent LayerNorm forward, column by column."""
    d = x.size
    jac = np.zeros((d, d))
    for j in range(d):
        e = np.zeros(d)
        e[j] = h
        jac[:, j] = (normalize(x + e, -1, eps=eps) - normalize(x - e, -1, eps=eps)) / (2 * h)
    return jac


def _jac(f: Callable, x: np.ndarray, eps: float) -> np.ndarray:
    arg = x.copy()
    out = call(f, arg, eps=eps)
    unchanged(x, arg, "x", f.__name__)
    if isinstance(out, np.ndarray) and out.shape == x.shape:
        raise GradingError(
            f"{f.__name__} returned a vector of shape {out.shape}; it must return the (D, D) "
            "matrix of derivatives d out_i / d x_j"
        )
    return assert_array(out, (x.size, x.size), "J")


def _case(f: Callable, x: np.ndarray, eps: float, numeric: bool, rtol=1e-6, atol=1e-8) -> None:
    jac = _jac(f, x, eps)
    expected = _fd_jacobian(x, eps) if numeric else ref.layer_norm_jacobian(x, eps)
    label = f"J for D={x.size}, eps={eps}" + (" (vs finite differences)" if numeric else "")
    try:
        check_against(jac, expected, label, _hypotheses(x, eps), rtol=rtol, atol=atol)
    except GradingError as err:
        how = None if "Likely cause" in str(err) else describe_terms(jac, x, eps)
        if how is None:
            raise
        intro = "In the terms of J" if "How it differs" in str(err) else "How it differs"
        raise GradingError(f"{err} {intro}: {how}.") from None


#: The three terms of J = (1/σ)(I − 𝟏𝟏ᵀ/D − x̂x̂ᵀ/D), each with its sign, by name.
_TERMS = ("identity term I/σ", "centering term −𝟏𝟏ᵀ/(Dσ)", "outer-product term −x̂x̂ᵀ/(Dσ)")


def describe_terms(jac: np.ndarray, x: np.ndarray, eps: float) -> str | None:
    """How a wrong J differs from the right one, in the terms of its formula: each term's
    coefficient fitted by least squares (1 is right), when the three terms explain the whole
    matrix (None otherwise: a J no mix of these terms makes)."""
    x = np.asarray(x, dtype=np.float64)
    d = x.size
    sigma = np.sqrt(x.var() + eps)
    x_hat = (x - x.mean()) / sigma
    basis = [
        np.eye(d) / sigma,
        -np.ones((d, d)) / (d * sigma),
        -np.outer(x_hat, x_hat) / (d * sigma),
    ]
    a = np.stack([b.ravel() for b in basis], axis=1)
    coef, *_ = np.linalg.lstsq(a, np.asarray(jac, dtype=np.float64).ravel(), rcond=None)
    fitted = a @ coef
    if np.linalg.norm(fitted - jac.ravel()) > 1e-6 * (np.linalg.norm(jac) + 1e-300):
        return None
    if np.linalg.matrix_rank(a) < 3:  # a constant vector or D = 1: the terms are not distinct
        return None
    parts = []
    for name, c in zip(_TERMS, coef, strict=True):
        if abs(c - 1) > 1e-6:
            parts.append(
                f"your {name} is missing"
                if abs(c) < 1e-6
                else f"your {name} is {c:.6g} times the right one"
            )
    return "; ".join(parts) + " (the other terms are right)" if parts else None


def check_shape(f: Callable) -> None:
    """Returns a (D, D) float array for a 1-D input of length D."""
    assert_no_shortcut(f)
    for d in (3, 5):
        _jac(f, np.random.default_rng(d).standard_normal(d), DEFAULT_EPS)


def check_values(f: Callable) -> None:
    """Against central finite differences, with the default eps and with eps = 0.3; then
    against the closed form for D = 2, a large offset (1e6) and a constant vector."""
    assert_no_shortcut(f)
    rng = np.random.default_rng(30)
    _case(f, rng.standard_normal(6) * 2 + 1, DEFAULT_EPS, numeric=True, rtol=1e-5, atol=1e-7)
    _case(f, rng.standard_normal(5) * 0.5, 0.3, numeric=True, rtol=1e-5, atol=1e-7)
    _case(f, rng.standard_normal(2), DEFAULT_EPS, numeric=False)
    _case(f, rng.standard_normal(7) + 1e6, DEFAULT_EPS, numeric=False, rtol=1e-5, atol=1e-6)
    _case(f, np.full(4, -2.0), DEFAULT_EPS, numeric=False)


def check_properties(f: Callable) -> None:
    """J is symmetric and J @ 1 = 0 (shifting x by a constant does not change the output)."""
    assert_no_shortcut(f)
    x = np.random.default_rng(31).standard_normal(7)
    jac = _jac(f, x, DEFAULT_EPS)
    if not np.allclose(jac @ np.ones(7), 0, atol=1e-8):
        raise GradingError(
            "J @ 1 should be 0: adding a constant to every x_j does not change LayerNorm's "
            f"output, but your J @ 1 has entries up to {np.abs(jac @ np.ones(7)).max():.3g}. "
            f"Likely cause: {ONES}"
        )
    if not np.allclose(jac, jac.T, atol=1e-8):
        raise GradingError(
            "J should be symmetric (J = (1/σ)(I − 𝟏𝟏ᵀ/D − x̂x̂ᵀ/D) is): check the outer product "
            "x̂x̂ᵀ and that you did not build the transpose of one term only"
        )


def check_jacobian_on(
    f: Callable, x: np.ndarray, eps: float = DEFAULT_EPS, *, rtol: float = 1e-6, atol: float = 1e-8
) -> None:
    """``f(x, eps=eps)`` against the closed-form Jacobian (a (D, D) array) for the caller's
    1-D input ``x`` of length D; a wrong matrix is diagnosed against the known mistakes."""
    assert_no_shortcut(f)
    _case(f, np.asarray(x, dtype=np.float64), eps, numeric=False, rtol=rtol, atol=atol)
