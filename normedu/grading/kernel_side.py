"""The parts of a check that must run where the student's object lives.

When a hand-in is graded, the checks run in the grading worker, where no student code runs
(:mod:`normedu.course.trusted`), and a student's function there is a proxy: calling it sends
plain values (arrays, numbers, strings) to the student's kernel and gets plain values back.
Some checks must hand the student's code something that is not a plain value:

- a **function to call back**, from a fixed set: the activation of a stack
  (:func:`passable`, e.g. ``np.sin``), which crosses as its registered name and is looked up
  on the other side;
- a **torch module or tensor whose gradient they read**, or **an all-reduce between simulated
  processes**: these stay in the kernel. That part of the check is a *harness*, a function of
  :mod:`normedu.grading` decorated with :func:`kernel_side`: it takes the student's object
  first and otherwise plain values, builds what the student's code needs (modules from a seed,
  tensors from arrays, the simulated processes), runs it, and returns plain values (arrays,
  floats, facts such as "the weight is a Parameter").

Called with the student's own object (in the student's notebook), a harness just runs. Called
with a proxy (in the grading worker), it asks the kernel to run it there on the real object
(``Proxy.run_in_kernel``), and its plain result comes back. Either way the check then compares
that result with a reference it computes itself, in its own process: the kernel only ever
reports what the student's code did, it never decides.

Nothing here imports torch.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["kernel_side", "harness", "passable", "passable_name", "named_function", "relu"]

#: Harnesses by key (``"module:qualname"``), filled by :func:`kernel_side` at import.
_HARNESSES: dict[str, Callable] = {}
#: Functions a check may pass to student code, by key.
_PASSABLE: dict[str, Callable] = {"numpy:tanh": np.tanh, "numpy:sin": np.sin}
#: Only the course's checks define harnesses and passable functions.
_PACKAGE = "normedu.grading."


def _key(fn: Callable) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def kernel_side(fn: Callable) -> Callable:
    """Make ``fn(student, *plain_args, **plain_kwargs) -> plain value`` a harness (see the
    module docstring): it runs here on a real object, in the kernel for a proxy."""
    key = _key(fn)
    if not key.startswith(_PACKAGE):
        raise ValueError(f"a harness lives in {_PACKAGE}*, not {key}")
    _HARNESSES[key] = fn

    @functools.wraps(fn)
    def run(student: Any, *args: Any, **kwargs: Any) -> Any:
        # The proxy's type is the grader's own class; in the kernel no object is a proxy.
        remote = getattr(type(student), "run_in_kernel", None)
        if remote is not None:
            return remote(student, key, args, kwargs)
        return fn(student, *args, **kwargs)

    run.harness_key = key
    return run


def _lookup(table: dict[str, Callable], key: object, what: str) -> Callable:
    """``table[key]``, importing the key's module first (that registers its entries); only
    keys of :data:`_PACKAGE` or the built-in numpy entries."""
    if not isinstance(key, str) or ":" not in key:
        raise ValueError(f"not a {what} name: {key!r}")
    module = key.partition(":")[0]
    if key not in table and module.startswith(_PACKAGE):
        importlib.import_module(module)
    if key not in table:
        raise ValueError(f"no {what} named {key!r}")
    return table[key]


def harness(key: object) -> Callable:
    """The harness registered as ``key`` (what the kernel runs for a proxy's request)."""
    return _lookup(_HARNESSES, key, "harness")


def passable(fn: Callable) -> Callable:
    """Register ``fn`` (a function of :mod:`normedu.grading`) as one a check may pass to
    student code: it crosses to the kernel as its name."""
    key = _key(fn)
    if not key.startswith(_PACKAGE):
        raise ValueError(f"a passable function lives in {_PACKAGE}*, not {key}")
    _PASSABLE[key] = fn
    return fn


def passable_name(value: object) -> str | None:
    """The registered name of ``value``, or None if it is not a passable function."""
    for key, fn in _PASSABLE.items():
        if value is fn:
            return key
    return None


def named_function(key: object) -> Callable:
    """The passable function registered as ``key``."""
    return _lookup(_PASSABLE, key, "passable function")


@passable
def relu(z: np.ndarray) -> np.ndarray:
    """max(z, 0): an activation the drift checks pass to ``forward_stack`` (here, not in
    :mod:`.drift`, so that a grading kernel has it without the drift checks). Registered as
    passable, so that it reaches the student's function when the checks run outside the
    kernel."""
    return np.maximum(z, 0.0)
