"""Where normedu meets nbgrader: its preprocessors, configured from :mod:`.config`.

- :class:`StudentTracebacks` (a feedback step, named in the course configuration): error
  outputs of test cells lose the frames inside the grading code and every path of the
  grading machine; a cell with hidden tests keeps only ``ename: evalue``.
- :class:`ReplayExecute`: nbgrader's ``Execute`` step replaced by the notebook that a
  sandboxed worker executed (:mod:`.pool`).
- :func:`sanitize`, :func:`record`: nbgrader's own sanitize steps and ``autograde`` run in the
  parent process on a working copy of the gradebook.
- :func:`validate_metadata`: nbgrader's check of every cell's metadata, with one compiled
  validator per schema instead of one per cell.

This module imports nbgrader: import it only where nbgrader is needed.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import jsonschema
import nbformat
import nbgrader.nbgraderformat.common
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from ..grading.display import student_frames
from .config import Course

_BEGIN = "### BEGIN HIDDEN TESTS"
#: An absolute path of a Python file (a warning's location): only its file name is shown.
_ABS_PY = re.compile(r"(/[^\s\"':]+/)([^/\s\"':]+\.py)")
#: A plain Python traceback's frame line in a file, with its source line if any.
_STDERR_FRAME = re.compile(r'^[ \t]*File "[^"<][^"]*", line \d+.*\n(?:[ \t]{4,}\S.*\n)?', re.M)


_VALIDATORS: dict[int, tuple[dict, jsonschema.protocols.Validator]] = {}


def validate_metadata(instance, schema: dict) -> None:
    """``jsonschema.validate(instance, schema)``, the same check and the same error, with the
    schema checked and compiled once.

    nbgrader validates the ``nbgrader`` metadata of every cell, in several steps of every
    submission, with ``jsonschema.validate``, which checks the schema itself and builds a
    validator on each call: about 5 ms per cell, 0.1 s per notebook. Installed as the
    ``jsonschema.validate`` that nbgrader's metadata validator calls (nbgrader is pinned).
    """
    known = _VALIDATORS.get(id(schema))
    if known is None or known[0] is not schema:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        known = _VALIDATORS[id(schema)] = (schema, cls(schema))
    error = jsonschema.exceptions.best_match(known[1].iter_errors(instance))
    if error is not None:
        raise error


nbgrader.nbgraderformat.common.jsonschema = types.SimpleNamespace(validate=validate_metadata)


def student_traceback(output, hidden: bool) -> list[str]:
    """The traceback lines a student sees for one error output.

    The frames of the notebook's own cells stay (they point at the student's code and the
    visible test line); frames inside installed files (the grading code, numpy, the student's
    imports) and their absolute paths go. ``hidden``: only ``ename: evalue``, since any source
    line of a hidden test cell would reveal the hidden test.
    """
    last = f"{output.get('ename', '')}: {output.get('evalue', '')}".rstrip(": ")
    if hidden:
        return [last]
    return student_frames(output.get("traceback", [])) or [last]


class StudentTracebacks(NbGraderPreprocessor):
    """Reduce error outputs to what a student may see (see :func:`student_traceback`), and
    drop the file frames (``File "/abs/path", line N``) that a kernel wrote to stderr when it
    could not even format its error (e.g. out of memory). Runs before ``ClearHiddenTests``."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        hidden = _BEGIN in cell.source
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                output.traceback = student_traceback(output, hidden)
            elif output.output_type == "stream" and output.get("name") == "stderr":
                output.text = _ABS_PY.sub(r"\2", _STDERR_FRAME.sub("", output.text))
        return cell, resources


def stock_autograde_steps() -> list:
    """nbgrader's own autograde steps (its default), which the course configuration replaces
    by :class:`RefuseUnsandboxed`: for a baseline or a test that means stock nbgrader."""
    from nbgrader.converters import Autograde

    return Autograde.class_traits()["autograde_preprocessors"].default()


class RefuseUnsandboxed(NbGraderPreprocessor):
    """The course configuration's only step of nbgrader's own autograde (Formgrader's
    *Autograde* button, stock ``nbgrader autograde``): it stops before any student code runs,
    with a message that names the command that grades in the sandbox."""

    def preprocess(self, nb, resources):
        meta = resources.get("nbgrader", {})
        raise RuntimeError(
            "This course grades with `normedu autograde "
            f"{meta.get('assignment', 'ASSIGNMENT')}` (run it from the course folder): it runs "
            "each submission in a sandbox, checks for tampering and records a status. "
            "Formgrader's Autograde button and stock `nbgrader autograde` would run student "
            "code unconfined on this server, so this course turns them off."
        )


class ReplayExecute(NbGraderPreprocessor):
    """nbgrader's ``Execute`` step, replaced: take the notebook that the sandboxed worker
    executed for this student (``<executed_root>/<student>/<nb>.ipynb``)."""

    executed_root = Unicode("").tag(config=True)

    def preprocess(self, nb, resources):
        meta = resources["nbgrader"]
        path = Path(self.executed_root) / meta["student"] / f"{meta['notebook']}.ipynb"
        # The worker's notebook is the one the parent sanitized with nbgrader's own
        # preprocessors (so nbgrader's sanitize step is configured empty here), with the
        # outputs the kernel produced. The kernel never had access to this file.
        return nbformat.read(path, as_version=4), resources


def sanitize(course: Course, nb, assignment: str, notebook: str, student: str):
    """nbgrader's sanitize steps: outputs cleared, test cells restored from the gradebook
    (hidden tests included), deleted test cells put back."""
    from nbgrader.preprocessors import (
        CheckCellMetadata,
        ClearOutput,
        DeduplicateIds,
        OverwriteCells,
        OverwriteKernelspec,
    )

    config = course.nbgrader_config()
    resources = {
        "nbgrader": {
            "notebook": notebook,
            "assignment": assignment,
            "student": student,
            "db_url": course.db_url,
        }
    }
    steps = (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata)
    for cls in steps:
        nb, resources = cls(config=config).preprocess(nb, resources)
    return nb


def record(course: Course, assignment: str, students: list[str], executed_root: Path) -> dict:
    """nbgrader ``autograde`` of ``students`` only, with the worker outputs replayed: nbgrader
    itself writes ``autograded/`` and the scores. Returns nbgrader's ``capture_log`` dict."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )
    from nbgrader.utils import capture_log, temp_attrs

    everyone = set(course.students(assignment))
    exclude = ",".join(sorted(everyone - set(students)))
    api = course.api(
        Autograde={
            "sanitize_preprocessors": [],
            "autograde_preprocessors": [
                ReplayExecute,
                IgnorePattern,
                ClearMetadataPreprocessor,
                LimitOutput,
                SaveAutoGrades,
                AssignLatePenalties,
                CheckCellMetadata,
            ],
        },
        ReplayExecute={"executed_root": str(executed_root)},
    )
    with temp_attrs(
        api.coursedir, assignment_id=assignment, student_id="*", student_id_exclude=exclude
    ):
        app = Autograde(coursedir=api.coursedir, parent=api)
        app.force = True
        app.create_student = True
        return capture_log(app)
