"""``normedu release``: regenerate ``exercises/`` from ``solutions/``, or check they agree.

:func:`release` runs nbgrader's ``generate_assignment`` (solutions stripped, hidden tests
removed, checksums recorded, the assignment registered in the gradebook).
:func:`check_release` generates into a temporary course and compares it with ``exercises/``
cell by cell, so CI can fail when someone edits a solution and forgets to release.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from .config import Course, silence_nbgrader_warnings


class ReleaseError(RuntimeError):
    """nbgrader could not generate an assignment; the message holds its log."""


def _generate(course: Course, assignment: str) -> None:
    silence_nbgrader_warnings()
    course.notebooks(assignment)  # clear error for an unknown assignment
    result = course.api().generate_assignment(assignment, force=True, create=True)
    if not result.get("success"):
        raise ReleaseError(
            f"nbgrader generate_assignment {assignment} failed:\n"
            f"{result.get('log', '')}\n{result.get('error', '')}"
        )


def release(course: Course, assignments: list[str] | None = None) -> list[str]:
    """Regenerate ``exercises/<a>/`` for each assignment (default: all). Returns their ids."""
    names = assignments or course.assignments()
    for name in names:
        _generate(course, name)
    return names


def register(course: Course, assignment: str) -> None:
    """Put ``assignment`` in the gradebook without touching ``exercises/`` (generated into a
    scratch release folder): what autograde needs on a fresh clone."""
    from nbgrader.api import Gradebook, MissingEntry

    silence_nbgrader_warnings()
    if course.db_path.exists():
        with Gradebook(course.db_url) as gb:
            try:
                gb.find_assignment(assignment)
                return
            except MissingEntry:
                pass
    with tempfile.TemporaryDirectory(prefix="normedu-register-") as tmp:
        # nbgrader joins paths with os.path.join: an absolute release folder wins.
        scratch = Course(root=course.root, release=tmp)
        _generate(scratch, assignment)


def _normal_cells(nb) -> list[tuple]:
    rows = []
    for cell in nb.cells:
        meta = dict(cell.get("metadata", {}))
        rows.append((cell.cell_type, cell.source.rstrip(), repr(sorted(meta.items()))))
    return rows


def compare_notebooks(expected_path: Path, actual_path: Path) -> list[str]:
    """Differences between two notebooks' cells (type, source, metadata), one line each."""
    import nbformat

    exp = _normal_cells(nbformat.read(expected_path, as_version=4))
    act = _normal_cells(nbformat.read(actual_path, as_version=4))
    diffs = []
    if len(exp) != len(act):
        diffs.append(f"{actual_path.name}: {len(act)} cells, expected {len(exp)}")
    for i, (e, a) in enumerate(zip(exp, act, strict=False)):
        for what, ev, av in zip(("type", "source", "metadata"), e, a, strict=True):
            if ev != av:
                diffs.append(f"{actual_path.name}: cell {i} {what} differs")
    return diffs


def check_release(course: Course, assignments: list[str] | None = None) -> dict[str, list[str]]:
    """``{assignment: [difference, ...]}`` between ``exercises/`` and a fresh generation from
    ``solutions/``; every list empty means in sync. Writes nothing in the course."""
    names = assignments or course.assignments()
    out: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="normedu-release-check-") as tmp:
        scratch = Course(root=Path(tmp))
        if course.db_path.exists():
            # Starting from a copy of the gradebook skips nbgrader's migrations (seconds).
            shutil.copy(course.db_path, scratch.db_path)
        for name in names:
            shutil.copytree(course.source_dir(name), scratch.source_dir(name))
            _generate(scratch, name)
            fresh, current = scratch.release_dir(name), course.release_dir(name)
            diffs = []
            if not current.is_dir():
                out[name] = [f"{current} is missing: run `normedu release {name}`"]
                continue
            fresh_files = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
            current_files = {p.relative_to(current) for p in current.rglob("*") if p.is_file()}
            current_files = {p for p in current_files if ".ipynb_checkpoints" not in p.parts}
            for rel in sorted(fresh_files - current_files):
                diffs.append(f"{rel}: missing from {course.release}/{name}")
            for rel in sorted(current_files - fresh_files):
                diffs.append(f"{rel}: in {course.release}/{name} but not generated from the source")
            for rel in sorted(fresh_files & current_files):
                if rel.suffix == ".ipynb":
                    diffs += compare_notebooks(fresh / rel, current / rel)
                elif (fresh / rel).read_bytes() != (current / rel).read_bytes():
                    diffs.append(f"{rel}: differs")
            out[name] = diffs
    return out
