"""How close a wrong result is to the reference, beyond "equal within tolerance".

Four generic findings of :class:`~normedu.grading.normcheck.NormTable`, independent of any
norm: the right values returned in another order (:func:`permutation`); the right result
rounded to a few decimals (:func:`rounded`); the right result at float32's precision only
(:func:`float32_only`); a result near the reference with some eps
(:func:`near`, which keeps "eps ignored" from naming a result that is far from every eps).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from normedu.grading.diagnose import matches

__all__ = [
    "F32_AGREEMENT",
    "EPS_NEAR",
    "FLOAT32_ONLY",
    "near_any",
    "float32_only",
    "ROUNDED",
    "rounded",
    "precision_cause",
    "permutation",
    "wrong_order",
]

#: The message for a result right to float32's precision only (:func:`float32_only`).
FLOAT32_ONLY = (
    "your result is correct to float32 precision only: compute in the input's dtype (float64 "
    "here), without casting to np.float32 on the way"
)

#: The message for a result rounded to a few decimals (:func:`rounded`), with their number.
ROUNDED = (
    "your result is rounded to {} decimals: return the values as computed (np.round, round() "
    "or a value read back from a formatted string keeps only a few digits)"
)

#: A float64 result within this error, relative to the reference's largest value, but not
#: within the check's tolerance was computed in float32 (its eps is 1.2e-7; a few roundings).
F32_AGREEMENT = 3e-5

#: "eps ignored" only for a result this close (relative to the reference's largest value)
#: to the reference with some eps: a result far from every eps tells nothing about eps.
EPS_NEAR = 1e-2


def _pairs(actual: Any, expected: Any) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Matching (actual, expected) float64 arrays, one pair per element of a tuple; None when
    the nesting or a shape differs or ``actual`` has NaN/inf."""
    if isinstance(expected, tuple):
        if not isinstance(actual, tuple) or len(actual) != len(expected):
            return None
        items = list(zip(actual, expected, strict=True))
    else:
        items = [(actual, expected)]
    out = []
    for a, e in items:
        try:
            a, e = np.asarray(a, dtype=np.float64), np.asarray(e, dtype=np.float64)
        except (TypeError, ValueError):
            return None
        if a.shape != e.shape or not np.all(np.isfinite(a)):
            return None
        out.append((a, e))
    return out


def _within(actual: Any, expected: Any, tol: float) -> bool:
    """Every array of ``actual`` within ``tol`` of ``expected``'s, relative to its largest value."""
    pairs = _pairs(actual, expected)
    if pairs is None:
        return False
    return all(
        float(np.max(np.abs(a - e), initial=0.0))
        <= tol * max(float(np.max(np.abs(e), initial=0.0)), 1e-300)
        for a, e in pairs
    )


def near_any(actual: Any, candidates: Iterable[Callable[[], Any]]) -> bool:
    """``actual`` is within :data:`EPS_NEAR` of one candidate's result (relative to its
    scale); a candidate that raises counts as far."""
    for thunk in candidates:
        try:
            with np.errstate(all="ignore"):
                if _within(actual, thunk(), EPS_NEAR):
                    return True
        except Exception:  # noqa: BLE001 - a failing candidate tells nothing
            continue
    return False


def float32_only(actual: Any, expected: Any) -> bool:
    """``actual`` agrees with ``expected`` to float32's precision (:data:`F32_AGREEMENT`)."""
    return _within(actual, expected, F32_AGREEMENT)


def rounded(actual: Any, expected: Any) -> int | None:
    """The number of decimals (1 to 8) ``actual`` equals ``expected`` rounded to, when it is
    not ``expected`` itself; None otherwise. A float32 result (:func:`float32_only`) is
    another thing: all its digits are there, only less precise."""
    pairs = _pairs(actual, expected)
    if pairs is None:
        return None
    for decimals in range(1, 9):
        if all(
            np.allclose(a, np.round(e, decimals), rtol=0, atol=1e-12) for a, e in pairs
        ) and not all(np.allclose(a, e, rtol=0, atol=1e-12) for a, e in pairs):
            return decimals
    return None


def precision_cause(actual: Any, expected: Any) -> str | None:
    """The message for a wrong float64 result that is the right one rounded to a few decimals
    (:data:`ROUNDED`) or right to float32's precision only (:data:`FLOAT32_ONLY`); None when
    it is neither."""
    decimals = rounded(actual, expected)
    if decimals is not None:
        return ROUNDED.format(decimals)
    return FLOAT32_ONLY if float32_only(actual, expected) else None


def permutation(
    actual: Sequence[Any], expected: Sequence[Any], rtol: float, atol: float
) -> tuple[int, ...] | None:
    """The order ``order`` (not the identity) with ``actual[order[i]]`` equal to
    ``expected[i]`` for every i: the right values returned in the wrong places; else None."""
    n = len(expected)
    if len(actual) != n:
        return None
    for order in itertools.permutations(range(n)):
        if order == tuple(range(n)):
            continue
        if all(matches(actual[j], expected[i], rtol, atol) for i, j in enumerate(order)):
            return order
    return None


def wrong_order(
    actual: Any, expected: Any, names: Sequence[str], fn_name: str, loose: bool = False
) -> str | None:
    """The message for ``actual``, a tuple holding ``expected``'s values in another order
    (``names`` in the right order; ``loose``: float32 tolerances); None when it is not that."""
    if not isinstance(actual, tuple) or not isinstance(expected, tuple) or len(names) < 2:
        return None
    order = permutation(actual, expected, *((1e-4, 1e-5) if loose else (1e-6, 1e-8)))
    if order is None:
        return None
    got = ", ".join(names[order.index(j)] for j in range(len(names)))
    return (
        f"{fn_name} returns ({got}) in the wrong order: expected ({', '.join(names)}). Each "
        "value is right; return them in that order"
    )
