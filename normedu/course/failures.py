"""What a failing test cell said, and the cause it named: the class report's grouping.

The grader records, for every test cell a hand-in failed, the error's name and message as
the trusted run raised them (:func:`.trusted.failure_record`, kept in the verdict's
``failures``). The checks name a catalogued mistake in their message, in one of two forms:

- ``"... is wrong. Likely cause: <the cause>"`` (:mod:`normedu.grading.diagnose`,
  :mod:`normedu.grading.normcheck` and the checks of each assignment): the cause is the text
  after ``Likely cause:``;
- a message that is itself the diagnosis (a wrong shape with the reason, an input changed in
  place, a library called, a broadcasting error a reduction without ``keepdims`` explains):
  the cause is the whole message.

A result that only "does not match the reference" (:func:`normedu.grading.compare.assert_close`,
with at most a description of how it differs) names no cause: :data:`UNNAMED`, the
lecturer's cue to look at those hand-ins.

The same mistake gives messages that differ only in the probe's numbers ("dgamma has shape
(3, 5), expected (5,)" in one test cell, "(2, 3, 8), expected (8,)" in another): a cause's
:attr:`Failure.key` has every number masked, so the two are one cause. The guard's message
quotes the student's own names for what it found (``it uses nf (from normedu.functional)``):
they are masked too. :attr:`Failure.text` keeps what the student actually read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["UNNAMED", "Failure", "classify", "failures_in_notebook"]

#: The group of failures that name no cause (the issue's words).
UNNAMED = "did not match, no cause named"
#: Where a check names the catalogued mistake it recognised.
CAUSE_MARK = "Likely cause: "
#: How :func:`normedu.grading.compare.assert_close` says a result is wrong without a cause.
MISMATCH_MARK = "does not match the reference"

#: Numbers of any form (3, -1, 0.5, 1e-05, 2.16e-01), and shapes such as (3, 5) or (5,).
_SHAPE = re.compile(r"\((?:\s*-?\d+\s*,)*\s*(?:-?\d+\s*)?\)")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w])", re.I)
#: The guard names what it found with the student's own names (:mod:`normedu.grading.guard`).
_GUARD = re.compile(r"(must compute the result itself, but it ).*?(\. Calling )", re.S)
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Failure:
    """One failing test cell of one hand-in, classified.

    - error: the exception's name (``GradingError``, ``AssertionError``, ``NameError`` ...).
    - text: the cause as the student read it (the part after ``Likely cause:``, else the
      whole message); for an unnamed failure, the whole message.
    - key: the group it belongs to: ``text`` with numbers, shapes and the student's own names
      masked; :data:`UNNAMED` for a failure that names no cause.
    """

    error: str
    text: str
    key: str

    @property
    def named(self) -> bool:
        return self.key != UNNAMED


def mask(text: str) -> str:
    """``text`` with what varies between probes and students replaced by ``#``/``…``."""
    text = _GUARD.sub(r"\1…\2", text)
    text = _SHAPE.sub("(#)", text)
    text = _NUMBER.sub("#", text)
    return _SPACES.sub(" ", text).strip()


def classify(error: str, message: str) -> Failure:
    """The :class:`Failure` of a test cell that raised ``error`` with ``message``."""
    message = (message or "").strip()
    if CAUSE_MARK in message:
        text = message.split(CAUSE_MARK, 1)[1].strip()
        return Failure(error, text, mask(text))
    check = error in ("", "GradingError", "AssertionError")
    if MISMATCH_MARK in message or (check and not message):
        return Failure(error or "AssertionError", message, UNNAMED)
    # Any other message says what is wrong; an error that is not a failed check is named by
    # its kind too (the NotImplementedError of a stub, the NameError of a function the
    # notebook no longer defines).
    if not check:
        message = f"{error}: {message}" if message else error
    return Failure(error, message, mask(message))


def failures_in_notebook(path: str | Path, tests: set[str]) -> dict[str, dict[str, str]]:
    """``{grade_id: {"error", "message"}}`` of the failing test cells among ``tests`` of an
    autograded notebook: the same record as the verdict's, read from the notebook's outputs
    (which are the grader's own run of each test cell) for a hand-in graded before the
    verdict kept it. Empty when the notebook cannot be read."""
    import nbformat

    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception:  # noqa: BLE001 - a missing or unreadable notebook records nothing
        return {}
    found = {}
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id not in tests or cell.get("cell_type") != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found[grade_id] = {
                    "error": str(out.get("ename", "")),
                    "message": str(out.get("evalue", "")),
                }
                break
    return found
