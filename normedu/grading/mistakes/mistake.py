"""One catalogued mistake: the solution's answer cell with a small edit (or a shortcut)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mistake", "edit", "shortcut"]


@dataclass(frozen=True)
class Mistake:
    """One wrong answer cell.

    - assignment: the nbgrader assignment, e.g. ``"batchnorm"``.
    - cell: ``grade_id`` of the answer cell it replaces, e.g. ``"batchnorm_forward"``.
    - name: short name of the mistake.
    - phrase: text the message of a failing check must contain.
    - edits: ``(old, new)`` replacements applied to the solution's cell source; each ``old``
      must occur exactly once.
    - replacement: a whole new cell source instead of edits (for shortcuts).
    """

    assignment: str
    cell: str
    name: str
    phrase: str
    edits: tuple[tuple[str, str], ...] = ()
    replacement: str | None = None

    def source(self, solution_source: str) -> str:
        """The wrong cell: ``solution_source`` (the solution's answer cell) with the edits."""
        if self.replacement is not None:
            return self.replacement
        src = solution_source
        for old, new in self.edits:
            count = src.count(old)
            if count != 1:
                raise ValueError(
                    f"mistake {self.assignment}/{self.name!r}: {old!r} occurs {count} times in "
                    f"the solution of cell {self.cell!r}, expected exactly once"
                )
            src = src.replace(old, new)
        return src


def edit(assignment: str, cell: str, name: str, phrase: str, *edits: tuple[str, str]) -> Mistake:
    return Mistake(assignment, cell, name, phrase, tuple(edits))


def shortcut(assignment: str, cell: str, name: str, source: str) -> Mistake:
    return Mistake(assignment, cell, name, "earns no points", replacement=source)
