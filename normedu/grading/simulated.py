"""Simulated processes for the SyncBatchNorm checks: the student's function on several threads
with a rendezvous all-reduce (:func:`simulate`), and the kernel-side harness that runs it on
the student's function (:func:`_simulated_run`).

A leaf module, apart from the checks and their references (:mod:`.syncbn`): the grading
kernel loads it for real (:mod:`normedu.course.reach`), so it holds no BatchNorm.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from normedu.grading.calls import _blocker, unchanged
from normedu.grading.errors import GradingError
from normedu.grading.kernel_side import kernel_side

__all__ = ["simulate", "TIMEOUT"]

#: Seconds a simulated process waits for the others at an all-reduce before giving up.
TIMEOUT = 5.0


class _Group:
    """A rendezvous all-reduce for ``n`` threads (see the module docstring)."""

    def __init__(self, n: int, timeout: float):
        self.n, self.timeout = n, timeout
        self.cond = threading.Condition()
        self.pending: dict[int, dict[int, np.ndarray]] = {}
        self.results: dict[int, Any] = {}
        self.calls = [0] * n
        self.done = [False] * n

    def all_reduce(self, rank: int, a: Any) -> np.ndarray:
        arr = np.array(a, copy=True)
        if arr.dtype.kind not in "fiub":
            raise GradingError(f"all_reduce got a {type(a).__name__}; pass a numpy array")
        with self.cond:
            k = self.calls[rank]
            self.calls[rank] += 1
            self.pending.setdefault(k, {})[rank] = arr
            if len(self.pending[k]) == self.n:
                shapes = {r: v.shape for r, v in sorted(self.pending[k].items())}
                if len(set(shapes.values())) > 1:
                    self.results[k] = GradingError(
                        f"all-reduce call #{k + 1} got arrays of different shapes on different "
                        f"processes ({', '.join(f'process {r}: {s}' for r, s in shapes.items())}"
                        "): every process must all-reduce arrays of the same shape, e.g. "
                        "per-channel sums of shape (C,), never its own rows"
                    )
                else:
                    total = sum(
                        v.astype(np.result_type(v, np.float64)) for v in self.pending[k].values()
                    )
                    self.results[k] = total
                del self.pending[k]
                self.cond.notify_all()
            waited = 0.0
            while k not in self.results:
                finished = [r for r in range(self.n) if self.done[r] and self.calls[r] <= k]
                if finished:
                    raise GradingError(
                        f"process {rank} made all-reduce call #{k + 1}, but process "
                        f"{finished[0]} returned after {self.calls[finished[0]]} call(s): on "
                        "real processes this deadlocks. Every process must make the same "
                        "all-reduce calls in the same order, whatever its local batch (no "
                        "all-reduce inside an `if` that depends on local data)"
                    )
                if waited >= self.timeout:
                    missing = [r for r in range(self.n) if self.calls[r] <= k]
                    raise GradingError(
                        f"process {rank} waited {self.timeout:g} s at all-reduce call #{k + 1} "
                        f"for process(es) {missing}, which never made it: on real processes "
                        "this is a deadlock. Every process must make the same all-reduce calls "
                        "in the same order"
                    )
                self.cond.wait(0.05)
                waited += 0.05
            res = self.results[k]
        if isinstance(res, GradingError):
            raise res
        return res.astype(arr.dtype if arr.dtype.kind == "f" else np.float64, copy=True)

    def finish(self, rank: int) -> None:
        with self.cond:
            self.done[rank] = True
            self.cond.notify_all()


def simulate(
    fn: Callable, per_process: Sequence[tuple], timeout: float = TIMEOUT, **kwargs: Any
) -> list[Any]:
    """Run ``fn(*per_process[p], all_reduce_p, **kwargs)`` on simulated processes (threads).

    ``all_reduce_p`` is the last positional argument, as in the assignment's signatures, and
    sums over the processes. Returns the results in process order. Raises
    :class:`GradingError` with a message a student can act on if a process raises, or if the
    processes make different all-reduce calls (never hangs longer than ``timeout``).
    """
    n = len(per_process)
    group = _Group(n, timeout)
    results: list[Any] = [None] * n
    errors: dict[int, BaseException] = {}
    name = getattr(fn, "__name__", "your function")

    def body(rank: int) -> None:
        try:
            with np.errstate(all="ignore"):
                results[rank] = fn(
                    *per_process[rank], lambda a: group.all_reduce(rank, a), **kwargs
                )
        except BaseException as e:  # noqa: BLE001 - reported to the student below
            errors[rank] = e
        finally:
            group.finish(rank)

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    with warnings.catch_warnings(), _blocker(True):
        warnings.simplefilter("ignore")
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 5.0)
    if any(t.is_alive() for t in threads):
        raise GradingError(
            f"{name} did not return within {timeout + 5:g} s on every simulated process "
            "(an endless loop, or an all-reduce that the other processes never make)"
        )
    if errors:
        # A process that crashed leaves its peers waiting at an all-reduce: the crash is the
        # cause, their "deadlock" messages only its echo. Without a crash, the first grading
        # message (a shape mismatch, a missing call) explains it.
        crashed = [(r, e) for r, e in sorted(errors.items()) if not isinstance(e, GradingError)]
        if not crashed:
            raise min(errors.items())[1]
        rank, e = crashed[0]
        if isinstance(e, NotImplementedError):
            raise GradingError(f"{name} is not implemented yet (it raises NotImplementedError)")
        raise GradingError(f"{name} raised {type(e).__name__} on process {rank}: {e}") from e
    return results


@kernel_side
def _simulated_run(fn: Callable, names: list, per_process: list, eps: float) -> list:
    """In the kernel (:mod:`normedu.grading.kernel_side`): :func:`simulate` on copies of each
    process's inputs (named ``names``), each checked unchanged; the results by process."""
    copies = [tuple(np.array(a, copy=True) for a in args) for args in per_process]
    results = simulate(fn, copies, eps=eps)
    fn_name = getattr(fn, "__name__", "your function")
    for args, after in zip(per_process, copies, strict=True):
        for name, before, now in zip(names, args, after, strict=True):
            unchanged(np.asarray(before), now, name, fn_name)
    return results
