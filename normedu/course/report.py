"""``normedu report``: what a class got wrong, for the lecturer, after grading.

Made from what grading already records, never from a new run: nbgrader's gradebook (each test
cell's score, the *needs manual grade* flag; read through :func:`.export.rows`, the same rows
the CSV export writes), autograde's verdicts (status, tampered, and what each failing test
cell said in the grader's own run: ``Verdict.failures``) and collect's record (late).

The core is pure: :func:`summarize` turns a list of :class:`StudentRecord` (one per student,
what those records hold) into a :class:`ClassReport`: the score distribution, each test
cell's pass share, the mistakes by named cause (:mod:`.failures`), most common first, the
failures that name no cause counted apart, and the flags. :func:`records` reads the records
of a graded course; :mod:`.report_html` renders the page and writes it (`write_report`).

Shares are of the *graded* hand-ins: those that ran and got a grade (not missing, not
unreadable, not of another assignment, not failed by the grading machinery); the statuses
table counts every student.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from . import status as st
from .config import Course, student_sort_key
from .failures import UNNAMED, Failure, classify, failures_in_notebook

__all__ = [
    "FLAGS",
    "Cause",
    "CellPass",
    "ClassReport",
    "StudentRecord",
    "ScoredCell",
    "records",
    "score_bands",
    "summarize",
]

#: The flags the report lists, each with its students, in this order.
FLAGS = ("late", "needs review", "tampered", "timed out", "grading failed")


@dataclass(frozen=True)
class ScoredCell:
    """A scored test cell: its ``grade_id`` and points."""

    grade_id: str
    points: float


@dataclass
class StudentRecord:
    """One student's row: what the gradebook and the grader's records hold.

    - status: one of :data:`.status.STATUSES`; score: the total; scores: ``{grade_id:
      score}`` of the test cells (empty when nothing ran).
    - late, needs_review, tampered: the flags of the export (``late`` as the LMS said).
    - failures: ``{grade_id: {"error", "message"}}`` of the test cells that failed the
      grader's run (:func:`.trusted.failure_record`).
    """

    student: str
    status: str
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    late: bool = False
    needs_review: bool = False
    tampered: bool = False
    failures: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def graded(self) -> bool:
        """The hand-in ran and has a grade."""
        return st.kind(self.status) not in st.NOT_RUN and self.status != st.GRADING_FAILED

    def flags(self) -> set[str]:
        """The :data:`FLAGS` this student carries."""
        on = {
            "late": self.late,
            "needs review": self.needs_review,
            "tampered": self.tampered,
            "timed out": self.status == st.TIMED_OUT,
            "grading failed": self.status == st.GRADING_FAILED,
        }
        return {name for name, value in on.items() if value}


@dataclass
class CellPass:
    """How many graded hand-ins got test cell ``grade_id``'s full points."""

    grade_id: str
    points: float
    passed: int
    of: int

    @property
    def share(self) -> float:
        return self.passed / self.of if self.of else 0.0


@dataclass
class Cause:
    """One cause the class's failures named (or :data:`.failures.UNNAMED`).

    - key: the group (:attr:`.failures.Failure.key`); text: the message as the first of its
      students (in name order) read it.
    - students: who got it, in name order; cells: the test cells that said it, in notebook
      order; share: ``len(students)`` over the graded hand-ins.
    - examples (unnamed only): ``(student, grade_id, message)`` of every such failure.
    """

    key: str
    text: str
    students: list[str]
    cells: list[str]
    share: float
    examples: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.students)


@dataclass
class ClassReport:
    """Everything the page shows (see the module docstring); lists in display order."""

    assignment: str
    tests: list[ScoredCell]
    students: int
    graded: list[str]
    scores: list[float]
    cells: list[CellPass]
    causes: list[Cause]
    unnamed: Cause | None
    flags: dict[str, list[str]]
    statuses: dict[str, list[str]]

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests)

    @property
    def median(self) -> float:
        return statistics.median(self.scores) if self.scores else 0.0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else 0.0


def score_bands(scores: list[float], max_score: float) -> list[tuple[float, float, int]]:
    """``(low, high, students)`` per band of the histogram: one point wide up to 20 points,
    else 20 equal bands; each band holds ``low <= score < high``, the last also its high end
    (full marks)."""
    if max_score <= 0:
        return [(0.0, 0.0, len(scores))]
    n = max(1, math.ceil(max_score)) if max_score <= 20 else 20
    width = max_score / n
    counts = [0] * n
    for s in scores:
        counts[min(n - 1, max(0, int(s / width + 1e-9)))] += 1
    return [(i * width, (i + 1) * width, c) for i, c in enumerate(counts)]


def _group(failures: list[tuple[str, str, Failure]], tests: list[str], graded: int) -> list[Cause]:
    """``Cause`` per key of ``[(student, grade_id, Failure)]``, most students first."""
    order = {g: i for i, g in enumerate(tests)}
    by_key: dict[str, list[tuple[str, str, Failure]]] = {}
    for item in sorted(failures, key=lambda f: (student_sort_key(f[0]), order.get(f[1], 1e9))):
        by_key.setdefault(item[2].key, []).append(item)
    causes = []
    for key, items in by_key.items():
        students = sorted({s for s, _, _ in items}, key=student_sort_key)
        cells = sorted({g for _, g, _ in items}, key=lambda g: (order.get(g, 1e9), g))
        causes.append(
            Cause(
                key,
                items[0][2].text,
                students,
                cells,
                len(students) / graded if graded else 0.0,
                [(s, g, f.text) for s, g, f in items] if key == UNNAMED else [],
            )
        )
    causes.sort(key=lambda c: (-c.count, c.text))
    return causes


def summarize(assignment: str, tests: list[ScoredCell], people: list[StudentRecord]) -> ClassReport:
    """The :class:`ClassReport` of one assignment's records (pure: no file is read)."""
    people = sorted(people, key=lambda r: student_sort_key(r.student))
    graded = [r for r in people if r.graded]
    cells = [
        CellPass(
            t.grade_id,
            t.points,
            sum(r.scores.get(t.grade_id, 0.0) >= t.points - 1e-9 for r in graded),
            len(graded),
        )
        for t in tests
    ]
    failures = [
        (r.student, grade_id, classify(f.get("error", ""), f.get("message", "")))
        for r in graded
        for grade_id, f in r.failures.items()
    ]
    grouped = _group(failures, [t.grade_id for t in tests], len(graded))
    unnamed = next((c for c in grouped if c.key == UNNAMED), None)
    statuses: dict[str, list[str]] = {}
    for r in people:
        statuses.setdefault(r.status, []).append(r.student)
    return ClassReport(
        assignment=assignment,
        tests=list(tests),
        students=len(people),
        graded=[r.student for r in graded],
        scores=[r.score for r in graded],
        cells=cells,
        causes=[c for c in grouped if c.key != UNNAMED],
        unnamed=unnamed,
        flags={name: [r.student for r in people if name in r.flags()] for name in FLAGS},
        statuses=dict(sorted(statuses.items(), key=lambda kv: (-len(kv[1]), kv[0]))),
    )


def _float(text: str) -> float:
    return float(text) if text else 0.0


def records(course: Course, assignment: str) -> tuple[list[ScoredCell], list[StudentRecord]]:
    """The scored test cells and every student's :class:`StudentRecord` of a graded course:
    the export's rows (:func:`.export.rows`) with the verdicts' failures (read from the
    autograded notebook for a hand-in graded before verdicts kept them)."""
    from .checks import expected_cells
    from .export import rows

    _, table = rows(course, assignment)
    (notebook,) = course.notebooks(assignment)[:1]
    expected = expected_cells(course.db_url, assignment, notebook)
    # The export's columns: the cells with points (a 0-point format check scores nothing).
    tests = [ScoredCell(c.grade_id, c.points) for c in expected if c.points > 0]
    test_ids = {c.grade_id for c in expected if c.is_test}
    verdicts = st.load_all(course, assignment)
    people = []
    for row in table:
        student = row["student"]
        verdict = verdicts.get(student)
        failures = verdict.failures if verdict is not None else None
        if failures is None and verdict is not None and st.kind(verdict.status) not in st.NOT_RUN:
            path = course.autograded_dir(student, assignment) / f"{notebook}.ipynb"
            failures = failures_in_notebook(path, test_ids)
        people.append(
            StudentRecord(
                student=student,
                status=row["status"],
                score=_float(row["score"]),
                scores={t.grade_id: float(row[t.grade_id]) for t in tests if row.get(t.grade_id)},
                late=row["late"] == "yes",
                needs_review=row["needs_review"] == "yes",
                tampered=row["tampered"] == "yes",
                failures=dict(failures or {}),
            )
        )
    return tests, people
