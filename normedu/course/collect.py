"""``normedu collect``: turn a folder of handed-in notebooks into nbgrader submissions.

The input is what a learning-management system hands out, e.g. one ``<student>.ipynb`` per
student (``--layout flat``), or one folder per student holding the notebook (``--layout
folders``), or any naming captured by a regular expression with a ``student`` group
(``--pattern``). Every file is copied byte for byte (nothing is lost, even a corrupt file) to
``submitted/<student>/<a>/<a>.ipynb`` with a ``timestamp.txt``; whether it can be graded is
decided by ``autograde``. Problems found here (a wrong file name, several files for one
student) are recorded per student and reach the CSV export, with each submission's original
file name and the time it was collected.

Two DIFFERENT hand-ins that map to one student id (``Jane Doe.ipynb`` and ``Jane_Doe.ipynb``)
are never merged: ``collect`` refuses, naming both files, until the instructor passes a
mapping (``--map FILE``: CSV lines ``file,student``). Several files of one name (re-uploads
in a student's folder) are not a collision: the newest is graded and the note says so.

Collecting again is safe: an unchanged file is left alone; a changed one replaces the old
submission and marks it for re-grading; a new student is added.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

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


def collect(
    course: Course,
    assignment: str,
    inbox: str | Path,
    *,
    layout: str = "flat",
    pattern: str | None = None,
    mapping: dict[str, str] | None = None,
) -> tuple[list[Collected], list[str]]:
    """Place every file of ``inbox`` as a submission of ``assignment``.

    ``mapping``: ``{file: student}`` for files whose student the instructor names (the path in
    the inbox or the file name); it settles two hand-ins that map to one student id.

    Returns ``(collected, unplaced)``: one :class:`Collected` per student, and one message per
    file that could not be attributed to a student. Raises ValueError, and places nothing,
    when two different hand-ins map to one student id without a mapping.
    """
    mapping = dict(mapping or {})
    notebooks = course.notebooks(assignment)
    if len(notebooks) != 1:
        raise ValueError(
            f"collect handles one notebook per assignment; {assignment!r} has {notebooks}"
        )
    (notebook,) = notebooks
    inbox = Path(inbox)
    if not inbox.is_dir():
        raise ValueError(f"inbox {str(inbox)!r} is not a folder")
    by_student: dict[str, list[tuple[Path, list[str]]]] = {}
    raws: dict[str, dict[str, Path]] = {}  # student id -> {name as handed in: a file}
    unplaced = []
    for path in _candidates(inbox):
        rel = path.relative_to(inbox).as_posix()
        named = mapping.get(rel) or mapping.get(path.name)
        try:
            raw, notes = _raw_identity(rel, notebook, layout, pattern)
            student = named or student_id(raw)
        except ValueError as exc:
            if not named:
                unplaced.append(str(exc))
                continue
            student, notes = named, []
        by_student.setdefault(student, []).append((path, notes))
        raws.setdefault(student, {}).setdefault(named and f"map:{named}" or raw, path)
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
    results = []
    for student, files in sorted(by_student.items()):
        # Several files for one student (re-uploads): grade the newest, say so.
        files.sort(key=lambda item: (item[0].stat().st_mtime, item[0].name))
        path, notes = files[-1]
        notes = list(notes)
        if len(files) > 1:
            others = ", ".join(repr(p.name) for p, _ in files[:-1])
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
        item = Collected(student, source, action, digest, notes, collected)
        record[student] = {k: v for k, v in asdict(item).items() if k != "action"}
        results.append(item)

    out = collect_record_path(course, assignment)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, sort_keys=True))
    return results, unplaced
