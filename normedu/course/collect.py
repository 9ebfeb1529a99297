"""``normedu collect``: turn a folder of handed-in notebooks into nbgrader submissions.

The input is what a learning-management system hands out, e.g. one ``<student>.ipynb`` per
student (``--layout flat``), or one folder per student holding the notebook (``--layout
folders``), or any naming captured by a regular expression with a ``student`` group
(``--pattern``), or Canvas's download names (``--lms canvas``, read by :mod:`.lms`: the
student's name, the late flag, the Canvas user ID). Every file is copied byte for byte
(nothing is lost, even a corrupt file) to ``submitted/<student>/<a>/<a>.ipynb`` with a
``timestamp.txt``; whether it can be graded is decided by ``autograde``. Problems found
here (a wrong file name, several files for one student) are recorded per student and reach
the CSV export, with each submission's original file name, the time it was collected, the
time it was handed in (the file's modification time, which an LMS's zip keeps) and, from an
LMS that says so, the late flag and user ID.

Two DIFFERENT hand-ins that map to one student id (``Jane Doe.ipynb`` and ``Jane_Doe.ipynb``)
are never merged: ``collect`` refuses, naming both files, until the instructor passes a
mapping (``--map FILE``: CSV lines ``file,student``). Several files of one name (re-uploads
in a student's folder) are not a collision: the newest is graded and the note says so.

Collecting again is safe: an unchanged file is left alone; a changed one replaces the old
submission and marks it for re-grading; a new student is added. A student id that still
holds an LMS file name (collected without ``--lms``/``--pattern``), or a file collected before
under another id, is warned about (:attr:`Collected.warnings`): ``normedu students remove`` /
``merge`` (:mod:`.students`) then tidy the roster.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import lms as lms_names
from .config import Course

LAYOUTS = ("flat", "folders")
_SAFE = re.compile(r"[^A-Za-z0-9_.@-]+")
_IGNORED = {".DS_Store", "Thumbs.db", "desktop.ini"}


@dataclass
class Collected:
    """One student's hand-in: where it came from and what happened to it.

    ``action`` is ``new``, ``updated`` (replaced a different earlier file), ``unchanged``.
    """

    student: str
    source: str
    action: str
    sha256: str
    notes: list[str] = field(default_factory=list)
    #: when ``collect`` placed this file (UTC, ISO 8601)
    collected: str = ""
    #: when the student handed it in: the file's modification time (UTC, ISO 8601)
    handed_in: str = ""
    #: the LMS said it was late (True/False); None when the LMS does not say
    late: bool | None = None
    #: the student's id in the LMS (Canvas user ID), when its file names carry it
    lms_user_id: str = ""
    #: the student's name as the LMS wrote it (for nbgrader's first/last name)
    name: str = ""
    #: things the instructor should look at (not kept in the record, not shown to students)
    warnings: list[str] = field(default_factory=list)


def student_id(raw: str) -> str:
    """A student id nbgrader accepts: letters, digits and ``_.@-``; other runs become ``_``."""
    sid = _SAFE.sub("_", raw.strip()).strip("_.")
    if not sid:
        raise ValueError(f"cannot make a student id from {raw!r}")
    return sid


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _candidates(inbox: Path) -> list[Path]:
    files = []
    for path in sorted(inbox.rglob("*")):
        rel = path.relative_to(inbox)
        if any(part.startswith(".") or part == "__MACOSX" for part in rel.parts):
            continue
        if path.is_file() and path.name not in _IGNORED:
            files.append(path)
    return files


def _raw_identity(
    rel: str, assignment: str, layout: str, pattern: str | None
) -> tuple[str, list[str]]:
    """``(the student's name as handed in, notes)`` for a file at ``rel`` (posix, relative to
    the inbox), before :func:`student_id`. Notes flag a wrong name; the file is still
    collected, under the expected name."""
    notes = []
    name = rel.rsplit("/", 1)[-1]
    expected = f"{assignment}.ipynb"
    if pattern:
        match = re.search(pattern, rel)
        if not match or "student" not in match.groupdict():
            raise ValueError(f"file {rel!r} does not match --pattern {pattern!r}")
        raw = match.group("student")
        if not name.endswith(".ipynb"):
            notes.append(f"handed in as {name!r}, not a .ipynb file name")
    elif layout == "folders":
        if "/" not in rel:
            raise ValueError(f"file {rel!r} is not inside a student folder (layout 'folders')")
        raw = rel.split("/", 1)[0]
        if name != expected:
            notes.append(f"handed in as {name!r}, expected {expected!r}")
    elif layout == "flat":
        if "/" in rel:
            raise ValueError(f"file {rel!r} is in a subfolder; use --layout folders or --pattern")
        raw = name[: -len(".ipynb")] if name.endswith(".ipynb") else name.split(".", 1)[0]
        if not name.endswith(".ipynb"):
            notes.append(f"handed in as {name!r}, expected '<student>.ipynb'")
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return raw, notes


def read_mapping(path: str | Path) -> dict[str, str]:
    """``{file: student}`` from a CSV file of lines ``file,student`` (a header line
    ``file,student`` is allowed); ``file`` is the path in the inbox or the file name."""
    import csv

    mapping = {}
    with open(path, newline="") as handle:
        for row in csv.reader(handle):
            if not row or row[0].startswith("#") or [c.strip() for c in row] == ["file", "student"]:
                continue
            if len(row) != 2:
                raise ValueError(f"{path}: expected lines 'file,student', got {row!r}")
            mapping[row[0].strip()] = student_id(row[1])
    return mapping


def collect_record_path(course: Course, assignment: str) -> Path:
    return course.root / ".normedu" / "collect" / f"{assignment}.json"


def load_collect_record(course: Course, assignment: str) -> dict[str, dict]:
    path = collect_record_path(course, assignment)
    return json.loads(path.read_text()) if path.exists() else {}


def _canvas_identity(rel: str, notebook: str) -> tuple[str, list[str], dict]:
    """``(name, notes, meta)`` of a file of a Canvas download (see :mod:`.lms`)."""
    name = rel.rsplit("/", 1)[-1]
    info = lms_names.parse_canvas(name)
    notes = []
    if info.original != f"{notebook}.ipynb":
        notes.append(f"handed in as {info.original!r}, expected '{notebook}.ipynb'")
    meta = {
        "late": info.late,
        "lms_user_id": info.user_id,
        "name": info.name,
        "key": f"canvas user {info.user_id}",
        "order": info.resubmission,
    }
    return info.name, notes, meta


def _identity(
    rel: str, notebook: str, layout: str, pattern: str | None, lms: str | None
) -> tuple[str, list[str], dict]:
    """``(raw name, notes, meta)`` of one file; ``meta`` holds what the LMS says (late flag,
    user id, name) and ``order``, which of one student's files is newest after the time."""
    if lms == "canvas":
        return _canvas_identity(rel, notebook)
    raw, notes = _raw_identity(rel, notebook, layout, pattern)
    meta = {"name": raw, "key": raw, "order": 0}
    if pattern:
        groups = re.search(pattern, rel).groupdict()
        if groups.get("user_id"):
            meta["lms_user_id"] = groups["user_id"]
    return raw, notes, meta


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).isoformat(timespec="seconds")


def collect(
    course: Course,
    assignment: str,
    inbox: str | Path,
    *,
    layout: str = "flat",
    pattern: str | None = None,
    mapping: dict[str, str] | None = None,
    lms: str | None = None,
) -> tuple[list[Collected], list[str]]:
    """Place every file of ``inbox`` as a submission of ``assignment``.

    ``lms``: ``"canvas"`` reads Canvas's download names (overrides ``layout`` and
    ``pattern``). ``mapping``: ``{file: student}`` for files whose student the instructor
    names (the path in the inbox or the file name); it settles two hand-ins that map to one
    student id.

    Returns ``(collected, unplaced)``: one :class:`Collected` per student, and one message per
    file that could not be attributed to a student. Raises ValueError, and places nothing,
    when two different hand-ins map to one student id without a mapping.
    """
    mapping = dict(mapping or {})
    if lms is not None and lms not in lms_names.LMS:
        raise ValueError(f"--lms must be one of {lms_names.LMS}, got {lms!r}")
    notebooks = course.notebooks(assignment)
    if len(notebooks) != 1:
        raise ValueError(
            f"collect handles one notebook per assignment; {assignment!r} has {notebooks}"
        )
    (notebook,) = notebooks
    inbox = Path(inbox)
    if not inbox.is_dir():
        raise ValueError(f"inbox {str(inbox)!r} is not a folder")
    by_student: dict[str, list[tuple[Path, list[str], dict]]] = {}
    raws: dict[str, dict[str, Path]] = {}  # student id -> {who handed it in: a file}
    unplaced = []
    for path in _candidates(inbox):
        rel = path.relative_to(inbox).as_posix()
        named = mapping.get(rel) or mapping.get(path.name)
        try:
            raw, notes, meta = _identity(rel, notebook, layout, pattern, lms)
            student = named or student_id(raw)
        except ValueError as exc:
            if not named:
                unplaced.append(str(exc))
                continue
            student, notes, meta = named, [], {"name": named, "key": named, "order": 0}
        by_student.setdefault(student, []).append((path, notes, meta))
        raws.setdefault(student, {}).setdefault(named and f"map:{named}" or meta["key"], path)
    clashes = [
        f"{' and '.join(repr(p.relative_to(inbox).as_posix()) for p in found.values())} "
        f"all map to student id {student!r}"
        for student, found in sorted(raws.items())
        if len(found) > 1
    ]
    if clashes:
        raise ValueError(
            "hand-ins of different students would be merged: "
            + "; ".join(clashes)
            + ". Nothing was collected. Say who is who with a mapping (--map FILE, CSV lines "
            "'file,student') and collect again."
        )
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

    record = load_collect_record(course, assignment)
    # Who each file was collected as before: the same file under a new id means the class
    # is being doubled (e.g. collected once without --lms, then with it).
    earlier = {entry.get("source"): s for s, entry in record.items()}
    results = []
    for student, files in sorted(by_student.items()):
        # Several files for one student (re-uploads): grade the newest (Canvas's -N suffix
        # first, then the hand-in time), say so.
        files.sort(key=lambda item: (item[2]["order"], item[0].stat().st_mtime, item[0].name))
        path, notes, meta = files[-1]
        notes = list(notes)
        if len(files) > 1:
            others = ", ".join(repr(p.name) for p, _, _ in files[:-1])
            notes.append(
                f"{len(files)} files handed in; graded the newest {path.name!r}, ignored {others}"
            )
        dest_dir = course.submitted_dir(student, assignment)
        dest = dest_dir / f"{notebook}.ipynb"
        digest = _sha256(path)
        if dest.exists() and _sha256(dest) == digest:
            action = "unchanged"
        else:
            action = "updated" if dest.exists() else "new"
            dest_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            stamp = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
            (dest_dir / "timestamp.txt").write_text(stamp.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
        collected = now
        if action == "unchanged" and student in record:
            notes = record[student]["notes"]
            collected = record[student].get("collected") or now
        source = path.relative_to(inbox).as_posix()
        item = Collected(
            student,
            source,
            action,
            digest,
            notes,
            collected,
            handed_in=_iso(path.stat().st_mtime),
            late=meta.get("late"),
            lms_user_id=meta.get("lms_user_id", ""),
            name=meta.get("name", student),
        )
        for p, _, _ in files:
            rel = p.relative_to(inbox).as_posix()
            before = earlier.get(rel)
            if before and before != student:
                item.warnings.append(
                    f"{rel!r} was collected before as student {before!r}: if both are one "
                    f"student, run `normedu students merge {before} {student}`"
                )
        if lms_names.looks_like_raw_lms_name(student):
            item.warnings.append(
                f"student id {student!r} looks like an LMS file name: collect with "
                "`--lms canvas` or a --pattern, then `normedu students remove` the wrong ids"
            )
        record[student] = {k: v for k, v in asdict(item).items() if k not in ("action", "warnings")}
        results.append(item)

    out = collect_record_path(course, assignment)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, sort_keys=True))
    # The names reach the gradebook at the next autograde (students.sync_names): nbgrader
    # knows a student only once one is graded, and calling it here closed an import circle.
    return results, unplaced
