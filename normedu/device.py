"""Device choice and size presets for the scale experiments.

A scale experiment is written once and run at two sizes: the full size on a CUDA device and
a reduced size on a CPU that finishes in seconds. Each experiment module declares::

    SIZES = {"cpu": MySize(depth=12, ...), "cuda": MySize(depth=48, ...)}

and calls ``size = choose(SIZES)``. Set ``NORMEDU_PRESET=cpu`` (or ``cuda``) to force a preset,
e.g. to run the reduced size on a GPU machine, or to make tests deterministic.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

PRESETS = ("cpu", "cuda")


def pick_device(prefer: str | None = None):
    """Return ``torch.device(prefer)`` if given, else CUDA when available, else CPU."""
    import torch

    if prefer:
        dev = torch.device(prefer)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {prefer!r} requested but torch.cuda.is_available() is False")
        return dev
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def preset_name(device=None) -> str:
    """``"cuda"`` or ``"cpu"``: NORMEDU_PRESET if set, else the type of ``device``."""
    forced = os.environ.get("NORMEDU_PRESET")
    if forced:
        if forced not in PRESETS:
            raise ValueError(f"NORMEDU_PRESET must be one of {PRESETS}, got {forced!r}")
        return forced
    dev = device if device is not None else pick_device()
    return "cuda" if str(dev).startswith("cuda") else "cpu"


def choose(sizes: dict[str, T], device=None) -> T:
    """Pick the entry of ``sizes`` ("cpu"/"cuda") for the current device or NORMEDU_PRESET."""
    missing = [p for p in PRESETS if p not in sizes]
    if missing:
        raise ValueError(f"sizes must define presets {PRESETS}; missing {missing}")
    return sizes[preset_name(device)]
