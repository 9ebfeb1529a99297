"""The grading modules import one another without a cycle (top-level or inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

import normedu.grading

GRADING = Path(normedu.grading.__file__).parent


def _imports(path: Path) -> set[str]:
    """Sibling grading modules that ``path`` imports anywhere in its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            name = node.module
        elif isinstance(node, ast.Import):
            name = node.names[0].name
        else:
            continue
        if name.startswith("normedu.grading."):
            found.add(name.split(".")[2])
    return found - {path.stem}


def test_grading_modules_import_without_a_cycle():
    graph = {p.stem: _imports(p) for p in GRADING.glob("*.py") if p.stem != "__init__"}
    assert "compare" not in graph["guard"] and "errors" in graph["guard"]
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"import cycle: {' -> '.join((*path, node))}"
        if node in done:
            return
        for nxt in graph.get(node, ()):
            visit(nxt, (*path, node))
        done.add(node)

    for module in graph:
        visit(module, ())
