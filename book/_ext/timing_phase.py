"""The build's timing phase: measure the stale timing records before any page executes.

The build executes its pages several at a time (``parallel_execute.py``), and a call timed
while other pages compute is slowed by a random amount: one shape can come out four times
slower than another of the same size. So every number a page states about speed is a named
record (:mod:`normedu.records`), measured with nothing else running and committed with the
course (``make timings``); the pages only read it. A build measures a record here only when
it is stale: missing, measured with other parameters, or not measured alone (a page run on its
own made it). The measurement runs in a process of its own
(``python -m normedu.records --alone NAME ...``), so that the build's own process never imports
torch or starts a compiler.

Only stale records are measured. A record measured again makes the pages that state it
(its ``pages``) stale too: their cached outputs quote the previous measurement, so they leave
the execution cache and are read, and executed, again. Every page of a build then states the
numbers of one measurement.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)

#: Before ``parallel_execute`` (900) executes the pages, after ``ledger_last`` (500) orders them.
PRIORITY = 850


def measure_timings(app, env, docnames) -> None:
    """``env-before-read-docs``: (re)measure the stale timing records, alone, then send the
    pages that read them back to execution."""
    nb_config = getattr(env, "mystnb_config", None)
    if nb_config is None or nb_config.execution_mode == "off":
        return
    from normedu import records

    stale = records.stale()
    if not stale:
        return
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "normedu.records", "--alone", *stale],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        LOGGER.warning(
            f"timing phase: measuring {stale} failed; the pages measure them as they run\n"
            + done.stderr[-2000:]
        )
        return
    LOGGER.info(f"timing phase: measured {stale} in {time.perf_counter() - t0:.1f} s")
    _reexecute_readers(env, docnames, stale)


def _reexecute_readers(env, docnames, names) -> None:
    """Drop the cached execution of every page that states one of the records ``names``, and
    have Sphinx read it again."""
    from jupyter_cache import get_cache
    from myst_nb.core.read import create_nb_reader

    from normedu.records import RECORDS

    nb_config, md_config = env.mystnb_config, env.myst_config
    cache = get_cache(nb_config.execution_cache_path or ".jupyter_cache")
    pages = {page for name in names for page in RECORDS[name].pages}
    for docname in sorted(pages & set(env.found_docs)):
        path = Path(env.doc2path(docname))
        text = path.read_text(encoding="utf-8")
        reader = create_nb_reader(str(path), md_config, nb_config, text)
        if reader is not None:
            try:
                cache.remove_cache(cache.match_cache_notebook(reader.read(text)).pk)
            except KeyError:
                pass  # not cached: it executes anyway
        if docname not in docnames:
            docnames.insert(0, docname)  # ahead of ledger_last's pages, which stay last


#: Inductor (torch.compile on a CPU), at its first use on a machine, compiles a probe with each
#: vector instruction set /proc/cpuinfo lists: about 21 CPU-s of g++, measured on a fresh
#: machine, spent inside the timing phase, where nothing else of the build runs. With this set
#: it trusts /proc/cpuinfo; every kernel is still compiled with those instructions, so a
#: compiler that could not build them still fails the page. Set for everything the build
#: starts (the timing phase and the pages' kernels); a value the shell sets wins.
INDUCTOR_ISA_TRUST = ("TORCHINDUCTOR_VEC_ISA_OK", "1")


def setup(app):
    os.environ.setdefault(*INDUCTOR_ISA_TRUST)
    app.connect("env-before-read-docs", measure_timings, priority=PRIORITY)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
