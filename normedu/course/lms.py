"""What a learning-management system's download is called, and what its gradebook imports.

Canvas (*Assignments → Download Submissions*) names each file
``<name>[_LATE]_<user id>_<submission id>_<original file name>``:

- ``name``: the student's name, lowercased, run together, last name first (``doejane``),
  sometimes with digits;
- ``LATE`` (any case): handed in after the due date;
- ``user id``: the student's Canvas user ID (the ``ID`` column of Canvas's gradebook);
- ``submission id``: Canvas's id of the uploaded file;
- the original file name, with ``-1``, ``-2`` ... added by Canvas when the student uploaded a
  file of that name again (``groupnorm-1.ipynb``: the first resubmission).

The hand-in time is the file's modification time: Canvas's zip stores each file's upload time
and unzip restores it (``unzip``, macOS's Archive Utility and Windows Explorer all do).

:func:`canvas_grades` writes the CSV that Canvas's gradebook import (*Grades → Import*)
reads: ``Student, ID, SIS User ID, SIS Login ID, Section``, then one column per assignment,
named ``<name> (<Canvas assignment id>)`` for an existing assignment or ``<name>`` for a new
one. Canvas matches rows on ``ID`` (the user ID). The second row, ``Points Possible``, is the
one Canvas's own gradebook export has; the import reads it for a new assignment (its points)
and ignores it otherwise.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

LMS = ("canvas",)

CANVAS_NAME = re.compile(
    r"^(?P<name>[a-z][a-z0-9]*?)"
    r"(?:_(?P<late>[Ll][Aa][Tt][Ee]))?"
    r"_(?P<user>\d+)_(?P<submission>\d+)_"
    r"(?P<original>.+?)(?:-(?P<resubmission>\d+))?(?P<ext>\.[A-Za-z0-9]+)?$"
)
#: A student id that still holds an LMS's file name: ``doejane_12345_67890_groupnorm`` (two
#: runs of digits between underscores, as Canvas and Moodle put ids in file names).
_RAW_LMS_ID = re.compile(r"_\d{3,}_(?:\d{3,}_|assignsubmission)|_(?i:late)_\d{3,}_")


@dataclass(frozen=True)
class CanvasFile:
    """One file of a Canvas download, read from its name (see the module docstring)."""

    name: str
    late: bool
    user_id: str
    submission_id: str
    original: str  # the file name the student uploaded, without Canvas's -N suffix
    resubmission: int  # 0 for the first upload, N for Canvas's -N suffix


def parse_canvas(file_name: str) -> CanvasFile:
    """Read a Canvas download's file name; ValueError if it is not one."""
    match = CANVAS_NAME.match(file_name)
    if not match:
        raise ValueError(
            f"file {file_name!r} is not named as a Canvas download "
            "('<name>[_LATE]_<user id>_<submission id>_<file name>')"
        )
    g = match.groupdict()
    return CanvasFile(
        name=g["name"],
        late=g["late"] is not None,
        user_id=g["user"],
        submission_id=g["submission"],
        original=g["original"] + (g["ext"] or ""),
        resubmission=int(g["resubmission"] or 0),
    )


def looks_like_raw_lms_name(student: str) -> bool:
    """True for a student id that is a whole LMS file name (collected without ``--lms`` or a
    pattern): ``doejane_12345_67890_groupnorm``, ``Jane_Doe_12345_assignsubmission_file_``."""
    return bool(_RAW_LMS_ID.search(student))


def split_name(display: str) -> tuple[str, str]:
    """``(first_name, last_name)`` for nbgrader's gradebook (Formgrader lists students as
    ``last_name, first_name``). ``Jane Doe`` and ``Jane_Doe`` split at the last separator; a
    name that gives no split (Canvas's ``doejane``) goes whole into ``last_name``."""
    words = [w for w in re.split(r"[\s_]+", display.strip()) if w]
    if len(words) < 2:
        return "", display.strip()
    return " ".join(words[:-1]), words[-1]


def canvas_column(assignment: str, canvas_id: str | None) -> str:
    """The gradebook column Canvas's import expects: ``name (id)`` for an existing Canvas
    assignment, the bare name for one the import should create."""
    return f"{assignment} ({canvas_id})" if canvas_id else assignment


def canvas_grades(
    assignment: str,
    max_score: float,
    rows: list[dict[str, str]],
    canvas_id: str | None = None,
) -> str:
    """Canvas's gradebook-import CSV for one assignment.

    ``rows``: ``{"student", "name", "user_id", "score"}`` each. A student without a Canvas user
    ID (not collected with ``--lms canvas``) cannot be matched by Canvas: ValueError naming
    them, rather than a file Canvas would half import.
    """
    missing = sorted(r["student"] for r in rows if not r.get("user_id"))
    if missing:
        raise ValueError(
            f"no Canvas user ID for {missing}: collect them with `--lms canvas` (or remove "
            "them with `normedu students remove`) before exporting for Canvas"
        )
    column = canvas_column(assignment, canvas_id)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column])
    writer.writerow(["    Points Possible", "", "", "", "", f"{max_score:g}"])
    for r in rows:
        writer.writerow([r.get("name") or r["student"], r["user_id"], "", "", "", r["score"]])
    return buffer.getvalue()
