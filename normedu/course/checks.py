"""Checks on a handed-in notebook before any of its code runs.

- :func:`read_notebook`: is the file a notebook at all (empty, not JSON, JSON but not a
  notebook)?
- :func:`expected_cells`: the assignment's nbgrader cells as the gradebook holds them.
- :func:`assignment_mismatch`: is it a notebook of this assignment?
- :func:`tampering`: were test cells deleted or edited? nbgrader restores them from the
  gradebook before running (``OverwriteCells``), so tampering never changes a grade, but the
  report must say it happened.

Sources are compared with the hidden-test regions removed, since students receive the
notebook without them, and with trailing whitespace ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

_HIDDEN = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S
)


@dataclass(frozen=True)
class SourceCell:
    """One nbgrader cell of the instructor's notebook: ``grade_id``, its kind and source."""

    grade_id: str
    cell_type: str
    source: str
    is_test: bool
    is_solution: bool
    locked: bool
    points: float


def released(source: str) -> str:
    """``source`` as students receive it: hidden-test regions removed."""
    return _HIDDEN.sub("", source)


def _normal(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def read_notebook(path: str | Path):
    """``(notebook, None)`` for a readable nbformat-4 notebook, else ``(None, problem)`` with
    ``problem`` a sentence a student can act on."""
    import nbformat

    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, f"cannot read the file: {exc.strerror}"
    if not raw.strip():
        return None, "the file is empty"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "the file is not text (not a .ipynb notebook)"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return (
            None,
            f"the file is not valid JSON (line {exc.lineno}, column {exc.colno}): not a notebook",
        )
    if not isinstance(data, dict) or "cells" not in data or "nbformat" not in data:
        return None, "the file is JSON but not a Jupyter notebook (no 'cells'/'nbformat')"
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises several types for malformed notebooks
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"the notebook is malformed: {first[:160]}"
    return nb, None


def expected_cells(db_url: str, assignment: str, notebook: str) -> list[SourceCell]:
    """The nbgrader cells of ``assignment/notebook`` in the gradebook, in notebook order."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        nb = gb.find_notebook(notebook, assignment)
        points = {c.name: float(c.max_score) for c in nb.grade_cells}
        solutions = {c.name for c in nb.solution_cells}
        return [
            SourceCell(
                grade_id=c.name,
                cell_type=c.cell_type,
                source=c.source,
                is_test=c.name in points and c.name not in solutions,
                is_solution=c.name in solutions,
                locked=bool(c.locked),
                points=points.get(c.name, 0.0),
            )
            for c in nb.source_cells
        ]


def grade_ids(nb) -> set[str]:
    """The ``grade_id`` of every nbgrader cell of a notebook."""
    ids = set()
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if isinstance(meta, dict) and meta.get("grade_id"):
            ids.add(str(meta["grade_id"]))
    return ids


def assignment_mismatch(nb, expected: list[SourceCell], others: dict[str, set[str]]) -> str | None:
    """None when ``nb`` holds at least one of the assignment's answer cells, else why not.

    Answer cells, not any nbgrader cell: assignments share the ids of their other cells by
    convention (every notebook of this course has an ``intro`` and an ``outro``, several a
    ``test_values``), so a notebook of another assignment would pass for this one. ``others``
    maps other assignments to their answer cells' ids, to name the one it belongs to.
    """
    ids = grade_ids(nb)
    answers = {c.grade_id for c in expected if c.is_solution} or {c.grade_id for c in expected}
    if ids & answers:
        return None
    matches = sorted(a for a, theirs in others.items() if ids & theirs)
    if matches:
        return f"this is a notebook of assignment {matches[0]!r}, not of this one"
    return (
        "none of this assignment's answer cells are in the notebook (a notebook of another "
        "assignment?)"
    )


def belongs_to(nb, others: dict[str, set[str]]) -> str | None:
    """The other assignment whose nbgrader cells ``nb`` holds (None: none known)."""
    ids = grade_ids(nb)
    matches = sorted(a for a, theirs in others.items() if ids & theirs)
    return matches[0] if matches else None


def untouched(nb, expected: list[SourceCell]) -> bool:
    """True when every answer (solution) code cell of ``nb`` is still as handed out."""
    by_id = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if isinstance(meta, dict) and meta.get("grade_id"):
            by_id.setdefault(str(meta["grade_id"]), cell)
    answers = [c for c in expected if c.is_solution and c.cell_type == "code"]
    return bool(answers) and all(
        c.grade_id in by_id and _normal(by_id[c.grade_id].source) == _normal(c.source)
        for c in answers
    )


def tampering(nb, expected: list[SourceCell]) -> list[str]:
    """Deleted or edited read-only test cells of ``nb``, one sentence each (empty: none)."""
    by_id = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if isinstance(meta, dict) and meta.get("grade_id"):
            by_id.setdefault(str(meta["grade_id"]), cell)
    found = []
    for src in expected:
        if not (src.is_test and src.locked):
            continue
        cell = by_id.get(src.grade_id)
        if cell is None:
            found.append(f"test cell {src.grade_id!r} was deleted (restored for grading)")
        elif _normal(cell.source) != _normal(released(src.source)):
            found.append(f"test cell {src.grade_id!r} was edited (original restored for grading)")
    return found


#: Calls that can keep a cell busy without using the CPU, or forever.
_MAY_BLOCK = {"sleep", "input", "pause"}


def code_trees(path: str | Path) -> list:
    """The parsed code cells (``ast`` modules) of the notebook at ``path``, read as JSON and
    nothing run. IPython lines (``%magic``, ``!shell``) are left out; a cell that is still
    not Python, and a file that is not a notebook, give nothing."""
    import ast

    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    trees = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            trees.append(ast.parse("\n".join(lines)))
        except (SyntaxError, ValueError):
            continue
    return trees


def imported_modules(path: str | Path) -> set[str]:
    """The top-level names of every module the notebook's code cells import (``torch`` for
    ``import torch.nn as nn`` or ``from torch import nn``)."""
    import ast

    names = set()
    for tree in code_trees(path):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def loads_module(path: str | Path, module: str) -> bool:
    """Does running the notebook's imports load the top-level ``module`` (``torch`` for a
    notebook that imports only ``normedu.distributed``)? Yes at once when a code cell imports
    it; otherwise the notebook's import statements, and nothing else of it, run in a fresh
    interpreter that stops as soon as ``module`` is about to be imported, so the answer never
    costs the import of ``module`` itself (torch: 2-3 s). Meant for the course's own notebooks."""
    import ast
    import subprocess
    import sys

    if module in imported_modules(path):
        return True
    imports = [
        ast.unparse(node)
        for tree in code_trees(path)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)
    ]
    tripwire = f"""
import os, sys
class Tripwire:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            print("loaded", flush=True)
            os._exit(0)
sys.meta_path.insert(0, Tripwire())
"""
    script = "\n".join([tripwire, *imports])
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip() == "loaded"


def may_run_long(path: str | Path) -> bool:
    """Does any code cell hold a ``while`` loop or a call that may block (``time.sleep``,
    ``input``, ...)? Such a submission is graded first: one that runs to its time limit
    started last would hold the whole run up to that limit after every other one is done.
    A cheap scan of the source (nothing runs); an unreadable file is not long."""
    import ast

    for tree in code_trees(path):
        for node in ast.walk(tree):
            if isinstance(node, ast.While):
                return True
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in _MAY_BLOCK:
                    return True
    return False
