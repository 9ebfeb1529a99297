"""Results with provenance: the one writer and reader of ``{"provenance", "data"}`` JSON.

Every measured result that is kept on disk goes through :func:`write_record`: the stored GPU
runs (``results/gpu/<name>.json``, :func:`save_stored`), the CPU grading benchmark
(``results/cpu/``), a benchmark run written with :meth:`normedu.bench.BenchResult.save`,
and ``python -m normedu.experiments --store --out DIR``. A record is
``{"provenance": {...}, "data": ...}`` (see :func:`normedu.provenance.provenance`).

Full-size GPU runs cannot happen while the book builds on a CPU, so their output is stored
and plotted beside the live CPU run. A missing file means "not measured yet": the pages say
so and never invent it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .paths import course_root, require_root
from .provenance import provenance

__all__ = [
    "make_record",
    "write_record",
    "read_record",
    "check_record",
    "stored_path",
    "load_stored",
    "save_stored",
]


def make_record(data: Any, prov: dict[str, Any]) -> dict[str, Any]:
    """The record ``{"provenance": prov, "data": data}``: the one shape every stored result has."""
    return {"provenance": prov, "data": data}


def write_record(path: str | Path, data: Any, prov: dict[str, Any]) -> Path:
    """Write :func:`make_record` of ``data`` and ``prov`` to ``path`` (sorted keys, indent 1).

    ``data`` must be JSON-serialisable; parent folders are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = make_record(data, prov)
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def check_record(record: Any, what: str = "a stored result") -> dict[str, Any]:
    """``record`` itself if it has the keys ``provenance`` and ``data``; ValueError otherwise."""
    if not isinstance(record, dict) or not {"provenance", "data"} <= set(record):
        raise ValueError(f"{what} is not a stored result: expected keys 'provenance' and 'data'")
    return record


def read_record(path: str | Path) -> dict[str, Any]:
    """The ``{"provenance", "data"}`` record at ``path`` (ValueError if it is not one)."""
    return check_record(json.loads(Path(path).read_text()), str(path))


def stored_path(name: str, kind: str = "gpu") -> Path:
    """``<course root>/results/<kind>/<name>.json`` (:mod:`normedu.paths`; ValueError outside a
    course checkout)."""
    return require_root(f"the stored result {kind}/{name}") / "results" / kind / f"{name}.json"


def load_stored(name: str, kind: str = "gpu") -> dict[str, Any] | None:
    """Return ``{"provenance", "data"}`` for a stored result, or None if it was never stored
    (or there is no course folder to look in)."""
    if course_root() is None:
        return None
    path = stored_path(name, kind)
    return read_record(path) if path.exists() else None


def save_stored(
    name: str, data: Any, kind: str = "gpu", command: str | None = None, device=None
) -> Path:
    """Write ``data`` (JSON-serialisable) with provenance to ``results/<kind>/<name>.json``."""
    return write_record(stored_path(name, kind), data, provenance(command, device=device))
