"""What a grading kernel can reach: no reference, and no library's implementation of the norm.

A shortcut is stopped by capability, not by reading the hand-in's text. The kernel that runs a
student's notebook during grading is built so that what an answer could delegate to is not
there, whatever the code writes (``import``, ``__import__``, ``importlib``, ``sys.modules``,
reflection, or the package's source read from disk and run):

- **normedu**: only :data:`KERNEL_MODULES` are real: the kernel side of the grader (plain
  values, harnesses that build what a check hands the student's code, simulated processes,
  finite differences), none of which holds an implementation of a graded function. Every
  other module of the package (``normedu.functional``, ``normedu.nn``, the checks of
  ``normedu.grading``, ...) is a *stand-in*: importing it works, and anything taken from it
  raises :class:`NotAvailableWhileGrading` when called ("normedu.functional.layer_norm is not
  available while this assignment is graded ..."). So the course's own test cells still run
  in the kernel (and fail there: the grader runs each of them itself, :mod:`.trusted`), and a
  kernel whose test cells pass anyway is one that changed how cells run: ``interference``.
- **Other libraries** with norms of their own (:data:`OTHER_LIBRARIES`), and **torch** for a
  NumPy assignment: stand-ins as well, so an answer cell that imports torch to compare with
  it still defines its functions, and whatever uses torch raises ("torch.tensor is not
  available while this assignment is graded: answers are written with NumPy"); a capitalized
  name is a class nothing is an instance of (``isinstance(x, torch.Tensor)`` is False, as
  library code asks) and that cannot be built.
- **torch's norms** for a torch assignment (:func:`for_assignment`): the entry points of
  :data:`TORCH_NORMS` are replaced, in every loaded torch module and in ``torch.ops.aten``,
  by stand-ins that raise, except where the assignment's checks hand the student torch's own
  norm modules (:data:`NORMS_GIVEN`).

Three layers make it hold. The grading zygote (:mod:`.zygote`) imports only the real modules
(nothing else of normedu is ever loaded in the process); :func:`install`, in the forked kernel
before IPython starts, removes anything unavailable from ``sys.modules`` and puts
:class:`_Finder` first on ``sys.meta_path``; and Landlock (:func:`landlock_view`, applied by
:func:`.sandbox.confine`) lets the kernel read only the real modules' files of the package and
none of the unavailable libraries' folders, so a kernel that removes the finder finds nothing
to import or read. Without Landlock (an old Linux kernel) the finder alone stands: the
instructor guide and the report say so.

Limits: torch's C bindings keep their functions (``torch._C._VariableFunctions`` is read-only,
and the dispatcher answers ``torch._C._jit_get_operation``); a torch answer that goes that far
fails no check by itself. The answer policy (:mod:`.policy`) notes such a construct for the
instructor's review.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types

__all__ = [
    "KERNEL_MODULES",
    "LEAVES",
    "OTHER_LIBRARIES",
    "TORCH",
    "TORCH_NORMS",
    "NORMS_GIVEN",
    "NotAvailableWhileGrading",
    "for_assignment",
    "install",
    "installed",
    "landlock_view",
]

#: The modules of normedu a grading kernel loads for real: the kernel side of the grader.
#: None holds an implementation of a graded function (``tests/test_reach.py`` imports them in
#: a fresh interpreter and checks that nothing else of normedu, and not torch, comes with them).
KERNEL_MODULES = (
    "normedu",
    "normedu.course",
    "normedu.course.plain",
    "normedu.course.reach",
    "normedu.grading",
    "normedu.grading.calls",
    "normedu.grading.display",
    "normedu.grading.drift_inputs",
    "normedu.grading.errors",
    "normedu.grading.gradcheck",
    "normedu.grading.kernel_side",
    "normedu.grading.prepost_kernel",
    "normedu.grading.rmsnorm_module",
    "normedu.grading.simulated",
)
#: The leaf module that holds, for real, the public helpers (its ``__all__``) of a module the
#: kernel cannot reach: the course's own cells import them from the checks' module
#: (``from normedu.grading.syncbn import simulate``) and run in the kernel too.
LEAVES = {
    "normedu.grading.drift": "normedu.grading.drift_inputs",
    "normedu.grading.prepost": "normedu.grading.prepost_kernel",
    "normedu.grading.syncbn": "normedu.grading.simulated",
}
#: torch's distributions (top-level names): unavailable in a NumPy assignment's kernel.
TORCH = ("torch", "functorch", "torchgen")
#: Other libraries that implement the course's norms: unavailable in every grading kernel.
OTHER_LIBRARIES = ("jax", "jaxlib", "flax", "tensorflow", "keras", "sklearn", "mlx")
#: torch's entry points of a normalization, hidden in a torch assignment's kernel.
TORCH_NORMS = (
    "batch_norm",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "rms_norm",
    "local_response_norm",
    "native_batch_norm",
    "native_group_norm",
    "native_layer_norm",
    "_fused_rms_norm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LayerNorm",
    "LocalResponseNorm",
    "RMSNorm",
    "SyncBatchNorm",
)
#: Torch assignments whose checks hand the student's code torch's own norm modules (the
#: Pre-/Post-Norm blocks wire a given LayerNorm): their kernels keep torch's norms.
NORMS_GIVEN = frozenset({"prepost"})

_SUFFIX = "is not available while this assignment is graded"


class NotAvailableWhileGrading(ImportError):
    """Raised in a grading kernel by anything taken from a module it cannot reach (an
    ``ImportError``: code that guards an optional import catches it)."""


class _Unavailable:
    """Stands for ``name`` (a function, class or value of an unreachable module): calling it
    raises; an attribute of it is another stand-in, so ``grade.ref.layer_norm(...)`` raises at
    the call with the whole name."""

    __slots__ = ("_name", "_why")

    def __init__(self, name: str, why: str):
        self._name, self._why = name, why

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _stand_in(f"{self._name}.{attr}", self._why)

    def __call__(self, *args, **kwargs):
        raise NotAvailableWhileGrading(f"{self._name} {_SUFFIX}{self._why}")

    def __repr__(self) -> str:
        return f"<{self._name}: not available while this assignment is graded>"


def _stand_in(name: str, why: str):
    """What stands for ``name`` in a grading kernel: a class for a capitalized name (so that
    ``isinstance(x, torch.Tensor)`` is False, as library code asks, and building one raises),
    else an :class:`_Unavailable`."""
    last = name.rsplit(".", 1)[-1]
    if not last[:1].isupper():
        return _Unavailable(name, why)

    def refuse(self, *args, **kwargs):
        raise NotAvailableWhileGrading(f"{name} {_SUFFIX}{why}")

    return type(last, (), {"__init__": refuse, "__module__": name.rsplit(".", 1)[0]})


_NORMEDU_WHY = (
    ": the grader keeps the course's checks and references, and runs every test cell itself"
)
_TORCH_WHY = ": write the computation yourself with elementary tensor operations"


class _StandIn(types.ModuleType):
    """A module the kernel cannot reach: every attribute is a stand-in (:func:`_stand_in`);
    ``dir()`` lists the real module's public names (so code that walks the checks to replace
    them, as an interfering kernel does, finds them, and its test cells then pass in the
    kernel where the grader's run fails them: ``interference``)."""

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        leaf = LEAVES.get(self.__name__)
        if leaf is not None:
            real = importlib.import_module(leaf)
            if attr in getattr(real, "__all__", ()):
                return getattr(real, attr)
        why = self.__dict__.get("_why", _NORMEDU_WHY)
        return _stand_in(f"{self.__name__}.{attr}", why)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.__dict__.get("_public", ())))


class _StandInLoader(importlib.abc.Loader):
    def __init__(self, public: tuple[str, ...] = (), why: str = _NORMEDU_WHY):
        self.public, self.why = public, why

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []  # a package: its submodules are stand-ins too
        module._public, module._why = self.public, self.why
        return module

    def exec_module(self, module) -> None:
        return None


class _HidingLoader(importlib.abc.Loader):
    """Loads a module as its own loader does, then hides torch's norms in it."""

    def __init__(self, loader, names: frozenset[str]):
        self.loader, self.names = loader, names

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        _hide_in(module, self.names)


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class _Finder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` in a grading kernel: refuses the unavailable libraries,
    serves stand-ins for normedu's unreachable modules, hides torch's norms in what loads."""

    def __init__(self, spec: dict):
        self.unavailable = tuple(spec["unavailable"])
        self.real = frozenset(spec["real"])
        self.hidden = frozenset(spec["hidden"])
        self.language = spec.get("language", "NumPy")
        self.public = {k: tuple(v) for k, v in spec.get("public", {}).items()}

    def find_spec(self, name, path=None, target=None):
        if _under(name, self.unavailable):
            # A stand-in, not an ImportError: an answer cell that imports torch to compare
            # with it keeps the functions it defines; only what uses torch fails, and says so.
            why = f": answers are written with {self.language}"
            return importlib.machinery.ModuleSpec(name, _StandInLoader((), why), is_package=True)
        if _under(name, ("normedu",)) and name not in self.real:
            loader = _StandInLoader(self.public.get(name, ()))
            return importlib.machinery.ModuleSpec(name, loader, is_package=True)
        if self.hidden and _under(name, TORCH):
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _HidingLoader(spec.loader, self.hidden)
            return spec
        return None


def _hide_in(obj, names: frozenset[str]) -> None:
    """Replace each of ``names`` found in ``obj``'s namespace by an :class:`_Unavailable`."""
    space = getattr(obj, "__dict__", None)
    if not isinstance(space, dict):
        return
    label = getattr(obj, "__name__", "torch")
    for name in names:
        if name not in space:
            continue
        try:
            setattr(obj, name, _stand_in(f"{label}.{name}", _TORCH_WHY))
        except (AttributeError, TypeError):  # a read-only namespace (torch's C bindings)
            pass


@functools.lru_cache(maxsize=1)
def public_names() -> dict[str, list[str]]:
    """``{module: public names}`` of normedu's reference and checks (``__all__`` where a module
    has one, else its top-level names without a leading underscore), read from their source
    here, in the grader: the stand-ins of a grading kernel list them."""
    import ast
    from pathlib import Path

    import normedu

    package = Path(normedu.__file__).resolve().parent
    files = [package / "functional.py", *sorted((package / "grading").glob("*.py"))]
    out = {}
    for path in files:
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        if module in KERNEL_MODULES or path.name == "__init__.py":
            continue
        names: list[str] = []
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                try:
                    names = [str(n) for n in ast.literal_eval(node.value)]
                except ValueError:
                    names = []
                break
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.append(node.name)
            elif isinstance(node, ast.Assign):
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        out[module] = sorted({n for n in names if not n.startswith("_")})
    return out


def for_assignment(assignment: str, imports: set[str] | frozenset[str]) -> dict:
    """The reach of a kernel grading ``assignment``, whose own notebook imports the top-level
    modules ``imports`` (:func:`.checks.imported_modules`): a JSON-able dict for
    :func:`install` and :func:`landlock_view`."""
    uses_torch = "torch" in imports
    hidden = () if (not uses_torch or assignment in NORMS_GIVEN) else TORCH_NORMS
    return {
        "unavailable": list(OTHER_LIBRARIES + (() if uses_torch else TORCH)),
        "real": list(KERNEL_MODULES),
        "hidden": list(hidden),
        "language": "NumPy and torch's tensor operations" if uses_torch else "NumPy",
        "public": public_names(),
    }


_INSTALLED: list[dict] = []


def installed() -> bool:
    """Whether this process is a grading kernel confined by :func:`install`."""
    return bool(_INSTALLED)


def install(spec: dict | str) -> None:
    """Confine THIS process (a grading kernel, before any student code) to ``spec``'s reach:
    drop what it cannot reach from ``sys.modules``, hide torch's norms, and put the finder
    first. Idempotent."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    if _INSTALLED:
        return
    finder = _Finder(spec)
    for name in list(sys.modules):
        if _under(name, finder.unavailable) or (
            _under(name, ("normedu",)) and name not in finder.real
        ):
            del sys.modules[name]
    if finder.hidden:
        for name, module in list(sys.modules.items()):
            if _under(name, TORCH) and module is not None:
                _hide_in(module, finder.hidden)
        ops = getattr(sys.modules.get("torch"), "ops", None)
        if ops is not None:
            aten = ops.aten
            for name in finder.hidden:
                if not name[:1].isupper():
                    setattr(aten, name, _Unavailable(f"torch.ops.aten.{name}", _TORCH_WHY))
    sys.meta_path.insert(0, finder)
    _INSTALLED.append(spec)


# -- what Landlock lets the kernel read -----------------------------------------------------
def _excluded_tops(spec: dict) -> set[str]:
    tops = {t.lower() for t in spec["unavailable"]}
    return tops | ({"scikit_learn"} if "sklearn" in tops else set())


def _top_of_entry(entry: str) -> str:
    """``torch`` for ``torch``, ``torch-2.13.0+cpu.dist-info``, ``torch.py``."""
    stem = entry.split("-")[0]
    return (stem[:-3] if stem.endswith(".py") else stem.split(".")[0]).lower()


@functools.lru_cache(maxsize=8)
def _view(paths: tuple[str, ...], spec_json: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    import normedu

    spec = json.loads(spec_json)
    package = os.path.realpath(os.path.dirname(normedu.__file__))
    root = os.path.dirname(package)
    files = {
        os.path.join(root, *name.split("."), "__init__.py")
        if os.path.isdir(os.path.join(root, *name.split(".")))
        else os.path.join(root, *name.split(".")) + ".py"
        for name in spec["real"]
    }
    files = {f for f in files if os.path.isfile(f)}
    folders = {os.path.dirname(f) for f in files}
    folders |= {os.path.dirname(d) for d in folders if d != package}
    tops = _excluded_tops(spec)
    site = {
        os.path.realpath(p) for p in sys.path if p and "site-packages" in p and os.path.isdir(p)
    }
    blocked = {os.path.join(s, e) for s in site for e in os.listdir(s) if _top_of_entry(e) in tops}
    blocked.add(package)  # refined below: its real files only

    read: list[str] = []
    listable: list[str] = []

    seen: set[str] = set()

    def walk(p: str) -> None:
        # A link is followed (Landlock's rule would grant its target, all of it): lib64 -> lib.
        p = os.path.realpath(p)
        if p in seen:
            return
        seen.add(p)
        if p == package or p.startswith(package + os.sep):
            if p in files:
                read.append(p)
            elif p in folders or p == package:
                listable.append(p)
                for child in sorted(os.listdir(p)):
                    walk(os.path.join(p, child))
            return
        if p in blocked:
            return
        if (
            os.path.isdir(p)
            and not os.path.islink(p)
            and any(b.startswith(p + os.sep) for b in blocked)
        ):
            listable.append(p)
            for child in sorted(os.listdir(p)):
                walk(os.path.join(p, child))
            return
        read.append(p)

    for path in paths:
        walk(os.path.realpath(path))
    return tuple(read), tuple(listable)


def landlock_view(paths: list[str], spec: dict) -> tuple[list[str], list[str]]:
    """What a kernel of ``spec``'s reach may read, from the paths it could read otherwise
    (:func:`.sandbox.read_only_paths`): ``(readable, listable)``, every folder above an
    unreachable one listable only (its own files and subfolders named one by one), so that
    normedu's other modules and the unavailable libraries' folders cannot be opened."""
    read, listable = _view(tuple(paths), json.dumps(spec, sort_keys=True))
    return list(read), list(listable)


def main(argv: list[str] | None = None) -> None:
    """``python -m normedu.course.reach SPEC_JSON ARGS...``: install the reach, then run the
    IPython kernel with ``ARGS`` (the sandbox wrapper's way, without a zygote)."""
    import runpy

    argv = sys.argv[1:] if argv is None else argv
    install(argv[0])
    sys.argv = ["ipykernel_launcher", *argv[1:]]
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
