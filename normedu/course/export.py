"""``normedu export``: grades as CSV, one row per student, one column per test cell.

Columns: ``student``, ``status`` (see :data:`normedu.course.status.STATUSES`), ``tampered``
(``yes``/``no``; empty when the file never ran), ``score``, ``max_score``, one column per test
cell (``grade_id``, in notebook order; empty when nothing ran), ``file`` (the hand-in's
original name in the inbox), ``collected`` (when ``collect`` placed it, UTC), ``handed_in``
(when the student handed it in: the file's modification time, UTC), ``late`` (``yes``/``no``
as the LMS said; empty when it does not say), ``needs_review`` (``yes`` when a test cell's
score awaits a grader: nbgrader's *needs manual grade* flag, set e.g. when a resubmission
dropped a manual score above its new automatic one) and ``notes`` (why, in words;
``; ``-separated; manual scores and comments set in Formgrader included). Scores come from
nbgrader's gradebook, statuses from autograde's verdicts. Rows are sorted by student,
case-insensitively, so two exports of the same grades are byte-identical.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from . import status as st
from .adjust import describe
from .checks import expected_cells
from .collect import load_collect_record
from .config import Course, silence_nbgrader_warnings, student_sort_key

FIXED_COLUMNS = ("student", "status", "tampered", "score", "max_score")
TRAILING_COLUMNS = ("file", "collected", "handed_in", "late", "needs_review", "notes")


def _fmt(x: float) -> str:
    return f"{x:g}"


def _manual_edits(sub, verdict: st.Verdict) -> tuple[list[str], list[str]]:
    """``(test cells awaiting review, notes on manual edits made outside normedu adjust)``:
    a manual score or comment typed in Formgrader is as much a grade as an adjustment."""
    adjusted = {a["test"]: a["new"] for a in verdict.adjustments}  # the latest per test
    review, notes = [], []
    for nb in sub.notebooks:
        for g in nb.grades:
            if g.needs_manual_grade:
                review.append(g.name)
            if g.manual_score is not None and adjusted.get(g.name) != float(g.manual_score):
                notes.append(
                    f"manual score {float(g.manual_score):g}/{float(g.max_score):g} on "
                    f"{g.name} (set in Formgrader)"
                )
        for c in nb.comments:
            if c.manual_comment:
                notes.append(f"grader's comment on {c.name}: {c.manual_comment.strip()}")
    return review, notes


def review_summary(table: list[dict[str, str]]) -> str:
    """One line: how many rows need a grader's review, and whose."""
    flagged = [r["student"] for r in table if r.get("needs_review") == "yes"]
    if not flagged:
        return f"needs review: none of {len(table)} students"
    return (
        f"NEEDS REVIEW: {len(flagged)} of {len(table)} students ({', '.join(flagged)}): "
        "open them in Formgrader, or `normedu adjust`, then export again"
    )


def rows(course: Course, assignment: str) -> tuple[list[str], list[dict[str, str]]]:
    """``(columns, rows)`` of the export of ``assignment``."""
    from nbgrader.api import Gradebook, MissingEntry

    silence_nbgrader_warnings()
    (notebook,) = course.notebooks(assignment)[:1]
    if not course.db_path.exists():
        raise ValueError(
            f"no gradebook at {course.db_path}: run `normedu autograde {assignment}` first"
        )
    tests = [c for c in expected_cells(course.db_url, assignment, notebook) if c.points > 0]
    max_total = sum(c.points for c in tests)
    columns = [*FIXED_COLUMNS, *(c.grade_id for c in tests), *TRAILING_COLUMNS]
    verdicts = st.load_all(course, assignment)
    collected = load_collect_record(course, assignment)
    out = []
    with Gradebook(course.db_url) as gb:
        known = {s.id for s in gb.students}
        for student in sorted(known | set(verdicts), key=student_sort_key):
            verdict = verdicts.get(student)
            row = {c: "" for c in columns}
            row["student"] = student
            row["max_score"] = _fmt(max_total)
            # The hand-in as the LMS named it, to map the row back to the roster.
            entry = collected.get(student, {})
            row["file"] = entry.get("source", "")
            row["collected"] = entry.get("collected", "")
            row["handed_in"] = entry.get("handed_in", "")
            late = entry.get("late")
            row["late"] = "" if late is None else ("yes" if late else "no")
            if verdict is None:
                row.update(status=st.MISSING, score="0", notes="nothing handed in")
                out.append(row)
                continue
            row["status"] = verdict.status
            # Nothing could be checked in a file that was never run: no answer, not "no".
            if verdict.tampered is not None and st.kind(verdict.status) not in st.NOT_RUN:
                row["tampered"] = "yes" if verdict.tampered else "no"
            notes = [*verdict.notes, *map(describe, verdict.adjustments)]
            row["score"] = "0"
            if st.kind(verdict.status) not in st.NOT_RUN:
                try:
                    sub = gb.find_submission(assignment, student)
                except MissingEntry:
                    sub = None
                if sub is not None:
                    scores = {
                        g.name: float(g.score or 0.0) for nb in sub.notebooks for g in nb.grades
                    }
                    for c in tests:
                        if c.grade_id in scores:
                            row[c.grade_id] = _fmt(scores[c.grade_id])
                    row["score"] = _fmt(sum(scores.get(c.grade_id, 0.0) for c in tests))
                    review, manual = _manual_edits(sub, verdict)
                    notes += manual
                    row["needs_review"] = "yes" if review else "no"
                    if review:
                        notes.append("needs review: " + ", ".join(review))
            row["notes"] = "; ".join(notes)
            out.append(row)
    return columns, out


def canvas_csv(course: Course, assignment: str, canvas_id: str | None = None) -> str:
    """The grades in Canvas's gradebook-import format (:func:`normedu.course.lms.canvas_grades`):
    each student's total score, matched on the Canvas user ID that ``collect --lms canvas``
    kept (from any assignment)."""
    from .lms import canvas_grades
    from .students import roster

    _, table = rows(course, assignment)
    known = roster(course)
    max_total = float(table[0]["max_score"]) if table else 0.0
    people = [
        {
            "student": r["student"],
            "name": known.get(r["student"], {}).get("name", ""),
            "user_id": known.get(r["student"], {}).get("lms_user_id", ""),
            "score": r["score"],
        }
        for r in table
    ]
    return canvas_grades(assignment, max_total, people, canvas_id)


def to_csv(
    course: Course,
    assignment: str,
    path: str | Path | None = None,
    *,
    lms: str | None = None,
    canvas_id: str | None = None,
) -> str:
    """The CSV text (``lms="canvas"``: Canvas's import format); also written to ``path``."""
    if lms == "canvas":
        text = canvas_csv(course, assignment, canvas_id)
    elif lms is not None:
        raise ValueError(f"--lms must be 'canvas', got {lms!r}")
    else:
        columns, table = rows(course, assignment)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
        text = buffer.getvalue()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text
