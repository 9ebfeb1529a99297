"""The bytes model: what a perfect kernel moves, and what an eager call actually dispatches.

Normalization is memory-bound, so its floor is the bytes it must move over the bandwidth:
the forward reads x and writes y (``2*N*D*itemsize``), forward + backward also reads x and
dy and writes dx (``5*N*D*itemsize``). Parameters (D elements) are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .variants import PASSES

__all__ = ["ideal_bytes", "floor_seconds", "itemsize", "OpTraffic", "aten_traffic"]


def ideal_bytes(n: int, d: int, pass_: str, itemsize: int) -> int:
    """Bytes a perfect kernel moves: fwd reads x, writes y; fwdbwd also reads x, dy, writes dx."""
    if pass_ not in PASSES:
        raise ValueError(f"pass_ must be one of {PASSES}, got {pass_!r}")
    return (2 if pass_ == "fwd" else 5) * n * d * itemsize


def floor_seconds(n: int, d: int, bandwidth_bytes_per_s: float, itemsize: int = 4) -> float:
    """Roofline floor of the forward pass: ``2*N*D*itemsize / bandwidth`` (seconds)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_bytes_per_s}")
    return ideal_bytes(n, d, "fwd", itemsize) / bandwidth_bytes_per_s


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype named as in :data:`normedu.bench.variants.DTYPES`."""
    return {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}[dtype]


@dataclass(frozen=True)
class OpTraffic:
    """One ATen operator an eager call dispatched, and the bytes its tensors occupy."""

    op: str
    bytes_in: int
    bytes_out: int

    @property
    def bytes(self) -> int:
        return self.bytes_in + self.bytes_out


def aten_traffic(fn: Callable[[], Any]) -> list[OpTraffic]:
    """The ATen operators ``fn()`` dispatches, each with the bytes of its tensor inputs and
    outputs: an unfused implementation moves about ``sum(op.bytes)`` through memory (each op
    reads its inputs and writes its outputs in full; nothing stays in cache between ops).

    Works for eager code only: a compiled function is one opaque call.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def nbytes(tree) -> int:
        return sum(
            t.numel() * t.element_size() for t in tree_leaves(tree) if isinstance(t, torch.Tensor)
        )

    log: list[OpTraffic] = []

    class _Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name not in ("detach", "expand", "view", "_unsafe_view", "t"):  # no data moved
                log.append(OpTraffic(name, nbytes((args, kwargs)), nbytes(out)))
            return out

    with _Log():
        fn()
    return log
