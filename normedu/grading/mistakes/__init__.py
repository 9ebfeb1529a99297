"""The catalog of realistic wrong implementations, one :class:`Mistake` each.

A mistake is the instructor's solution of one answer cell with a small edit, the way a student's
almost-right code looks: the wrong axis, ``ddof=1``, eps outside the square root, a dropped term.
(Shortcuts that call a library replace the whole cell.) Each entry names the phrase that the
message of a failing check must contain.

``tests/test_grading.py`` feeds every entry through the checks directly, and
``tests/test_exercises.py`` submits each one as its own notebook to nbgrader and checks that it
scores strictly below full marks. The diagnosis in the check modules is written independently
of these edits: it recomputes each mistake's output from formulas (:mod:`..diagnose`).

One module per assignment holds its ``MISTAKES`` (edits of the solution, one line each) and
its ``SHORTCUTS`` (library calls, which replace the whole cell); :mod:`.mistake` holds the
:class:`Mistake` class. A new assignment adds its module, nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil

from normedu.grading.mistakes.mistake import Mistake

__all__ = ["Mistake", "CATALOG", "SHORTCUTS", "for_assignment"]

#: Every assignment's module (all but :mod:`.mistake`), found here: a new assignment adds its
#: module only. In name order, so that the catalog's order is the same on every machine.
_MODULES = [
    importlib.import_module(f"{__name__}.{m.name}")
    for m in pkgutil.iter_modules(__path__)
    if m.name != "mistake"
]
CATALOG: list[Mistake] = [m for module in _MODULES for m in module.MISTAKES]
SHORTCUTS: list[Mistake] = [m for module in _MODULES for m in module.SHORTCUTS]


def for_assignment(assignment: str, shortcuts: bool = True) -> list[Mistake]:
    """The catalog entries of one assignment (with the shortcut attempts unless told not to)."""
    pool = CATALOG + (SHORTCUTS if shortcuts else [])
    return [m for m in pool if m.assignment == assignment]
