"""Calling student code safely and comparing its results with a reference.

nbgrader scores a test cell 0 when anything reaches stderr, so student code runs with
warnings silenced and numpy's floating-point warnings off: a correct solution that divides by
zero on a probe must not lose its points to a ``RuntimeWarning``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from normedu.grading.calls import call, unchanged
from normedu.grading.errors import GradingError
from normedu.grading.gradcheck import rel_error

__all__ = [
    "GradingError",
    "call",
    "assert_array",
    "assert_close",
    "inline_figures",
    "rel_error",
    "unchanged",
]


def assert_array(value: Any, shape: tuple, what: str, finite: bool = True) -> np.ndarray:
    """Check that ``value`` is a finite floating-point array of ``shape``; return it.
    ``finite=False`` lets NaN/inf through (a caller that diagnoses them itself)."""
    if not isinstance(value, np.ndarray):
        kind = type(value).__name__
        raise GradingError(f"{what} should be a numpy array of shape {shape}, got a {kind}")
    if value.shape != tuple(shape):
        raise GradingError(f"{what} has shape {value.shape}, expected {tuple(shape)}")
    if value.dtype.kind != "f":
        raise GradingError(f"{what} has dtype {value.dtype}, expected a floating-point dtype")
    if finite and not np.all(np.isfinite(value)):
        bad = int(np.sum(~np.isfinite(value)))
        raise GradingError(
            f"{what} contains {bad} NaN/inf values; look for a division by zero or a square root "
            "of a negative number (eps belongs inside the square root)"
        )
    return value


def assert_close(
    actual: Any, expected: Any, what: str, rtol: float = 1e-6, atol: float = 1e-8, hint: str = ""
) -> None:
    """Raise :class:`GradingError` unless ``actual`` matches ``expected`` elementwise."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise GradingError(f"{what} has shape {a.shape}, expected {e.shape}. {hint}".strip())
    if not np.allclose(a, e, rtol=rtol, atol=atol):
        idx = np.unravel_index(int(np.argmax(np.abs(a - e))), a.shape) if a.size else ()
        raise GradingError(
            f"{what} does not match the reference: relative error {rel_error(a, e):.2e} "
            f"(largest difference at index {tuple(int(i) for i in idx)}: got {a[idx]:.6g}, "
            f"expected {e[idx]:.6g}). {hint}".strip()
        )


def inline_figures() -> None:
    """In a Jupyter kernel, display returned matplotlib figures as images (``%matplotlib inline``).

    :mod:`normedu.plots` selects the Agg backend, which by itself gives a figure only a text
    representation in a notebook.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "run_line_magic"):
        shell.run_line_magic("matplotlib", "inline")
