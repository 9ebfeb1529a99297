"""``normedu students``: the roster as collected, and the two ways to correct it.

- :func:`remove`: a student id that should not exist (a file collected under its raw LMS
  name, a test upload) goes from every stage: its hand-ins move to
  ``.normedu/removed/<date>/`` (nothing is deleted), its grades, feedback, verdict and
  collect record go.
- :func:`merge`: two ids of one student (``doejane_12345_67890_groupnorm`` collected without
  ``--lms canvas``, then ``doejane`` with it) become the second; where both handed in, the
  later hand-in is kept and the other moved aside. The merged submission is graded by the
  next ``normedu autograde``.

Every change is appended to ``.normedu/students.log`` (one JSON object per line: date, action,
ids, assignments, reason, what was moved where), and the command prints it.

:func:`sync_names` fills nbgrader's ``first_name``/``last_name``/``lms_user_id`` from what
``collect`` read, so Formgrader lists ``Doe, Jane`` or ``doejane, `` instead of ``None, None``.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

from . import gradebook
from . import status as st
from .collect import collect_record_path, load_collect_record
from .config import Course, silence_nbgrader_warnings
from .lms import split_name


def log_path(course: Course) -> Path:
    return course.root / ".normedu" / "students.log"


def history(course: Course) -> list[dict]:
    """Every ``remove`` and ``merge`` so far, oldest first."""
    path = log_path(course)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _log(course: Course, entry: dict) -> dict:
    path = log_path(course)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def roster(course: Course) -> dict[str, dict]:
    """``{student: {"name", "lms_user_id", "assignments": [...]}}`` from ``submitted/`` and
    the collect records."""
    out: dict[str, dict] = {}
    for a in course.assignments():
        record = load_collect_record(course, a)
        for s in sorted(set(course.students(a)) | set(record)):
            entry = out.setdefault(s, {"name": "", "lms_user_id": "", "assignments": []})
            entry["assignments"].append(a)
            r = record.get(s, {})
            entry["name"] = entry["name"] or r.get("name", "")
            entry["lms_user_id"] = entry["lms_user_id"] or r.get("lms_user_id", "")
    return out


def sync_names(course: Course) -> int:
    """Give the gradebook's students the names and LMS ids ``collect`` read. A name already
    in the gradebook (typed in Formgrader) is kept. Returns how many students changed."""
    if not course.db_path.exists():
        return 0
    from nbgrader.api import Gradebook

    silence_nbgrader_warnings()
    known = roster(course)
    changed = 0
    with Gradebook(course.db_url) as gb:
        for student in gb.students:
            info = known.get(student.id)
            if not info:
                continue
            dirty = False
            if student.first_name is None and student.last_name is None and info["name"]:
                student.first_name, student.last_name = split_name(info["name"])
                dirty = True
            if not student.lms_user_id and info["lms_user_id"]:
                student.lms_user_id = info["lms_user_id"]
                dirty = True
            changed += dirty
        if changed:
            gb.db.commit()
    return changed


def _assignments_of(course: Course, student: str) -> list[str]:
    return [
        a
        for a in course.assignments()
        if course.submitted_dir(student, a).exists()
        or student in load_collect_record(course, a)
        or st.path_of(course, a, student).exists()
    ]


def _drop(course: Course, assignment: str, student: str, aside: Path) -> dict:
    """Take ``student``'s hand-in of ``assignment`` out of every stage; the submitted folder
    moves to ``aside``. Returns the collect record entry it had."""
    src = course.submitted_dir(student, assignment)
    if src.exists():
        aside.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(aside / assignment))
        if not any(src.parent.iterdir()):
            src.parent.rmdir()
    if course.db_path.exists():
        gradebook.forget(course, assignment, student)
    else:
        shutil.rmtree(course.autograded_dir(student, assignment), ignore_errors=True)
        shutil.rmtree(course.feedback_dir(student, assignment), ignore_errors=True)
    st.path_of(course, assignment, student).unlink(missing_ok=True)
    record = load_collect_record(course, assignment)
    entry = record.pop(student, {})
    if entry:
        collect_record_path(course, assignment).write_text(
            json.dumps(record, indent=1, sort_keys=True)
        )
    return entry


def _forget_student(course: Course, student: str) -> None:
    """Remove ``student`` from the gradebook when no submission of theirs is left in it."""
    if not course.db_path.exists():
        return
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db_url) as gb:
        try:
            if not gb.find_student(student).submissions:
                gb.remove_student(student)
        except MissingEntry:
            pass


def remove(course: Course, student: str, assignment: str | None = None, reason: str = "") -> dict:
    """Remove ``student`` (from one ``assignment``, or from all). Returns the log entry."""
    silence_nbgrader_warnings()
    found = _assignments_of(course, student)
    if assignment is not None:
        course.notebooks(assignment)  # a clear error for an unknown assignment
        found = [a for a in found if a == assignment]
    if not found:
        raise ValueError(f"no student {student!r}" + (f" in {assignment!r}" if assignment else ""))
    stamp = _now()
    aside = course.root / ".normedu" / "removed" / stamp.replace(":", "") / student
    handle = gradebook.lock(course)
    try:
        records = {a: _drop(course, a, student, aside) for a in found}
        _forget_student(course, student)
    finally:
        handle.close()
    return _log(
        course,
        {
            "date": stamp,
            "action": "remove",
            "student": student,
            "assignments": found,
            "reason": reason,
            "kept_in": str(aside.relative_to(course.root)),
            "collect_records": records,
        },
    )


def _handed_in(course: Course, student: str, assignment: str) -> str:
    entry = load_collect_record(course, assignment).get(student, {})
    if entry.get("handed_in"):
        return entry["handed_in"]
    stamp = course.submitted_dir(student, assignment) / "timestamp.txt"
    return stamp.read_text().strip() if stamp.exists() else ""


def merge(course: Course, old: str, new: str, reason: str = "") -> dict:
    """Make ``old``'s hand-ins ``new``'s; where both handed in, keep the later one. ``old`` is
    removed (its files moved aside). Returns the log entry, whose ``kept`` says, per
    assignment, whose hand-in was kept."""
    from .collect import student_id

    silence_nbgrader_warnings()
    if student_id(new) != new:
        raise ValueError(f"{new!r} is not a valid student id (try {student_id(new)!r})")
    if old == new:
        raise ValueError("merging a student with itself")
    found = _assignments_of(course, old)
    if not found:
        raise ValueError(f"no student {old!r}")
    stamp = _now()
    aside = course.root / ".normedu" / "removed" / stamp.replace(":", "") / old
    kept = {}
    handle = gradebook.lock(course)
    try:
        for a in found:
            src, dst = course.submitted_dir(old, a), course.submitted_dir(new, a)
            take_old = src.exists() and (
                not dst.exists() or _handed_in(course, old, a) > _handed_in(course, new, a)
            )
            record = load_collect_record(course, a)
            entry = dict(record.get(old, {}))
            if take_old:
                if dst.exists():
                    (aside.parent / new).mkdir(parents=True, exist_ok=True)
                    shutil.move(str(dst), str(aside.parent / new / a))
                shutil.copytree(src, dst)
                if entry:
                    entry["student"] = new
                    entry["notes"] = [*entry.get("notes", []), f"merged from student {old!r}"]
                    record[new] = entry
                    collect_record_path(course, a).write_text(
                        json.dumps(record, indent=1, sort_keys=True)
                    )
            kept[a] = old if take_old else new
            _drop(course, a, old, aside)
        _forget_student(course, old)
    finally:
        handle.close()
    sync_names(course)
    return _log(
        course,
        {
            "date": stamp,
            "action": "merge",
            "student": old,
            "into": new,
            "assignments": found,
            "kept": kept,
            "reason": reason,
            "kept_in": str(aside.relative_to(course.root)),
        },
    )
