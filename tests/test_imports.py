"""No module of normedu imports itself in a circle, through any path (top level or in functions).

An import circle works only while every name is looked up late enough; the first
``from x import y`` moved to the top of a file turns it into an ImportError, and a reader
cannot tell which module is the lower one. The graph is built from the source with ``ast``,
imports inside functions included, so a circle hidden in a function body counts too.

Edges: ``import a.b`` and ``from a.b import c`` give an edge to ``a.b``, or to ``a.b.c`` when
``c`` is a module (``from . import claims``). A package that imports all its submodules by name
(``importlib.import_module(f"{__name__}.{name}")``, how ``claims/`` and ``experiments/``
register their members) gets an edge to each of them; a name given as a plain string
(``import_module("normedu.x")``) gets an edge to that module, and one built as
``f"normedu.pkg.{name}"`` to every module of ``normedu.pkg``.

Importing ``a.b`` also runs ``a/__init__``, but that implicit edge is left out: every
submodule of a package that re-exports its submodules would otherwise be in a circle with its
``__init__``, and that circle is harmless (the package's ``__init__`` is the one that starts
the submodules' imports). An explicit ``from . import name`` in a submodule is an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import normedu

ROOT = Path(normedu.__file__).parent


def module_name(path: Path) -> str:
    """``normedu.bench.cli`` for ``normedu/bench/cli.py``; ``normedu.bench`` for its __init__."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The normedu modules that module ``name`` (file ``path``) imports anywhere in its code."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            found |= _dynamic_targets(node.args[0], name, package, known)
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module.
            targets = [
                f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in known else mod
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            # ``import normedu.a.b`` names the module; a name inside it resolves to it too.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found - {name}


def _is_import_module(func: ast.expr) -> bool:
    """``importlib.import_module`` or a bare ``import_module``."""
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module"
    )


def _dynamic_targets(arg: ast.expr, name: str, package: str, known: set[str]) -> set[str]:
    """The modules an ``import_module(arg)`` call of module ``name`` may import."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value} & known
    if not isinstance(arg, ast.JoinedStr) or not arg.values:
        return set()
    head = arg.values[0]
    if isinstance(head, ast.FormattedValue) and ast.unparse(head.value) == "__name__":
        prefix = name  # ``__name__`` of a package's __init__ is the package
    elif isinstance(head, ast.Constant) and str(head.value).endswith("."):
        prefix = str(head.value)[:-1]
    else:
        return set()
    # ``__main__`` runs a command when imported: no package imports it to register it.
    return {m for m in known if m.rpartition(".")[0] == prefix and not m.endswith(".__main__")}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_relative_function_level_and_submodule_imports():
    graph = import_graph()
    # plots/bench.py: ``from . import COLORS`` (the plots package) at the top.
    assert "normedu.plots" in graph["normedu.plots.bench"]
    # bench/cli.py imports the plots inside main().
    assert "normedu.plots.bench" in graph["normedu.bench.cli"]
    # claims/__init__ imports its modules with importlib, by name; ledger.registered() imports
    # the claims package inside the function.
    assert "normedu.claims.drift" in graph["normedu.claims"]
    assert "normedu.claims" in graph["normedu.ledger"]
    # ``import normedu.x`` and ``from normedu import x`` both name the module x.
    assert "normedu.grading.errors" in graph["normedu.grading.guard"]


def test_cycle_finder_finds_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_normedu_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import circles in normedu: " + "; ".join(" <-> ".join(c) for c in found)
