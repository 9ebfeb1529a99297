"""Checking that bad input raises a ``ValueError`` (any message): the visible 1-point cells of
the assignments whose contract says so (GroupNorm's C % G, DyT's scalar alpha, QK-norm's shapes).

The grading accepts any ``ValueError``: a hidden or numeric
cell never depends on an error's wording (``tests/test_grading.py`` proves it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from normedu.grading.compare import GradingError, call
from normedu.grading.guard import assert_no_shortcut

__all__ = ["expect_value_error"]


def expect_value_error(
    fn: Callable, args: tuple, situation: str, why: str, **kwargs: Any
) -> ValueError:
    """``fn(*args, **kwargs)`` must raise a ``ValueError``, which is returned (its message may
    earn a printed note, never a point); ``situation`` says what is wrong with the input ("for
    k of shape ... and q of shape ..."), ``why`` why it must not pass silently. Called on
    copies of the arrays. A message that names the shapes is good style, never required."""
    name = getattr(fn, "__name__", "your function")
    assert_no_shortcut(fn)
    copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    try:
        call(fn, *copies, name=name, **kwargs)
    except GradingError as e:
        error = e.__cause__  # the student's exception (None: a check's own message)
        if error is None or isinstance(error, NotImplementedError):
            raise
        if not isinstance(error, ValueError):
            raise GradingError(
                f"{name} raised {type(error).__name__} ({error}) {situation}: raise a "
                f"ValueError instead (any message). {why}"
            ) from error
        return error
    raise GradingError(f"{name} returned a result {situation}: it must raise a ValueError. {why}")
