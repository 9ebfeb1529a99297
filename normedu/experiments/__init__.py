"""Scale experiments, one module per experiment; each picks its size with normedu.device.choose.

A *scale experiment* runs at a reduced size on a CPU (seconds, live on the page) and at full
size on a CUDA device (stored as ``results/gpu/<name>.json`` and plotted beside the live run).
Modules register the function that produces the stored data with :func:`scale_experiment`;
``python -m normedu.experiments --store`` (see :mod:`normedu.experiments.__main__`) runs every
registered one and stores its output.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from .scale import REGISTRY, scale_experiment, stored_result, threads

__all__ = ["scale_experiment", "registered", "threads", "stored_result"]


def registered() -> dict[str, Callable[[str], dict[str, Any]]]:
    """``{name: fn}`` of every scale experiment (imports every module of this package)."""
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")
    return dict(REGISTRY)
