"""Execute the pages' notebooks several at a time, before Sphinx reads them one by one.

With ``execute_notebooks: cache``, MyST-NB executes each page when Sphinx reads it, so a build
runs its pages strictly one after the other, however many cores the machine has. Before the
read phase, this extension finds the pages whose code the cache does not hold yet and executes
them with one kernel per CPU core, exactly as MyST-NB would (same reader, same working folder,
timeout and error policy, same cache entry). Sphinx then reads every page from the cache. Each
page still executes once per build.

Each page's kernel is forked from a warm process (:mod:`normedu.course.zygote`) that has
imported what the chapters import (:data:`PRELOAD`), instead of importing torch and matplotlib
afresh: about 4 s of CPU per page. The kernel is otherwise the one MyST-NB would start: the
page's folder, the same environment, a fresh process per page.

No page times anything while the build runs: the timings the pages state are stored records,
measured alone (:mod:`normedu.records`), so every page can share the machine. Pages that must
run after the others (``ledger_last.LAST``: the claims ledger, the execution
status, the references) and pages that are not in cache mode are left to the read phase. A
page whose execution fails here, or whose kernel dies, is not cached: the read phase runs it
again and reports the error as it always does.
"""

from __future__ import annotations

import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path, PurePosixPath

from sphinx.util import logging

from ledger_last import LAST
from normedu.build_costs import CPU_KEY
from normedu.torch_imports import FIRST_USE

LOGGER = logging.getLogger(__name__)

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"

#: The pages that execute longest (the execution-status page lists each one's time), started
#: first so that the short ones fill the end of the phase instead of a long one starting last
#: on one core.
LONGEST_FIRST = (
    "book/batchnorm",
    "book/drift",
    "book/since2020_placement",
    "book/prepost",
    "book/since2020_nonorm",
)

#: What the chapters' first cells import, imported once by the zygote that forks their kernels.
#: ``pkg.*``: the package and every module in it. With torch come the parts of it that torch
#: imports only at first use (:mod:`normedu.torch_imports`), which nearly every chapter reaches:
#: together 2 to 3 s of CPU per page.
PRELOAD = (
    "numpy",
    "torch",
    *FIRST_USE,
    "matplotlib.pyplot",
    "matplotlib_inline.backend_inline",
    "IPython.display",
    "myst_nb",
    "normedu.ledger",
    "normedu.bench",
    "normedu.experiments.*",
    "normedu.plots.*",
)


def _outdated(env, docnames) -> list[tuple[str, Path, object, dict | None]]:
    """``(docname, path, notebook, read format)`` of every page to execute, read as MyST-NB
    reads it, whose code cells the cache does not hold."""
    from jupyter_cache import get_cache
    from myst_nb.core.read import create_nb_reader

    nb_config, md_config = env.mystnb_config, env.myst_config
    cache = get_cache(nb_config.execution_cache_path or ".jupyter_cache")
    todo = []
    for docname in docnames:
        if docname in LAST:
            continue
        path = Path(env.doc2path(docname))
        text = path.read_text(encoding="utf-8")
        reader = create_nb_reader(str(path), md_config, nb_config, text)
        if reader is None:  # plain Markdown: nothing to execute
            continue
        notebook = reader.read(text)
        mode = notebook.metadata.get(nb_config.metadata_key, {}).get(
            "execution_mode", nb_config.execution_mode
        )
        excluded = any(
            PurePosixPath(path.as_posix()).match(p) for p in nb_config.execution_excludepatterns
        )
        if mode != "cache" or excluded or nb_config.execution_in_temp:
            continue  # left to MyST-NB itself
        try:
            cache.match_cache_notebook(notebook)
        except KeyError:
            todo.append((docname, path, notebook, reader.read_fmt))
    return todo


def execute_outdated(app, env, docnames) -> None:
    """``env-before-read-docs``: execute the outdated pages in parallel and cache them."""
    nb_config = env.mystnb_config
    if nb_config.execution_mode != "cache":
        return
    from jupyter_cache import get_cache
    from jupyter_cache.cache.main import CacheBundleIn
    from jupyter_cache.executors.utils import single_nb_execution
    from normedu.course.zygote import warm_kernel_manager

    rank = {doc: i for i, doc in enumerate(LONGEST_FIRST)}
    todo = sorted(_outdated(env, docnames), key=lambda item: rank.get(item[0], len(rank)))
    if not todo:
        return
    # Even one page runs here, not in the read phase: its cache entry then holds its CPU time.
    workers = min(len(todo), os.cpu_count() or 1)
    LOGGER.info(f"executing {len(todo)} page(s), {workers} at a time")

    zygote = _zygote()
    cpu: dict[str, float | None] = {}

    def run(item):
        docname, path, notebook, _ = item
        kernels = {}
        if zygote is not None:
            record = functools.partial(cpu.__setitem__, docname)
            kernels["kernel_manager_class"] = warm_kernel_manager(zygote, on_exit=record)
        # The kernels do the work; a thread per page only waits for them.
        try:
            result = single_nb_execution(
                notebook,
                cwd=str(path.parent),
                allow_errors=nb_config.execution_allow_errors,
                timeout=nb_config.execution_timeout,
                meta_override=True,
                **kernels,
            )
        except Exception as exc:  # noqa: BLE001 - a dead kernel: this page only, not the build
            LOGGER.info(f"{docname}: {type(exc).__name__} here: {exc}")
            return item, None
        return item, result

    cache = get_cache(nb_config.execution_cache_path or ".jupyter_cache")
    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(run, item) for item in todo]
            # Only this thread writes to the cache's database, below.
            done = [f.result() for f in as_completed(futures)]
    finally:
        if zygote is not None:
            zygote.close()
    for (docname, path, notebook, read_fmt), result in done:
        if result is None or result.err is not None:
            LOGGER.info(f"{docname}: failed here, the read phase runs it again")
            continue
        stage = (
            cache.add_nb_to_project(str(path), read_data=read_fmt)
            if read_fmt is not None
            else cache.add_nb_to_project(str(path))
        )
        # The CPU time goes into the cache entry with the run time: the execution-status page
        # reads both (``normedu.build_costs.execution_costs``), also in a build that
        # takes the page from the cache.
        data = {"execution_seconds": result.time, CPU_KEY: cpu.get(docname)}
        cache.cache_notebook_bundle(
            CacheBundleIn(notebook, stage.uri, data=data),
            check_validity=False,
            overwrite=True,
        )
        LOGGER.info(f"{docname}: executed in {result.time:.1f} s ({cpu.get(docname)} CPU-s)")
    LOGGER.info(f"executed {len(todo)} page(s) in {time.perf_counter() - t0:.1f} s")


def _zygote():
    """A zygote that has imported :data:`PRELOAD` (:mod:`normedu.course.zygote`), or None if
    it cannot start (MyST-NB's own kernels then run the pages)."""
    try:
        from normedu.course.zygote import Zygote

        # ipykernel sets this backend at start-up, before a page imports matplotlib; the
        # zygote imports matplotlib first, so it sets the same backend beforehand.
        env = {"MPLBACKEND": os.environ.get("MPLBACKEND") or INLINE_BACKEND}
        return Zygote(threads=None, preload=PRELOAD, grading=False, env=env)
    except Exception as exc:  # noqa: BLE001 - kernels start from scratch, as without it
        LOGGER.info(f"no warm kernels ({exc}); each page starts its own")
        return None


def setup(app):
    # After ledger_last has put the summary pages last (it skips them here anyway).
    app.connect("env-before-read-docs", execute_outdated, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
