"""What every scale experiment uses: the registry of stored experiments
(:func:`scale_experiment`), the thread count of a run (:func:`threads`) and the stored GPU
result (:func:`stored_result`).

The experiment modules import these from here, not from the package: the package's
:func:`normedu.experiments.registered` imports every experiment module, so an experiment
module importing the package back would close an import circle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["scale_experiment", "threads", "stored_result", "REGISTRY"]

#: name -> function of every scale experiment whose module has been imported
REGISTRY: dict[str, Callable[[str], dict[str, Any]]] = {}


def scale_experiment(name: str):
    """Register ``fn(preset) -> JSON-serialisable dict`` as the stored experiment ``name``.

    ``preset`` is ``"cpu"`` or ``"cuda"`` (a key of the module's ``SIZES``).
    """

    def register(fn: Callable[[str], dict[str, Any]]):
        if name in REGISTRY and REGISTRY[name] is not fn:
            raise ValueError(f"scale experiment {name!r} registered twice")
        REGISTRY[name] = fn
        return fn

    return register


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
