"""Where the course's own files are: the one place the package looks for the repository.

The package is installed (a wheel for students, an editable install for the course) and never
guesses the checkout from its own location. Files that belong to the course repository rather
than to the package (stored results in ``results/``, the bibliography ``book/references.bib``,
the claims ledger in ``_build/ledger``) are found under the **course root**:

1. ``$NORMEDU_ROOT``, when it is set. The book build (``book/_ext/ledger_last.py``),
   ``make lab`` (``scripts/lab.sh``) and the tests set it to the checkout.
2. Otherwise the nearest folder at or above the *current directory* that holds ``_toc.yml``
   (a reader running a chapter from a clone, whose kernel starts in ``book/``).

Outside a course checkout there is no root: :func:`course_root` returns None, stored results
read as "not stored" and writing the ledger raises a clear error.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ROOT_ENV", "MARKER", "course_root", "require_root"]

#: The environment variable that names the course root explicitly.
ROOT_ENV = "NORMEDU_ROOT"
#: The file that marks a course checkout (Jupyter Book's table of contents).
MARKER = "_toc.yml"


def course_root(start: str | Path | None = None) -> Path | None:
    """The course root: ``$NORMEDU_ROOT``, else the nearest folder holding ``_toc.yml`` at or
    above ``start`` (default: the current directory); None when there is none."""
    explicit = os.environ.get(ROOT_ENV)
    if explicit:
        return Path(explicit).resolve()
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MARKER).is_file():
            return folder
    return None


def require_root(what: str) -> Path:
    """:func:`course_root`, or a ValueError that says how to name it (``what`` needs it)."""
    root = course_root()
    if root is None:
        raise ValueError(
            f"{what} needs the course folder (a checkout holding {MARKER}): run from inside "
            f"it, or set {ROOT_ENV}=/path/to/the/checkout"
        )
    return root
