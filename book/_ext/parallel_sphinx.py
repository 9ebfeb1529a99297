"""Let Sphinx read and write the pages in parallel processes.

Jupyter Book 1 always builds with one process (``jupyter-book build`` has no ``-j``), so
Sphinx's own phases, reading every page from the execution cache and writing its HTML, ran on
one core: about 25 s of a cold build. This sets the number of processes Sphinx would take from
``-j``: one per CPU core, plus one, since in the write phase the main process only loads the
pages that the others write.

Sphinx reads in parallel only when every extension says it is safe. Two of Jupyter Book's do
not say: ``sphinx_multitoc_numbering`` only replaces how section numbers are assigned, which
Sphinx does in the main process after the pages are read and merged, and
``sphinx_jupyterbook_latex`` only adds per-page transforms that act in LaTeX builds. Both are
declared safe here. The HTML a parallel build writes is the same as a serial build's but for
the run times on the execution-status page (compared when this was added).
"""

from __future__ import annotations

import os

#: Extensions that do not declare parallel safety, and are safe (see the module docstring).
SAFE_UNDECLARED = ("sphinx_multitoc_numbering", "sphinx_jupyterbook_latex")


def _declare_safe(app, config) -> None:
    for name in SAFE_UNDECLARED:
        ext = app.extensions.get(name)
        if ext is not None:
            ext.parallel_read_safe = ext.parallel_write_safe = True


def setup(app):
    app.parallel = (os.cpu_count() or 1) + 1
    app.connect("config-inited", _declare_safe)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
