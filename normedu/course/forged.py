"""Hand-ins whose nbgrader metadata was edited: graded with the release's cells.

nbgrader trusts each cell's ``nbgrader`` metadata (grade id, points, which cells are tests).
A hand-in whose test cells lost their grade ids, or whose points were raised, would make
nbgrader refuse the notebook (before: ``ungradable``, 0 points, nothing graded) or score it
against forged points. Instead, :func:`rebuild` copies the student's answer cells, matched by
grade id or else by position, into a fresh copy of the released notebook, and the verdict says
so (``tampered``): the student is graded on their answers, with the course's tests and points.
"""

from __future__ import annotations

import copy

from .checks import SourceCell


def _meta(cell):
    return cell.get("metadata", {}).get("nbgrader")


def forged_metadata(nb, expected: list[SourceCell]) -> list[str]:
    """Sentences naming each nbgrader cell of ``nb`` whose metadata differs from the
    assignment's (``expected``, from the gradebook); empty when none does."""
    known = {c.grade_id: c for c in expected}
    found = []
    for index, cell in enumerate(nb.cells):
        meta = _meta(cell)
        if meta is None:
            continue
        if not isinstance(meta, dict):
            found.append(f"cell {index} has malformed nbgrader metadata")
            continue
        gid = meta.get("grade_id")
        if not gid:
            if meta.get("grade") or meta.get("solution") or meta.get("locked"):
                found.append(f"cell {index} lost its grade id")
            continue
        src = known.get(str(gid))
        if src is None:
            found.append(f"cell {index} has a grade id {str(gid)[:40]!r} the assignment lacks")
            continue
        if src.is_test:
            try:
                points = float(meta.get("points", -1))
            except (TypeError, ValueError):
                points = -1.0
            if not meta.get("grade") or points != src.points or bool(meta.get("solution")):
                found.append(f"test cell {src.grade_id!r} had its grading metadata changed")
        elif bool(meta.get("solution")) != src.is_solution or bool(meta.get("grade")):
            found.append(f"cell {src.grade_id!r} had its grading metadata changed")
    return found


def rebuild(release_nb, nb):
    """A fresh copy of ``release_nb`` holding the answers of ``nb``: each answer cell of the
    release takes the source of the hand-in's cell with the same grade id, else of the
    hand-in's cell at the same position if it is of the same type; else it keeps the stub."""
    fresh = copy.deepcopy(release_nb)
    by_id = {}
    for cell in nb.cells:
        meta = _meta(cell)
        if isinstance(meta, dict) and meta.get("grade_id"):
            by_id.setdefault(str(meta["grade_id"]), cell)
    for index, cell in enumerate(fresh.cells):
        meta = _meta(cell) or {}
        if not meta.get("solution") or meta.get("grade"):
            continue
        theirs = by_id.get(meta.get("grade_id"))
        if theirs is None and index < len(nb.cells):
            theirs = nb.cells[index]
        if theirs is not None and theirs.get("cell_type") == cell.cell_type:
            cell.source = theirs.get("source", cell.source)
    return fresh
