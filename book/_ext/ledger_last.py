"""Read (and so execute) the pages that summarise other pages after all the others.

The claims ledger shows what the chapters recorded while they executed, and the execution
status page lists their run times. Sphinx reads documents in sorted order and skips unchanged
ones, so without this the ledger would run before drift/fast/jacobian/... on a fresh build
(and compute every chapter's checks a second time), and would never re-run when only a
chapter changed. The References page is read after them so that it lists what they cite.

It also names the course root (``NORMEDU_ROOT``) and the build's execution cache
(``NORMEDU_EXECUTION_CACHE``) for the pages it executes.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The References page comes last: the ledger's citations change with its measurements, and
#: a bibliography read before them (or left over from an earlier build) would miss some.
LAST = ("book/claims_ledger", "book/execution_status", "book/references")


def _always_outdated(app, env, added, changed, removed):
    return [d for d in LAST if d in env.found_docs]


def _read_last(app, env, docnames):
    for d in LAST:
        if d in docnames:
            docnames.remove(d)
            docnames.append(d)


def _name_the_course_root(app, config):
    # The chapters' kernels inherit this process's environment: they find results/ and write
    # the ledger under the checkout being built, whatever folder they start in
    # (normedu.paths.course_root).
    os.environ["NORMEDU_ROOT"] = str(Path(app.srcdir).resolve())
    # ... and the build's execution cache (MyST-NB's default place, next to the HTML, which
    # --path-output moves), where the execution-status page reads what each page cost.
    cache = config.nb_execution_cache_path or Path(app.outdir).parent / ".jupyter_cache"
    os.environ["NORMEDU_EXECUTION_CACHE"] = str(Path(cache).resolve())


def setup(app):
    app.connect("config-inited", _name_the_course_root)
    app.connect("env-get-outdated", _always_outdated)
    app.connect("env-before-read-docs", _read_last)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
