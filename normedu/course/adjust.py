"""``normedu adjust``: override one test cell's score of one student, with a reason.

The new score is nbgrader's own *manual score* of that grade cell, exactly what Formgrader's
manual grading writes, so either route works and both show in the gradebook, in Formgrader
and in ``normedu export``. The reason (and the old and new score, the date) is kept with the
submission's verdict and reaches the CSV's ``notes``. A later re-grade (``autograde
--force``) keeps a manual score: nbgrader marks it for review instead of replacing it.
"""

from __future__ import annotations

import datetime as dt

from . import gradebook
from . import status as st
from .config import Course, silence_nbgrader_warnings


def adjust(
    course: Course, assignment: str, student: str, test: str, score: float, reason: str
) -> dict:
    """Set ``student``'s score on test cell ``test`` (a ``grade_id``) to ``score`` points.

    ``reason`` is required (a regrade request, an extension ...). Returns the adjustment as
    recorded: ``{"test", "old", "new", "reason", "date"}``. Raises ValueError for an unknown
    student, submission or test, or a score outside ``[0, max points]``.
    """
    from nbgrader.api import Gradebook, MissingEntry

    silence_nbgrader_warnings()
    if not reason.strip():
        raise ValueError("an adjustment needs a reason (e.g. 'regrade request, see email')")
    (notebook,) = course.notebooks(assignment)[:1]
    verdict = st.load(course, assignment, student)
    if verdict is None:
        raise ValueError(f"{student!r} has no graded submission of {assignment!r}")
    if st.kind(verdict.status) in st.NOT_RUN:
        raise ValueError(f"{student}'s file never ran ({verdict.status}): nothing to adjust")
    handle = gradebook.lock(course)
    try:
        with Gradebook(course.db_url) as gb:
            try:
                grade = gb.find_grade(test, notebook, assignment, student)
            except MissingEntry:
                ids = sorted(c.name for c in gb.find_notebook(notebook, assignment).grade_cells)
                raise ValueError(
                    f"no test cell {test!r} in {assignment!r} (known: {ids})"
                ) from None
            top = float(grade.max_score)
            if not 0 <= score <= top:
                raise ValueError(f"score must be between 0 and {top:g} for {test!r}, got {score}")
            old = float(grade.score or 0.0)
            grade.manual_score = float(score)
            grade.needs_manual_grade = False
            gb.db.commit()
    finally:
        handle.close()
    record = {
        "test": test,
        "old": old,
        "new": float(score),
        "reason": reason.strip(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    verdict.adjustments.append(record)
    st.save(course, verdict)
    return record


def describe(record: dict) -> str:
    """One sentence for the CSV's notes."""
    return (
        f"adjusted {record['test']} from {record['old']:g} to {record['new']:g} "
        f"on {record['date'][:10]}: {record['reason']}"
    )
