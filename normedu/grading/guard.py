"""The anti-shortcut guard: a function the student was asked to write must not delegate.

Two layers, so that neither renaming nor aliasing gets through:

1. **Static**: :func:`assert_no_shortcut` walks the function's bytecode (nested functions,
   lambdas, the student's own helper functions and class methods included) and rejects
   ``import`` of a banned module, global names that resolve to a banned module or to a
   function defined in one, and attribute accesses to a norm entry point (``F.layer_norm``,
   ``torch.rms_norm``, ``nn.LayerNorm`` ...).
2. **Dynamic**: :func:`library_blocked` temporarily replaces the norm entry points of
   :mod:`normedu.functional`, :mod:`normedu.nn` and (only if the kernel already imported it)
   torch with stubs that raise, while the student's code runs.

Importing this module does not import torch.
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import normedu.functional as nf
from normedu.grading.errors import GradingError
from normedu.norms import NORMS

__all__ = ["assert_no_shortcut", "library_blocked", "find_shortcuts", "NUMPY_ONLY", "TORCH_OK"]

#: Module prefixes a numpy-only exercise may not use.
NUMPY_ONLY = ("torch", "normedu", "sklearn", "jax", "tensorflow", "scipy")
#: Module prefixes a torch exercise may not use (torch itself is the point of the exercise).
TORCH_OK = ("normedu", "sklearn", "jax", "tensorflow")

#: Attribute names that are a library's own normalization (or its Jacobian): every registered
#: norm's function and module names (:data:`normedu.norms.NORMS`), normedu's reference
#: functions, and torch's entry points that have no course norm of their own.
NORM_ATTRS = frozenset(
    {name for spec in NORMS for name in (spec.function, spec.class_name, *spec.torch_modules)}
    | set(nf.__all__)
    | {
        "instance_norm",
        "native_layer_norm",
        "native_batch_norm",
        "InstanceNorm1d",
        "jacobian",
        "jacrev",
        "jacfwd",
        "vjp",
    }
)


#: A finding that names a library softmax (scipy.special.softmax, log_softmax, logsumexp).
_SOFTMAX = re.compile(r"\b(log_)?softmax\b|\blogsumexp\b")


def _banned_module(name: str, banned: tuple[str, ...]) -> bool:
    return any(name == b or name.startswith(b + ".") for b in banned)


def _describe(obj: Any) -> str | None:
    """The module an object comes from (for modules, their own name)."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    return getattr(obj, "__module__", None) if callable(obj) else None


def find_shortcuts(fn: Any, banned: tuple[str, ...] = NUMPY_ONLY) -> list[str]:
    """Everything in ``fn`` (a function or class) that looks like delegation; [] if clean."""
    found: list[str] = []
    seen: set[int] = set()

    def visit_function(f: Any) -> None:
        f = inspect.unwrap(f)
        if id(f) in seen:
            return
        seen.add(id(f))
        code = getattr(f, "__code__", None)
        if code is None:
            return
        visit_code(code, getattr(f, "__globals__", {}))

    def visit_class(cls: type) -> None:
        if id(cls) in seen:
            return
        seen.add(id(cls))
        for base in cls.__mro__[1:]:
            mod = base.__module__ or ""
            if _banned_module(mod, banned) or base.__name__ in NORM_ATTRS:
                found.append(f"subclasses {mod}.{base.__name__}")
        for value in vars(cls).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                value = value.fget
            if inspect.isfunction(value):
                visit_function(value)

    def visit_code(code: types.CodeType, globs: dict) -> None:
        module = ""
        for ins in dis.get_instructions(code):
            arg = ins.argval
            if ins.opname == "IMPORT_FROM" and _banned_module(module, banned):
                if _SOFTMAX.fullmatch(str(arg)):  # a softmax imported inside the function
                    found.append(f"uses {arg} (from {module})")
            if ins.opname == "IMPORT_NAME" and isinstance(arg, str):
                module = arg
                if _banned_module(arg, banned):
                    found.append(f"imports {arg}")
            elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM") and isinstance(arg, str):
                if arg in NORM_ATTRS:
                    found.append(f"uses .{arg}")
            elif ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(arg, str):
                if arg not in globs:
                    continue
                obj = globs[arg]
                origin = _describe(obj)
                if origin and _banned_module(origin, banned):
                    found.append(f"uses {arg} (from {origin})")
                elif inspect.isfunction(obj):
                    # The student's own helpers live in the notebook's namespace (__main__).
                    if obj.__globals__ is globs:
                        visit_function(obj)
                elif inspect.isclass(obj) and getattr(obj, "__module__", "") == globs.get(
                    "__name__"
                ):
                    visit_class(obj)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                visit_code(const, globs)

    if inspect.isclass(fn):
        visit_class(fn)
    else:
        visit_function(fn)
    # Keep the first occurrence of each finding, in order.
    return list(dict.fromkeys(found))


def assert_no_shortcut(fn: Any, banned: tuple[str, ...] = NUMPY_ONLY) -> None:
    """Raise :class:`GradingError` if ``fn`` delegates to a library's normalization."""
    found = find_shortcuts(fn, banned)
    if found:
        name = getattr(fn, "__name__", "your function")
        softmax = [f for f in found if _SOFTMAX.search(f)]
        if softmax and all(f in softmax or f.startswith("imports scipy") for f in found):
            # Not a normalization: the exercise asks for the stable softmax written by hand.
            raise GradingError(
                f"{name} {'; '.join(found)}: scipy.special.softmax (or logsumexp) is not "
                "allowed here: the exercise asks you to write the stable softmax yourself, "
                "exp(s − max s) / Σ exp(s − max s) over the last axis, with numpy operations."
            )
        raise GradingError(
            f"{name} must compute the result itself, but it {'; '.join(found)}. "
            "Calling a library's normalization (torch, normedu, ...) earns no points here: "
            "write the computation with numpy operations"
            + ("" if "torch" in banned else " / elementary torch tensor operations")
            + "."
        )


def _raiser(qualname: str) -> Callable:
    def blocked(*args: Any, **kwargs: Any) -> Any:
        raise GradingError(
            f"your code called {qualname}; this exercise asks you to write that computation "
            "yourself, so calling the library earns no points"
        )

    return blocked


def _targets() -> list[tuple[Any, str]]:
    """(object, attribute) pairs to block; torch ones only if torch is already imported."""
    functions = [spec.function for spec in NORMS]
    out = [(nf, name) for name in nf.__all__]
    nn_mod = sys.modules.get("normedu.nn")
    if nn_mod is not None:
        out += [(nn_mod, n) for n in functions]
    torch = sys.modules.get("torch")
    if torch is not None:
        out += [(torch.nn.functional, n) for n in functions]
        out += [(torch, n) for n in (*functions, "native_layer_norm")]
        for cls in dict.fromkeys(c for spec in NORMS for c in spec.torch_modules):
            if hasattr(torch.nn, cls):
                out.append((getattr(torch.nn, cls), "forward"))
    return [(obj, n) for obj, n in out if hasattr(obj, n)]


@contextlib.contextmanager
def library_blocked() -> Iterator[None]:
    """Within the block, the norm entry points of normedu and torch raise when called."""
    saved = []
    try:
        for obj, attr in _targets():
            saved.append((obj, attr, obj.__dict__.get(attr, getattr(obj, attr))))
            label = getattr(obj, "__name__", type(obj).__name__)
            setattr(obj, attr, _raiser(f"{label}.{attr}"))
        yield
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)
