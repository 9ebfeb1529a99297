"""Scale experiments, one module per experiment; each picks its size with normedu.device.choose.

A *scale experiment* runs at a reduced size on a CPU (seconds, live on the page) and at full
size on a CUDA device (stored as ``results/gpu/<name>.json`` and plotted beside the live run).
Modules register the function that produces the stored data with :func:`scale_experiment`;
``python -m normedu.experiments --store`` (see :mod:`normedu.experiments.__main__`) runs every
registered one and stores its output.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["scale_experiment", "registered", "threads", "stored_result"]

_REGISTRY: dict[str, Callable[[str], dict[str, Any]]] = {}


def scale_experiment(name: str):
    """Register ``fn(preset) -> JSON-serialisable dict`` as the stored experiment ``name``.

    ``preset`` is ``"cpu"`` or ``"cuda"`` (a key of the module's ``SIZES``).
    """

    def register(fn: Callable[[str], dict[str, Any]]):
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"scale experiment {name!r} registered twice")
        _REGISTRY[name] = fn
        return fn

    return register


def registered() -> dict[str, Callable[[str], dict[str, Any]]]:
    """``{name: fn}`` of every scale experiment (imports every module of this package)."""
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")
    return dict(_REGISTRY)


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (None: unchanged), then restore.

    Tiny models run faster on one thread: with two, the threads fight over the cores and a
    step can take ten times longer on a loaded machine.
    """
    import torch

    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def stored_result(name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(data, provenance)`` of ``results/gpu/<name>.json``, or None if never stored."""
    from ..results import load_stored

    record = load_stored(name)
    return None if record is None else (record["data"], record["provenance"])
