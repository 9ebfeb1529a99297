"""What executing each page of the book cost, as the build recorded it.

The book's pages run when it is built (``book/_ext/parallel_execute.py``), each in a kernel of
its own. The build stores, with each page's executed notebook in Jupyter Book's execution
cache (``_build/.jupyter_cache``), its run time and the CPU time its kernel used
(:data:`CPU_KEY`). CPU time, unlike run time, hardly depends on what else the machine runs at
once (the build runs a page per core, and a test run shares the cores with the tests), so the
budget of a chapter (:data:`CPU_BUDGET`) is stated in CPU-seconds. The execution-status page
shows the table; the tests hold every chapter to the budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from normedu.paths import require_root

__all__ = ["CACHE_ENV", "CPU_KEY", "CPU_BUDGET", "PageCost", "cache_folder", "execution_costs"]

#: The environment variable by which the book build names its execution cache.
CACHE_ENV = "NORMEDU_EXECUTION_CACHE"
#: The key of the kernel's CPU seconds in a cache entry's data (with ``execution_seconds``).
CPU_KEY = "cpu_seconds"
#: CPU-seconds a chapter's execution may take: a laptop runs each chapter in well under a minute.
CPU_BUDGET = 45.0


@dataclass(frozen=True)
class PageCost:
    """One executed page: ``docname`` (e.g. ``"book/drift"``), its ``run_seconds`` (wall
    clock, sharing the machine with the build's other kernels) and ``cpu_seconds`` (None for
    a page the build's parallel phase did not run, such as the pages that run last)."""

    docname: str
    run_seconds: float
    cpu_seconds: float | None


def cache_folder() -> Path:
    """The build's execution cache: ``$NORMEDU_EXECUTION_CACHE`` (the book build names its
    own, which ``--path-output`` moves), else ``_build/.jupyter_cache`` of the course root."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    return require_root("the execution costs") / "_build" / ".jupyter_cache"


def execution_costs(cache: str | Path | None = None) -> list[PageCost]:
    """Every page in the execution cache ``cache`` (default :func:`cache_folder`), by
    docname (the page's path relative to the course root, without its suffix); empty if there
    is no cache yet."""
    from jupyter_cache import get_cache

    folder = Path(cache) if cache is not None else cache_folder()
    if not folder.is_dir():
        return []
    root = require_root("the execution costs")
    costs = {}
    # Oldest first: a page cached again (its code changed) keeps its newest entry.
    records = sorted(get_cache(str(folder)).list_cache_records(), key=lambda r: r.created)
    for record in records:
        path = Path(record.uri)
        try:
            docname = path.resolve().relative_to(root).with_suffix("").as_posix()
        except ValueError:  # cached from another checkout
            continue
        data = record.data or {}
        costs[docname] = PageCost(
            docname, float(data.get("execution_seconds") or 0.0), data.get(CPU_KEY)
        )
    return sorted(costs.values(), key=lambda c: c.docname)
