"""``normedu export``: grades as CSV, one row per student, one column per test cell.

Columns: ``student``, ``status`` (see :data:`normedu.course.status.STATUSES`), ``tampered``
(``yes``/``no``), ``score``, ``max_score``, one column per test cell (``grade_id``, in notebook
order; empty when nothing ran), and ``notes`` (why, in words; ``; ``-separated).
Scores come from nbgrader's gradebook, statuses from autograde's verdicts. Rows are sorted by
student, so two exports of the same grades are byte-identical.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from . import status as st
from .checks import expected_cells
from .config import Course, silence_nbgrader_warnings

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
    columns = [*FIXED_COLUMNS, *(c.grade_id for c in tests), "notes"]
    verdicts = st.load_all(course, assignment)
    out = []
    with Gradebook(course.db_url) as gb:
        known = {s.id for s in gb.students}
        for student in sorted(known | set(verdicts)):
            verdict = verdicts.get(student)
            row = {c: "" for c in columns}
            row["student"] = student
            row["max_score"] = _fmt(max_total)
            if verdict is None:
                row.update(status=st.MISSING, tampered="no", score="0", notes="nothing handed in")
                out.append(row)
                continue
            row["status"] = verdict.status
            row["tampered"] = "yes" if verdict.tampered else "no"
            row["notes"] = "; ".join(verdict.notes)
            row["score"] = "0"
            if verdict.status != st.UNGRADABLE:
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
