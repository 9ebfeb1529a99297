"""Stored results: small JSON files committed under ``results/`` with their provenance.

Full-size GPU runs cannot happen while the book builds on a CPU, so their output is stored as
``results/gpu/<name>.json`` = ``{"provenance": {...}, "data": {...}}`` and plotted beside the
live CPU run. A missing file means "not measured yet": the pages say so and never invent it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .provenance import provenance

#: The repository's results folder (the package is used from a checkout).
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def stored_path(name: str, kind: str = "gpu") -> Path:
    return RESULTS_DIR / kind / f"{name}.json"


def load_stored(name: str, kind: str = "gpu") -> dict[str, Any] | None:
    """Return ``{"provenance", "data"}`` for a stored result, or None if it was never stored."""
    path = stored_path(name, kind)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if not {"provenance", "data"} <= set(record):
        raise ValueError(f"{path} is not a stored result: expected keys 'provenance' and 'data'")
    return record


def save_stored(
    name: str, data: Any, kind: str = "gpu", command: str | None = None, device=None
) -> Path:
    """Write ``data`` (JSON-serialisable) with provenance to ``results/<kind>/<name>.json``."""
    path = stored_path(name, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"provenance": provenance(command, device=device), "data": data}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path
