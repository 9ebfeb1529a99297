"""How a wrong dx differs from the right one, in the terms of its formula.

Where no catalogued mistake matches a backward pass, :func:`describe_dx_difference` says which
term of dx = (1/σ)·(g − mean(g) − x̂·mean(g·x̂)) is off (a factor missing or extra, a term
missing) or how their difference is laid out, so that a mistake nobody catalogued still gets
a message a student can check. Split from :mod:`.diagnose`, which holds the generic relations.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from normedu.grading.diagnose import Axes

__all__ = ["describe_dx_difference"]


def _dx_terms(x, g, axes, eps: float, center: bool) -> dict[str, np.ndarray]:
    """The terms of dx = (1/σ)·(g − mean(g) − x̂·mean(g·x̂)) over ``axes`` (no mean term for
    RMSNorm, ``center=False``), each with its sign."""
    mu = x.mean(axis=axes, keepdims=True) if center else 0.0
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc**2).mean(axis=axes, keepdims=True) + eps)
    x_hat = xc * rstd
    terms = {"direct term g/σ": rstd * g}
    if center:
        mean_g = np.broadcast_to(g.mean(axis=axes, keepdims=True), g.shape)
        terms["mean term −mean(g)/σ"] = -rstd * mean_g
    proj = (g * x_hat).mean(axis=axes, keepdims=True)
    terms["variance term −x̂·mean(g·x̂)/σ"] = -rstd * x_hat * proj
    return terms


def describe_dx_difference(
    actual: Any, expected: Any, x: Any, g: Any, axes: Axes, eps: float, center: bool = True
) -> str | None:
    """How a wrong dx differs from the right one, in the terms of its formula (None when no
    simple relation explains it). ``x`` and ``g`` (= γ·dout) are laid out so that ``axes``
    are the normalized axes of each row, as ``actual`` and ``expected`` are. Tried: one term
    of dx times a constant (a factor missing or extra, or the term missing); a difference that
    is, in each row, a constant (the mean term), a multiple of x̂ (the variance term) or a
    multiple of g (the direct term), or a combination of two of them."""
    try:
        a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
        x, g = np.asarray(x, np.float64), np.asarray(g, np.float64)
    except (TypeError, ValueError):
        return None
    if a.shape != e.shape or a.shape != x.shape or not np.all(np.isfinite(a)):
        return None
    d = a - e
    scale = np.sqrt(np.sum(e * e)) + 1e-300

    def small(r: np.ndarray) -> bool:
        return bool(np.sqrt(np.sum(r * r)) <= 1e-6 * scale)

    # A factor of its own per row that depends on ε: 1/σ without ε (or with it twice).
    mu = x.mean(axis=axes, keepdims=True) if center else 0.0
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    ee = np.sum(e * e, axis=axes, keepdims=True)
    ratio = np.sum(a * e, axis=axes, keepdims=True) / np.maximum(ee, 1e-300)
    with np.errstate(all="ignore"):
        for factor, words in (
            (
                np.sqrt((var + eps) / var),
                "its factor 1/σ leaves ε out: use 1/sqrt(σ² + ε), as the forward does",
            ),
            (np.sqrt(var / (var + eps)), "ε is counted twice in its factor 1/σ"),
        ):
            if (
                np.ptp(ratio) > 1e-9
                and np.allclose(ratio, factor, rtol=1e-6)
                and small(a - ratio * e)
            ):
                return (
                    "dx is the right dx times a factor that depends on ε, one per slice of "
                    f"values that share a σ: {words}"
                )
    terms = _dx_terms(x, g, axes, eps, center)
    for name, t in terms.items():
        tt = float(np.sum(t * t))
        if tt > 0:
            c = float(np.sum(d * t) / tt)
            if abs(c) > 1e-6 and small(d - c * t):
                if abs(c + 1) < 1e-6:
                    return f"dx is the right dx without its {name}"
                return (
                    f"your {name} is {1 + c:.6g} times the right one (the other terms are right): "
                    "a factor of that term is missing, extra or wrong"
                )
    mu = x.mean(axis=axes, keepdims=True) if center else 0.0
    x_hat = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    bases = {
        "a constant of its own per slice of values that share a mean (the mean term)": np.ones_like(
            x
        ),
        "a multiple of x̂ per slice (the variance term)": x_hat,
        "a multiple of g = γ·dout per slice (the direct term)": g,
    }
    names = list(bases)
    for k in (1, 2):
        for combo in itertools.combinations(names, k):
            B = [bases[n] for n in combo]
            coef = _row_fit(d, B, axes)
            if coef is not None and small(d - sum(c * b for c, b in zip(coef, B, strict=True))):
                return "dx differs from the right dx by " + " plus ".join(combo)
    return None


def _row_fit(d: np.ndarray, bases: list[np.ndarray], axes: Axes) -> list[np.ndarray] | None:
    """Least-squares coefficients, one per row (reduced over ``axes``), of ``d`` on ``bases``."""
    k = len(bases)
    gram = np.empty(np.shape(d.sum(axis=axes, keepdims=True)) + (k, k))
    rhs = np.empty(gram.shape[:-1])
    for i in range(k):
        rhs[..., i] = (d * bases[i]).sum(axis=axes, keepdims=True)
        for j in range(k):
            gram[..., i, j] = (bases[i] * bases[j]).sum(axis=axes, keepdims=True)
    try:
        sol = np.linalg.solve(gram, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return None
    return [sol[..., i] for i in range(k)]
