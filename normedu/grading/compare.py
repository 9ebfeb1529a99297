"""Calling student code safely and comparing its results with a reference.

nbgrader scores a test cell 0 when anything reaches stderr, so student code runs with
warnings silenced and numpy's floating-point warnings off: a correct solution that divides by
zero on a probe must not lose its points to a ``RuntimeWarning``.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from normedu.grading.errors import GradingError
from normedu.grading.guard import library_blocked

__all__ = [
    "GradingError",
    "call",
    "assert_array",
    "assert_close",
    "inline_figures",
    "rel_error",
    "unchanged",
]


def rel_error(a: Any, b: Any) -> float:
    """Largest elementwise relative error ``|a - b| / max(1e-8, |a| + |b|)`` (CS231n's)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(1e-8, np.abs(a) + np.abs(b))))


def call(
    fn: Callable, *args: Any, name: str | None = None, block: bool = True, **kwargs: Any
) -> Any:
    """Call ``fn(*args, **kwargs)`` with warnings silenced and the norm libraries blocked.

    ``block=False`` leaves the libraries alone (for checks that pass library modules in).

    An exception raised by the student's code becomes a :class:`GradingError` that names the
    function and the exception, so the test cell's output starts with something actionable.
    """
    name = name or getattr(fn, "__name__", "your function")
    blocker = library_blocked() if block else contextlib.nullcontext()
    with warnings.catch_warnings(), np.errstate(all="ignore"), blocker:
        warnings.simplefilter("ignore")
        try:
            return fn(*args, **kwargs)
        except GradingError:
            raise
        except NotImplementedError as e:
            raise GradingError(
                f"{name} is not implemented yet (it raises NotImplementedError)"
            ) from e
        except Exception as e:  # noqa: BLE001 - any failure of student code is a failed check
            hint = _keepdims_hint(str(e))
            raise GradingError(f"{name} raised {type(e).__name__}: {e}{hint}") from e


def _keepdims_hint(text: str) -> str:
    """The keepdims hint, for a broadcasting error between two shapes of which one is the
    other with one axis dropped ((4, 6) and (4,)): what a reduction without keepdims gives.
    Any other error (an einsum's subscripts, two unrelated shapes) gets no hint."""
    if "could not be broadcast" not in text:
        return ""
    shapes = [
        tuple(int(d) for d in m.split(",") if d.strip())
        for m in re.findall(r"\(([\d,\s]*)\)", text)
    ]
    for a, b in itertools.permutations(shapes, 2):
        if len(b) == len(a) - 1 and any(a[:i] + a[i + 1 :] == b for i in range(len(a))):
            return (
                f" (shapes {a} and {b}: a reduction without keepdims=True gives {b}; keep the "
                "reduced axis so that the statistics broadcast against the array)"
            )
    return ""


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


def unchanged(before: np.ndarray, after: np.ndarray, name: str, fn_name: str) -> None:
    """Raise if an input array was modified in place by the student's function."""
    if not np.array_equal(before, after):
        raise GradingError(
            f"{fn_name} modified its input {name} in place; return new arrays instead "
            f"(use `{name} = ...` rather than `{name} *= ...` or `{name}[...] = ...`)"
        )
