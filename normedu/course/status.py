"""Per-submission verdicts, kept beside nbgrader's gradebook.

nbgrader's gradebook holds scores; it cannot say *why* a submission scored 0 (corrupt file?
timed out? tampered?). ``autograde`` writes that here, one JSON file per student and
assignment (``.normedu/status/<a>/<student>.json``), and ``export`` joins it with the scores.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .config import Course

PASSED = "all tests passed"
FAILED = "failed tests"
NOT_ATTEMPTED = "not attempted"
UNGRADABLE = "ungradable (corrupt notebook)"
#: Followed by the assignment the notebook belongs to: ``wrong assignment (drift)``.
WRONG_ASSIGNMENT = "wrong assignment"
TIMED_OUT = "timed out"
#: The grading machinery failed on it (its worker died on every try): no grade, re-graded by
#: the next autograde run. Never "failed tests", which would blame the student.
GRADING_FAILED = "grading failed"
MISSING = "missing"
#: The status column's values (``wrong assignment`` carries the other assignment's name).
#: ``missing``: in the gradebook (e.g. graded on another assignment) but nothing handed in
#: for this one. The autograde summary counts "graded" notebooks: a word no status uses.
STATUSES = (
    PASSED,
    FAILED,
    NOT_ATTEMPTED,
    UNGRADABLE,
    WRONG_ASSIGNMENT,
    TIMED_OUT,
    MISSING,
    GRADING_FAILED,
)
#: Statuses of files whose code was never run: their ``tampered`` column is empty.
NOT_RUN = (UNGRADABLE, WRONG_ASSIGNMENT, MISSING)


def wrong_assignment(other: str | None) -> str:
    """The status of a notebook of assignment ``other`` (None: of no known assignment)."""
    return f"{WRONG_ASSIGNMENT} ({other or 'unknown'})"


def kind(status: str) -> str:
    """``status`` without the detail in parentheses of ``wrong assignment (...)``."""
    return WRONG_ASSIGNMENT if status.startswith(WRONG_ASSIGNMENT + " (") else status


@dataclass
class Verdict:
    """What autograde concluded about one submission.

    - status: one of :data:`STATUSES`: ``all tests passed``, ``failed tests`` (ran to
      the end, some test failed, including after the student's code killed the kernel),
      ``not attempted`` (every answer cell as handed out), ``ungradable (corrupt notebook)``
      (the file is not a readable notebook: nothing ran), ``wrong assignment (<other>)`` (a
      notebook of another assignment: nothing ran), ``timed out`` (a cell or the whole
      submission ran past its time limit).
    - tampered: test cells were deleted or edited (they were restored before grading);
      meaningless (None in the export: empty) when nothing could be checked.
    - notes: sentences for the instructor and the student.
    - sha256: the graded file's hash: autograde re-grades only when it changes.
    - failures: the error name and message of each test cell that failed the grader's run.
    """

    student: str
    assignment: str
    status: str
    tampered: bool | None = False
    notes: list[str] = field(default_factory=list)
    sha256: str = ""
    seconds: float = 0.0
    sandbox: str = ""
    #: manual overrides (:mod:`.adjust`): ``{"test", "old", "new", "reason", "date"}`` each
    adjustments: list[dict] = field(default_factory=list)
    #: what each failing test cell said in the grader's run: ``{grade_id: {"error",
    #: "message"}}`` (:func:`.trusted.failure_record`), read by the class report
    #: (:mod:`.report`); None: not recorded (graded before it was, or nothing ran)
    failures: dict[str, dict[str, str]] | None = None

    def __post_init__(self):
        if kind(self.status) not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


def path_of(course: Course, assignment: str, student: str):
    return course.status_dir(assignment) / f"{student}.json"


def save(course: Course, verdict: Verdict) -> None:
    path = path_of(course, verdict.assignment, verdict.student)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(verdict), indent=1, sort_keys=True))


def load(course: Course, assignment: str, student: str) -> Verdict | None:
    path = path_of(course, assignment, student)
    if not path.exists():
        return None
    return Verdict(**json.loads(path.read_text()))


def load_all(course: Course, assignment: str) -> dict[str, Verdict]:
    folder = course.status_dir(assignment)
    if not folder.is_dir():
        return {}
    return {p.stem: Verdict(**json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))}
