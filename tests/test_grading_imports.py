"""The grading modules import one another without a cycle (top-level or inside functions),
and a failing check shows a student its message rather than the grading modules' frames."""

from __future__ import annotations

import ast
import re
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


def test_a_failing_check_shows_the_message_and_the_students_cells_not_the_grader():
    """In a live notebook a failing check prints the student's cells and the message; the
    frames inside normedu (30-odd lines before 'Likely cause') are gone, and the error is
    still an error for nbgrader."""
    from IPython.core.interactiveshell import InteractiveShell

    from normedu.grading import display

    shell = InteractiveShell.instance()
    sent = []  # what ipykernel would send as the error output's traceback
    shell._showtraceback = lambda etype, evalue, stb: sent.append(
        re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(stb))  # without the colours
    )
    try:
        assert display.install()
        shell.run_cell(
            "import numpy as np\n"
            "from normedu.grading.layernorm import check_forward_values\n"
            "def layernorm_forward(x, gamma, beta, eps=1e-5):\n"
            "    mu = x.mean(0, keepdims=True)\n"
            "    return (x - mu) / np.sqrt(x.var(0, keepdims=True) + eps) * gamma + beta\n"
            "def broken(x, gamma, beta, eps=1e-5):\n"
            "    return x.undefined_attribute\n"
        )
        wrong = shell.run_cell("check_forward_values(layernorm_forward)")
        shown = sent.pop()
        assert isinstance(wrong.error_in_exec, AssertionError)
        assert "Likely cause: you normalized over axis 0" in shown
        assert "check_forward_values(layernorm_forward)" in shown  # the test line stays
        assert "normedu/grading" not in shown and "diagnose.py" not in shown, shown
        assert len(shown.splitlines()) < 12, shown
        raised = shell.run_cell("check_forward_values(broken)")
        shown = sent.pop()
        assert raised.error_in_exec is not None
        # The student's own frame (their function, in a cell) is kept: it says where they are.
        assert "x.undefined_attribute" in shown and "AttributeError" in shown, shown
        assert "normedu/grading" not in shown, shown
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()
