"""Naming the mistake: compare a wrong result with the results of known mistakes.

A check that finds a mismatch with the reference recomputes the same probe the way each
catalogued mistake would (unbiased variance, eps outside the square root, the wrong axis ...)
and reports the message of the first one the student's output matches. The variants are
written here independently of the catalog of wrong student code in :mod:`.mistakes`, which the
tests feed through the checks.

:func:`normalize` and :func:`normalize_backward` compute the textbook formulas with switches
for each mistake; with the default switches they are the correct formulas.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from normedu.conventions import DEFAULT_EPS
from normedu.grading.compare import GradingError, assert_close

__all__ = [
    "Hypothesis",
    "diagnose",
    "matches",
    "check_against",
    "describe_difference",
    "other_axis_relations",
    "wrong_order_relations",
    "norm_relations",
    "retry_hint",
    "explained_by_rerun",
    "normalize",
    "normalize_backward",
]

#: (message, thunk computing what that mistake would output)
Hypothesis = tuple[str, Callable[[], Any]]


def matches(actual: Any, candidate: Any, rtol: float, atol: float) -> bool:
    """``actual`` equals ``candidate`` within tolerance: same nesting of tuples, same shapes."""
    if isinstance(candidate, tuple):
        if not isinstance(actual, tuple) or len(actual) != len(candidate):
            return False
        return all(matches(a, c, rtol, atol) for a, c in zip(actual, candidate, strict=True))
    try:
        a = np.asarray(actual, dtype=np.float64)
        c = np.asarray(candidate, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return a.shape == c.shape and bool(np.allclose(a, c, rtol=rtol, atol=atol, equal_nan=True))


def diagnose(
    actual: Any,
    hypotheses: Iterable[Hypothesis],
    expected: Any = None,
    rtol: float = 1e-7,
    atol: float = 1e-9,
) -> str | None:
    """Message of the first hypothesis whose output ``actual`` matches, else None.

    The tolerance is tight (a float64 probe reproduces a mistake to ~1e-12) so that a mistake
    with a small effect is not mistaken for another one. A hypothesis whose output equals
    ``expected`` on this probe (e.g. "wrong axis" on a 2-D input) cannot tell anything apart
    and is skipped.
    """
    for message, thunk in hypotheses:
        try:
            with np.errstate(all="ignore"):
                candidate = thunk()
        except Exception:  # noqa: BLE001 - a variant that cannot be computed cannot match
            continue
        if expected is not None and matches(expected, candidate, 1e-9, 1e-12):
            continue
        if matches(actual, candidate, rtol, atol):
            return message
    return None


def check_against(
    actual: Any,
    expected: Any,
    what: str,
    hypotheses: Iterable[Hypothesis] = (),
    rtol: float = 1e-6,
    atol: float = 1e-8,
    hint: str = "",
    diag_tol: tuple[float, float] = (1e-7, 1e-9),
    relations: Iterable[Hypothesis] = (),
) -> None:
    """Pass if ``actual`` matches ``expected``; else raise naming the likely mistake.

    Three tiers, most specific first: a catalogued mistake of ``hypotheses`` ("Likely cause:
    ..."); a generic relation to the reference built from its structure, ``relations`` (see
    :func:`norm_relations`: another axis, steps in another order); a simple relation between
    the two arrays (:func:`describe_difference`). Both of the last give "How it differs: ...".
    ``diag_tol`` is the (rtol, atol) used to match the variants; loosen it for float32 outputs.
    """
    if matches(actual, expected, rtol, atol):
        return
    found = diagnose(actual, hypotheses, expected, *diag_tol)
    if found is not None:
        raise GradingError(f"{what} is wrong. Likely cause: {found}")
    # A relation "equals" under the same tolerance as the reference comparison itself.
    how = diagnose(actual, relations, expected, rtol, atol) or describe_difference(actual, expected)
    if how is not None:
        hint = f"How it differs: {how}. {hint}".strip()
    assert_close(actual, expected, what, rtol=rtol, atol=atol, hint=hint)


def normalize(
    x: np.ndarray,
    axes: int | tuple[int, ...],
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    eps: float = DEFAULT_EPS,
    *,
    ddof: int = 0,
    eps_mode: str = "inside",
    center: bool = True,
    one_pass: bool = False,
    sqrt: bool = True,
) -> np.ndarray:
    """``gamma * (x - mean) / sqrt(var + eps) + beta`` with switches for the usual mistakes.

    - axes: axes reduced over (LayerNorm: -1, BatchNorm: 0).
    - gamma/beta: broadcast against x as given (None: not applied).
    - ddof: 1 for the unbiased variance.
    - eps_mode: "inside" sqrt(var + eps); "outside" sqrt(var) + eps; "none" sqrt(var).
    - center: False skips the mean (RMSNorm's statistic, mean of squares).
    - one_pass: variance as E[x^2] - E[x]^2 (cancels catastrophically at large offsets).
    - sqrt: False divides by the variance itself.
    """
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=axes, keepdims=True) if center else 0.0
    n = x.size // np.asarray(mu).size if center else None
    if center and one_pass:
        var = (x * x).mean(axis=axes, keepdims=True) - mu * mu
    else:
        var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    if ddof and center:
        var = var * n / (n - ddof)
    if eps_mode == "inside":
        denom = np.sqrt(var + eps) if sqrt else var + eps
    elif eps_mode == "outside":
        denom = (np.sqrt(var) if sqrt else var) + eps
    else:
        denom = np.sqrt(var) if sqrt else var
    out = (x - mu) / denom
    if gamma is not None:
        out = out * gamma
    if beta is not None:
        out = out + beta
    return out


def normalize_backward(
    dout: np.ndarray,
    x: np.ndarray,
    axes: int | tuple[int, ...],
    gamma: np.ndarray | None = None,
    eps: float = DEFAULT_EPS,
    *,
    center: bool = True,
    mean_term: bool = True,
    var_term: bool = True,
    use_gamma: bool = True,
    ddof: int = 0,
) -> np.ndarray:
    """dx of :func:`normalize` (eps inside) with switches that drop one term at a time.

    ``dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))`` with ``g = dout * gamma``.
    - mean_term: False drops ``- mean(g)`` (the mean treated as a constant).
    - var_term: False drops ``- x_hat * mean(g * x_hat)`` (the variance treated as a constant).
    - use_gamma: False forgets gamma in g.
    - center: False is RMSNorm (no mean term; x_hat = x / rms).
    """
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=axes, keepdims=True) if center else 0.0
    xc = x - mu
    n = x.size // np.asarray(x.mean(axis=axes, keepdims=True)).size
    var = (xc**2).mean(axis=axes, keepdims=True)
    if ddof:
        var = var * n / (n - ddof)
    rstd = 1.0 / np.sqrt(var + eps)
    x_hat = xc * rstd
    g = dout * gamma if (gamma is not None and use_gamma) else np.asarray(dout, dtype=np.float64)
    dx = g.copy()
    if center and mean_term:
        dx = dx - g.mean(axis=axes, keepdims=True)
    if var_term:
        dx = dx - x_hat * (g * x_hat).mean(axis=axes, keepdims=True)
    return rstd * dx


def _close(a: np.ndarray, b: np.ndarray, rtol: float = 1e-6, atol: float = 1e-9) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


def describe_difference(actual: Any, expected: Any) -> str | None:
    """How ``actual`` differs from ``expected``, in words, when a simple relation explains it
    (None otherwise): NaN/inf, a constant factor, a flipped sign, a per-row or per-column
    offset or scale, two axes swapped, a wrong dtype. Used when no catalogued mistake
    matches, so that the message says more than "does not match"."""
    if isinstance(expected, tuple):
        if not isinstance(actual, tuple) or len(actual) != len(expected):
            return None
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            found = describe_difference(a, e)
            if found:
                return f"element {i} of the tuple: {found}"
        return None
    try:
        a = np.asarray(actual)
        e = np.asarray(expected, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if a.dtype.kind not in "fiub" or a.size == 0:
        return None
    af = a.astype(np.float64)
    if not np.all(np.isfinite(af)):
        bad = int(np.sum(~np.isfinite(af)))
        return (
            f"{bad} of its {af.size} values are NaN or inf: look for a division by zero or a "
            "square root of a negative number (eps belongs inside the square root)"
        )
    want = np.asarray(expected).dtype
    if a.dtype != want and a.dtype.kind == "f" and want.kind == "f" and a.shape == e.shape:
        return (
            f"it has dtype {a.dtype}, while the input and the reference are {want}: compute in "
            "the input's dtype (no astype, no np.float32/np.float16 constants)"
        )
    if af.shape != e.shape:
        if af.ndim >= 2 and af.shape == e.swapaxes(-1, -2).shape:
            if _close(af, e.swapaxes(-1, -2)):
                return "it is the reference with its last two axes swapped (a transpose)"
        return None
    if e.size == 1:
        # Any two nonzero scalars differ by "a constant factor": for one value, nothing to say.
        return None
    with np.errstate(all="ignore"):
        if af.ndim >= 2 and af.shape[-1] == af.shape[-2] and _close(af, e.swapaxes(-1, -2)):
            return "it is the reference with its last two axes swapped (a transpose)"
        ee = float(np.sum(e * e))
        if ee > 0:
            c = float(np.sum(af * e) / ee)
            if abs(c - 1) > 1e-6 and _close(af, c * e):
                if abs(c + 1) < 1e-6:
                    return "it is the reference with its sign flipped (every value times −1)"
                return f"it is the reference times a constant factor {c:.6g}"
        d = af - e
        for axis, unit, where in ((-1, "row", "along the last axis"), (0, "column", "axis 0")):
            if af.ndim < 2 and axis == 0:
                continue
            shift = d.mean(axis=axis, keepdims=True)
            if np.ptp(shift) > 1e-9 and _close(af, e + shift):
                return (
                    f"each {unit} is off by a constant of its own (an offset per {unit}, {where})"
                )
            ratio = np.sum(af * e, axis=axis, keepdims=True) / np.maximum(
                np.sum(e * e, axis=axis, keepdims=True), 1e-300
            )
            if np.ptp(ratio) > 1e-9 and _close(af, e * ratio):
                return f"each {unit} is scaled by a factor of its own (a scale per {unit}, {where})"
    return None


#: Axes reduced over: one axis, or several.
Axes = int | tuple[int, ...]


def _axes_tuple(axes: Axes, ndim: int) -> tuple[int, ...]:
    """``axes`` as sorted non-negative axis numbers: -1 and (1, 0) name the same as 1 and (0, 1)."""
    return tuple(sorted({a % ndim for a in ((axes,) if isinstance(axes, int) else axes)}))


def _axes_text(axes: Axes, ndim: int) -> str:
    axes = _axes_tuple(axes, ndim)
    if len(axes) == ndim:
        return "every axis (the whole array)"
    if len(axes) == 1:
        return f"axis {axes[0]}" + (" (the last)" if axes[0] == ndim - 1 else "")
    return "axes " + ", ".join(map(str, axes))


def other_axis_relations(
    reference_over: Callable[[Axes], Any], ndim: int, right: Axes
) -> list[Hypothesis]:
    """ "It equals the reference computed over another axis", for every other choice of axes.

    ``reference_over(axes)`` is the reference reducing over ``axes`` instead of ``right`` (the
    caller's own function with the axis as a parameter). Tried: each single axis, every axis at
    once, and every axis but the last, except ``right`` itself.
    """
    choices = [(i,) for i in range(ndim)] + [tuple(range(ndim)), tuple(range(ndim - 1))]
    seen, out = {_axes_tuple(right, ndim)}, []
    for axes in choices:
        if not axes or axes in seen:
            continue
        seen.add(axes)
        message = (
            f"it equals the reference computed over {_axes_text(axes, ndim)} instead of "
            f"{_axes_text(right, ndim)}: check the axis of every reduction (mean, var, sum)"
        )
        out.append((message, lambda axes=axes: reference_over(axes if len(axes) > 1 else axes[0])))
    return out


def wrong_order_relations(
    x: Any, steps: Sequence[tuple[str, Callable[[np.ndarray], np.ndarray]]]
) -> list[Hypothesis]:
    """ "Its steps are composed in another order", for every other order of ``steps``.

    ``steps`` is the reference as a pipeline ``[(name, fn), ...]`` applied to ``x`` in that
    order (each ``fn`` maps an array to an array), e.g. normalize, scale by γ, shift by β.
    """
    out = []
    for order in itertools.permutations(range(len(steps))):
        if order == tuple(range(len(steps))):  # the reference itself
            continue

        def run(order=order):
            z = np.asarray(x, dtype=np.float64)
            for i in order:
                z = steps[i][1](z)
            return z

        got = " → ".join(steps[i][0] for i in order)
        want = " → ".join(name for name, _ in steps)
        out.append(
            (f"it equals the right steps composed in the wrong order ({got}; the reference "
             f"does {want})", run)
        )  # fmt: skip
    return out


def norm_relations(
    x: Any,
    axes: Axes,
    gamma: Any = None,
    beta: Any = None,
    eps: float = DEFAULT_EPS,
    *,
    center: bool = True,
) -> list[Hypothesis]:
    """The generic relations of a normalization ``gamma * (x - mean) / sqrt(var + eps) + beta``
    over ``axes`` (``center=False``: RMSNorm's x / rms): the same formula over another axis,
    and its steps (normalize, scale by γ, shift by β) in another order."""
    x = np.asarray(x, dtype=np.float64)

    def standardize(z: np.ndarray, a: Axes) -> np.ndarray:
        return normalize(z, a, eps=eps, center=center)

    steps = [("normalize", lambda z: standardize(z, axes))]
    if gamma is not None:
        steps.append(("scale by γ", lambda z: z * gamma))
    if beta is not None:
        steps.append(("shift by β", lambda z: z + beta))

    def over(a: Axes) -> np.ndarray:
        z = standardize(x, a)
        for _, step in steps[1:]:
            z = step(z)
        return z

    return other_axis_relations(over, x.ndim, axes) + wrong_order_relations(x, steps)


def retry_hint(
    rerun: Callable[[Any, Any], Any], reference: Callable[[Any, Any], Any], gamma: Any, beta: Any
) -> str | None:
    """Call the student's function again with γ = 1 and/or β = 0 (``rerun(gamma, beta)``) and
    say when it is right only there: that puts the mistake in how γ or β is applied."""
    ones = np.ones_like(gamma)
    trials = [("γ = 1 and β = 0", ones, None if beta is None else np.zeros_like(beta))]
    if beta is not None:
        trials += [("β = 0", gamma, np.zeros_like(beta)), ("γ = 1", ones, beta)]
    right = []
    for label, g, b in trials:
        try:
            with np.errstate(all="ignore"):
                got, want = rerun(g, b), reference(g, b)
        except Exception:  # noqa: BLE001 - a failing re-run tells nothing
            return None
        right.append((label, matches(got, want, 1e-6, 1e-8)))
    ok = {label for label, good in right if good}
    if not ok:
        return None
    if "γ = 1" in ok and "β = 0" not in ok:
        return "your result is right when γ = 1 but not otherwise: check how you apply γ"
    if "β = 0" in ok and "γ = 1" not in ok:
        return "your result is right when β = 0 but not otherwise: check how you add β"
    return (
        "your result is right when γ = 1 and β = 0: the normalization is right, the γ/β step is not"
    )


@contextlib.contextmanager
def explained_by_rerun(
    rerun: Callable[[Any, Any], Any], reference: Callable[[Any, Any], Any], gamma: Any, beta: Any
):
    """Within the block, a :class:`GradingError` that names no mistake gets the
    :func:`retry_hint` (the student's function re-run with γ = 1 and β = 0) appended."""
    try:
        yield
    except GradingError as err:
        if "Likely cause" in str(err):
            raise
        hint = retry_hint(rerun, reference, gamma, beta)
        if hint is None:
            raise
        raise GradingError(f"{err} {hint[0].upper()}{hint[1:]}.") from None
