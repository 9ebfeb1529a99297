"""``normedu export``: grades as CSV, one row per student, one column per test cell.

Columns: ``student``, ``status`` (see :data:`normedu.course.status.STATUSES`), ``tampered``
(``yes``/``no``; empty when the file never ran), ``score``, ``max_score``, one column per test
cell (``grade_id``, in notebook order; empty when nothing ran), ``file`` (the hand-in's
original name in the inbox), ``collected`` (when ``collect`` placed it, UTC) and ``notes``
(why, in words; ``; ``-separated). Scores come from nbgrader's gradebook, statuses from
autograde's verdicts. Rows are sorted by student, case-insensitively, so two exports of the
same grades are byte-identical.
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


def _fmt(x: float) -> str:
    return f"{x:g}"


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
    columns = [*FIXED_COLUMNS, *(c.grade_id for c in tests), "file", "collected", "notes"]
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
            row["file"] = collected.get(student, {}).get("source", "")
            row["collected"] = collected.get(student, {}).get("collected", "")
            if verdict is None:
                row.update(status=st.MISSING, score="0", notes="nothing handed in")
                out.append(row)
                continue
            row["status"] = verdict.status
            # Nothing could be checked in a file that was never run: no answer, not "no".
            if verdict.tampered is not None and st.kind(verdict.status) not in st.NOT_RUN:
                row["tampered"] = "yes" if verdict.tampered else "no"
            row["notes"] = "; ".join([*verdict.notes, *map(describe, verdict.adjustments)])
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
            out.append(row)
    return columns, out


def to_csv(course: Course, assignment: str, path: str | Path | None = None) -> str:
    """The CSV text; also written to ``path`` when given."""
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
