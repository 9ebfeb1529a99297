"""The verdict of one graded submission: its status, its notes and what a resubmission dropped.

:func:`verdict_of` turns a worker's result and nbgrader's recorded scores into a
:class:`.status.Verdict` (passed, failed, not attempted, timed out, grading failed), with the
student's own errors first in its notes (:mod:`.diagnose`); :func:`note_resubmission` notes
the manual scores a changed hand-in dropped and flags what the instructor must review. Split
from :mod:`.autograde`, the pipeline, which calls both.
"""

from __future__ import annotations

from . import gradebook
from . import status as st
from .config import Course
from .pool import Job
from .sandbox import describe_sandbox

__all__ = ["verdict_of", "answer_errors_of", "note_resubmission"]


def verdict_of(course: Course, assignment: str, job: Job, result: dict, report) -> st.Verdict:
    """The status and notes of one graded submission, from its job, the worker's result and
    the scores nbgrader recorded (``report`` collects run-level errors and the sandbox)."""
    notes = list(job.notes) + list(job.tampered)
    if result.get("interference"):
        notes.append(
            f"test cell(s) {', '.join(result['interference'])} passed in the notebook's own run "
            "but failed the grader's check: code in the submission seems to interfere with "
            "how test cells run (graded by the grader's check)"
        )
    if result.get("reason"):
        notes.append(result["reason"])
    if result.get("timeout_cells"):
        limit = job.spec["cell_timeout"]
        notes.append(f"cell(s) {result['timeout_cells']} ran past the {limit:g} s cell time limit")
    scores = None
    if result.get("worker_failed"):
        report.errors.append(f"{job.student}: {result['reason']}\n{result.get('log', '')}")
        gradebook.forget(course, assignment, job.student)
    else:
        scores = gradebook.scores(course, assignment, job.student)
    if result.get("worker_failed") and not result.get("timed_out"):
        status = st.GRADING_FAILED
    elif result.get("timed_out"):
        status = st.TIMED_OUT
    elif scores is None:
        status = st.FAILED
        if not result.get("worker_failed"):
            notes.append("nbgrader could not record this submission")
            report.errors.append(f"{job.student}: not recorded by nbgrader")
    else:
        failed = [g for g, s, m in scores if s < m]
        status = st.FAILED if failed else st.PASSED
        if failed and job.untouched and not result.get("timed_out"):
            status = st.NOT_ATTEMPTED
        # A blank sheet fails every test: "not attempted" says it all.
        if failed and status != st.NOT_ATTEMPTED:
            notes.append("failed: " + ", ".join(failed))
    if status in (st.FAILED, st.TIMED_OUT):
        # What went wrong in the student's own code, first: it is the first thing to read.
        notes[:0] = answer_errors_of(course, assignment, job.student)
    return st.Verdict(
        job.student,
        assignment,
        status,
        tampered=bool(job.tampered or result.get("interference")),
        notes=notes,
        sha256=job.sha256,
        seconds=float(result.get("wall_s", 0.0)),
        failures=None if scores is None else dict(result.get("failures", {})),
        sandbox=report.sandbox
        if result.get("landlock")
        else describe_sandbox("off", job.spec.get("network", False)),
    )


def answer_errors_of(course: Course, assignment: str, student: str) -> list[str]:
    """Syntax errors and exceptions in the student's functions (:mod:`.diagnose`), read from
    the notebook nbgrader autograded; none when it cannot be read."""
    import nbformat

    from .diagnose import answer_errors

    (notebook,) = course.notebooks(assignment)[:1]
    path = course.autograded_dir(student, assignment) / f"{notebook}.ipynb"
    try:
        return answer_errors(nbformat.read(path, as_version=4))
    except Exception:  # a missing or unreadable notebook: the other notes say why
        return []


def note_resubmission(course: Course, assignment: str, verdict: st.Verdict, dropped: list[dict]):
    """Notes on the manual scores and comments that a changed hand-in dropped; a test whose
    new automatic score is below the dropped manual one is flagged for review."""
    now = {g: (s, m) for g, s, m in gradebook.scores(course, assignment, verdict.student) or []}
    review = []
    for d in dropped:
        if "comment" in d:
            verdict.notes.append(
                f"resubmitted: the grader's comment on {d['comment']} about the earlier hand-in "
                "was removed"
            )
            continue
        score = now.get(d["test"], (0.0, d["max"]))[0]
        line = (
            f"resubmitted: the manual score {d['manual']:g}/{d['max']:g} on {d['test']}, given "
            f"to the earlier hand-in, no longer applies (autograded {score:g}/{d['max']:g}"
        )
        if score < d["manual"] and d["test"] in now:
            review.append(d["test"])
            line += "; flagged for the instructor's review"
        verdict.notes.append(line + ")")
    if review:
        gradebook.flag_for_review(course, assignment, verdict.student, review)
