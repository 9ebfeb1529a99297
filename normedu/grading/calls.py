"""Calling student code safely: warnings silenced, floating-point warnings off, any failure
turned into a :class:`GradingError` that names the function.

A leaf module (NumPy and :mod:`.errors` only): the grading kernel loads it for real to run the
checks' kernel-side harnesses (:mod:`normedu.course.reach`), so it must reach no reference.
The norm libraries are blocked during a call by the in-notebook guard
(:func:`normedu.grading.guard.library_blocked`); in a grading kernel they are not there at
all, and no guard is loaded.
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

__all__ = ["call", "unchanged"]


def _blocker(block: bool):
    """The guard's ``library_blocked()``, except in a grading kernel (whose reach already
    lacks the libraries, :mod:`normedu.course.reach`) or when ``block`` is False."""
    import sys

    reach = sys.modules.get("normedu.course.reach")
    if not block or (reach is not None and reach.installed()):
        return contextlib.nullcontext()
    from normedu.grading.guard import library_blocked

    return library_blocked()


def call(
    fn: Callable, *args: Any, name: str | None = None, block: bool = True, **kwargs: Any
) -> Any:
    """Call ``fn(*args, **kwargs)`` with warnings silenced and the norm libraries blocked.

    ``block=False`` leaves the libraries alone (for checks that pass library modules in).

    An exception raised by the student's code becomes a :class:`GradingError` that names the
    function and the exception, so the test cell's output starts with something actionable.
    """
    name = name or getattr(fn, "__name__", "your function")
    blocker = _blocker(block)
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


def unchanged(before: np.ndarray, after: np.ndarray, name: str, fn_name: str) -> None:
    """Raise if an input array was modified in place by the student's function."""
    if not np.array_equal(before, after):
        raise GradingError(
            f"{fn_name} modified its input {name} in place; return new arrays instead "
            f"(use `{name} = ...` rather than `{name} *= ...` or `{name}[...] = ...`)"
        )
