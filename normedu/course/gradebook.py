"""The gradebook, as the grading pipeline uses it: read scores, forget a submission, and
write a private working copy fast, then install it atomically.

nbgrader's gradebook is a SQLite file. A run writes a copy (:func:`working_copy`), without
fsync after every row and with one SQLAlchemy engine per URL, and :func:`install` replaces the
real file at the end: a run that crashes leaves the real gradebook as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from .config import Course


def other_assignments(course: Course, assignment: str) -> dict[str, set[str]]:
    """``{assignment: ids of its answer cells}`` of every other assignment of the gradebook
    (what :func:`.checks.assignment_mismatch` tells assignments apart by)."""
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(course.db_url) as gb:
        for a in gb.assignments:
            if a.name != assignment:
                out[a.name] = {c.name for nb in a.notebooks for c in nb.solution_cells}
    return out


def forget(course: Course, assignment: str, student: str) -> None:
    """Remove an earlier grade of ``student`` (their new file cannot be graded)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db_url) as gb:
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass
    shutil.rmtree(course.autograded_dir(student, assignment), ignore_errors=True)
    shutil.rmtree(course.feedback_dir(student, assignment), ignore_errors=True)


def scores(course: Course, assignment: str, student: str) -> list[tuple[str, float, float]] | None:
    """``[(grade_id, score, max_score)]`` of a recorded submission, None if there is none."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db_url) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        rows = []
        for nb in sub.notebooks:
            for grade in nb.grades:
                rows.append((grade.name, float(grade.score or 0.0), float(grade.max_score)))
        return rows


def drop_manual(course: Course, assignment: str, student: str) -> list[dict]:
    """Clear the manual scores and comments of ``student``'s recorded submission: its file
    changed, so what a grader decided about the earlier file no longer applies (nbgrader
    would keep a manual score over a new automatic one). Returns what was cleared:
    ``[{"test", "manual", "max"}]`` for scores, ``{"comment", "text"}`` for comments."""
    from nbgrader.api import Gradebook, MissingEntry

    dropped: list[dict] = []
    with Gradebook(course.db_url) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return dropped
        for nb in sub.notebooks:
            for grade in nb.grades:
                if grade.manual_score is not None:
                    dropped.append(
                        {
                            "test": grade.name,
                            "manual": float(grade.manual_score),
                            "max": float(grade.max_score),
                        }
                    )
                    grade.manual_score = None
                    grade.needs_manual_grade = False
            for comment in nb.comments:
                if comment.manual_comment:
                    dropped.append({"comment": comment.name, "text": comment.manual_comment})
                    comment.manual_comment = None
        if dropped:
            gb.db.commit()
    return dropped


def keep_manual(course: Course, assignment: str, student: str) -> None:
    """After re-grading the SAME file: its manual scores still apply, so clear the review
    flag nbgrader sets on every cell with a manual score when it re-grades."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db_url) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return
        for nb in sub.notebooks:
            for grade in nb.grades:
                if grade.manual_score is not None and grade.auto_score is not None:
                    grade.needs_manual_grade = False
        gb.db.commit()


def flag_for_review(course: Course, assignment: str, student: str, tests: list[str]) -> None:
    """Mark test cells as needing manual grading (nbgrader's flag: Formgrader shows it, and
    setting a score there or with ``normedu adjust`` clears it)."""
    from nbgrader.api import Gradebook

    (notebook,) = course.notebooks(assignment)[:1]
    with Gradebook(course.db_url) as gb:
        for test in tests:
            gb.find_grade(test, notebook, assignment, student).needs_manual_grade = True
        gb.db.commit()


def lock(course: Course):
    """An exclusive lock on the course's grading state; ValueError if another run holds it."""
    import fcntl

    path = course.root / ".normedu" / "grading.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - held for the whole run
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ValueError(f"another normedu autograde is running on {course.root}") from None
    return handle


def _fast_sqlite(path: Path):
    """Turn off per-commit fsync for connections to ``path`` (the run's working copy only).
    Returns a function that undoes it."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    target = str(path.resolve())

    def _pragma(dbapi_connection, _record):
        rows = dbapi_connection.execute("PRAGMA database_list").fetchall()
        if any(row[2] and str(Path(row[2]).resolve()) == target for row in rows):
            dbapi_connection.execute("PRAGMA synchronous=OFF")

    event.listen(Engine, "connect", _pragma)
    return lambda: event.remove(Engine, "connect", _pragma)


def _share_engines():
    """Make nbgrader reuse one SQLAlchemy engine per database URL during the run.

    nbgrader opens the gradebook (``Gradebook(db_url)``) a dozen times per submission, each
    time with a new engine, so every query is compiled again: most of the parent's time per
    submission. A shared engine keeps SQLAlchemy's compiled-statement cache. Returns a function
    that restores nbgrader's own ``create_engine``.
    """
    import nbgrader.api

    original = nbgrader.api.create_engine
    engines: dict[str, object] = {}

    def create_engine(url, *args, **kwargs):
        key = str(url)
        if key not in engines:
            engines[key] = original(url, *args, **kwargs)
        return engines[key]

    nbgrader.api.create_engine = create_engine

    def restore() -> None:
        nbgrader.api.create_engine = original
        for engine in engines.values():
            engine.dispose()

    return restore


def install(work_db: Path, real_db: Path) -> None:
    """Replace ``real_db`` by ``work_db`` atomically (copy beside it, fsync, rename)."""
    tmp = real_db.with_name(real_db.name + ".new")
    shutil.copyfile(work_db, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, real_db)


@contextlib.contextmanager
def working_copy(real: Path, copy: Path):
    """Within the block, ``copy`` (a copy of ``real``) is written fast; it is NOT installed
    here (call :func:`install` when the run succeeded)."""
    shutil.copy2(real, copy)
    undo_fast_sqlite = _fast_sqlite(copy)
    undo_shared_engines = _share_engines()
    try:
        yield copy
    finally:
        undo_shared_engines()
        undo_fast_sqlite()
