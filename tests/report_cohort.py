"""A synthetic class for the report's tests (``test_course_report.py``): records of 300
hand-ins of the layernorm assignment, drawn from the mistake catalogue with a known mix.

Each catalogued mistake's failures are the real ones: its edit of the solution is run through
the assignment's test cells in-process (as ``test_grading.py`` does, hidden tests included)
and every failing cell's error name and message is kept, as the grader records them. What the
report must find is known by construction (:class:`Mix`), never from the report's code: a
mistake is chosen only when every message it causes contains its catalogue phrase, none says
"does not match the reference" (no cause named), and no other chosen mistake's phrase appears
in them; those whose every message says "does not match the reference" make the unnamed group.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field

from released import stub_answer
from test_grading import _cells

from normedu.course import status as st
from normedu.course.report import ScoredCell, StudentRecord
from normedu.grading import mistakes

ASSIGNMENT = "layernorm"
MISMATCH = "does not match the reference"


def failures_of(answer_cells: dict[str, str], tests: list[tuple[str, str]]) -> dict[str, dict]:
    """``{grade_id: {"error", "message"}}`` of the test cells that fail on ``answer_cells``."""
    ns: dict = {"__name__": "__main__"}
    for src in answer_cells.values():
        try:
            exec(compile(src, "<answer>", "exec"), ns)
        except NotImplementedError:
            pass  # a stub: what the cell defined before the raise stays
    out = {}
    for gid, src in tests:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(src, f"<{gid}>", "exec"), ns)
        except Exception as exc:  # noqa: BLE001 - every failing check is recorded
            out[gid] = {"error": type(exc).__name__, "message": str(exc)}
    return out


@dataclass
class Mix:
    """The class and what the report must say about it."""

    tests: list[ScoredCell]
    records: list[StudentRecord]
    #: catalogue phrase -> the students who made that mistake
    named: dict[str, set[str]] = field(default_factory=dict)
    unnamed: set[str] = field(default_factory=set)
    stubbed: set[str] = field(default_factory=set)
    flags: dict[str, set[str]] = field(default_factory=dict)
    graded: set[str] = field(default_factory=set)


def _points(assignment: str) -> list[ScoredCell]:
    import json

    from test_grading import REPO

    nb = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    return [
        ScoredCell(
            c["metadata"]["nbgrader"]["grade_id"], float(c["metadata"]["nbgrader"]["points"])
        )
        for c in nb["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade") and c["cell_type"] == "code"
    ]


def build(size: int = 300) -> Mix:
    """The class of ``size`` students (see the module docstring); ids ``s000`` ...."""
    answers, tests = _cells(ASSIGNMENT)
    cells = _points(ASSIGNMENT)
    chosen: list[tuple[mistakes.Mistake, dict]] = []
    unnamed: list[dict] = []
    for m in mistakes.for_assignment(ASSIGNMENT, shortcuts=False):
        edited = dict(answers)
        edited[m.cell] = m.source(answers[m.cell])
        fails = failures_of(edited, tests)
        texts = [f["message"] for f in fails.values()]
        if texts and all(MISMATCH in t for t in texts):
            unnamed.append(fails)
        elif (
            texts
            and all(m.phrase in t and MISMATCH not in t for t in texts)
            and not any(c.phrase in t for c, _ in chosen for t in texts)
            and not any(m.phrase in f["message"] for _, fs in chosen for f in fs.values())
        ):
            chosen.append((m, fails))
    assert len(chosen) >= 8 and unnamed, (len(chosen), len(unnamed))
    stub = failures_of({g: stub_answer(s) for g, s in answers.items()}, tests)
    mix = Mix(cells, [])
    ids = [f"s{i:03d}" for i in range(size)]
    plan: dict[str, dict] = {}
    i = 0
    for k, (m, fails) in enumerate(chosen):  # 5 to 21 students per mistake
        for _ in range(5 + (7 * k) % 17):
            plan[ids[i]] = fails
            mix.named.setdefault(m.phrase, set()).add(ids[i])
            i += 1
    forward = next((m, f) for m, f in chosen if m.cell.endswith("forward"))
    backward = next((m, f) for m, f in chosen if m.cell.endswith("backward"))
    for _ in range(20):  # two mistakes each: counted under both
        plan[ids[i]] = {**forward[1], **backward[1]}
        mix.named[forward[0].phrase].add(ids[i])
        mix.named[backward[0].phrase].add(ids[i])
        i += 1
    for k in range(13):
        plan[ids[i]] = unnamed[k % len(unnamed)]
        mix.unnamed.add(ids[i])
        i += 1
    for _ in range(10):
        plan[ids[i]] = stub
        mix.stubbed.add(ids[i])
        i += 1
    statuses = {ids[-1]: st.MISSING, ids[-2]: st.MISSING, ids[-3]: st.UNGRADABLE}
    statuses |= {ids[-4]: st.UNGRADABLE, ids[-5]: st.wrong_assignment("rmsnorm")}
    statuses |= {ids[-6]: st.GRADING_FAILED, ids[-7]: st.GRADING_FAILED}
    statuses |= {ids[-8]: st.TIMED_OUT, ids[-9]: st.TIMED_OUT}
    assert i < size - 9, "the mix does not fit the class"
    mix.flags = {
        "late": {s for n, s in enumerate(ids) if n % 7 == 3},
        "needs review": {ids[1], ids[40], ids[200]},
        "tampered": {ids[2], ids[150], ids[210]},
        "timed out": {ids[-8], ids[-9]},
        "grading failed": {ids[-6], ids[-7]},
    }
    for s in ids:
        status = statuses.get(s)
        fails = plan.get(s, {}) if status is None or status == st.TIMED_OUT else {}
        ran = status is None or status == st.TIMED_OUT
        if status is None:
            status = st.NOT_ATTEMPTED if s in mix.stubbed else (st.FAILED if fails else st.PASSED)
        scores = (
            {t.grade_id: 0.0 if t.grade_id in fails else t.points for t in cells} if ran else {}
        )
        if status == st.TIMED_OUT:
            scores = {t.grade_id: 0.0 for t in cells}
        if ran:
            mix.graded.add(s)
        mix.records.append(
            StudentRecord(
                student=s,
                status=status,
                score=sum(scores.values()),
                scores=scores,
                late=s in mix.flags["late"],
                needs_review=s in mix.flags["needs review"],
                tampered=s in mix.flags["tampered"],
                failures=fails,
            )
        )
    return mix
