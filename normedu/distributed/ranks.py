"""Running a function on ``world_size`` processes of this machine: :func:`run_ranks`.

:func:`run_ranks` launches ``world_size`` processes with ``torch.multiprocessing`` (forkserver
or spawn) on 127.0.0.1, runs ``fn(rank, world_size, *args)`` in each inside an initialized
process group and returns the results in rank order. A failing rank raises :class:`RankError`
carrying its traceback; a rank that hangs raises :class:`TimeoutError`. The ranks receive
``fn`` pickled by reference, so ``fn`` must live in an importable module (not in a notebook
cell); :mod:`.passes` holds the SyncBatchNorm ones.
"""

from __future__ import annotations

import os
import pickle
import queue as queue_mod
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..torch_imports import FIRST_USE

__all__ = ["RankError", "free_port", "run_ranks"]


class RankError(RuntimeError):
    """A spawned rank raised; ``rank`` says which and the message holds its traceback."""

    def __init__(self, rank: int, tb: str):
        super().__init__(f"rank {rank} failed:\n{tb}")
        self.rank = rank
        self.remote_traceback = tb


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world_size, port, backend, timeout, threads, fn, args, out_q):
    """Body of one spawned rank: join the group, run ``fn``, send back (rank, ok, payload)."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    # gloo picks its network interface from the hostname; loopback always works.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if threads is not None:
        torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank)  # NCCL: one GPU per rank
    try:
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout)
        )
        result = fn(rank, world_size, *args)
        # Bytes, not tensors: torch's queue would share tensor memory with a process about to exit.
        message = (rank, True, pickle.dumps(result))
    except BaseException:  # noqa: BLE001 - every failure goes back to the parent
        message = (rank, False, traceback.format_exc())
    # Report before leaving the group: the other ranks notice our exit and fail too, and the
    # parent should hear the root cause first.
    out_q.put(message)
    if dist.is_initialized():
        dist.destroy_process_group()


def _root_cause(errors: dict[int, str]) -> RankError:
    """The error to raise when ranks failed: a rank's own failure before its peers' echoes."""
    # A rank that fails on its own makes the others fail inside a collective (connection reset,
    # timeout); those tracebacks run through torch.distributed.
    own = [r for r, tb in sorted(errors.items()) if "distributed_c10d" not in tb]
    rank = own[0] if own else min(errors)
    tb = errors[rank]
    others = sorted(set(errors) - {rank})
    if others:
        tb += f"\n(ranks {others} failed as well, in communication)"
    return RankError(rank, tb)


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 60.0,
    backend: str = "gloo",
    threads: int | None = 1,
    start_method: str = "forkserver",
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` new processes; results by rank.

    ``start_method``: ``"forkserver"`` (default: a server process started like spawn imports
    torch once and forks the ranks, so a group starts in a fraction of a second after the first)
    or ``"spawn"`` (a fresh interpreter per rank, seconds each).

    Each process joins a ``backend`` process group over 127.0.0.1 on a free port (torch threads
    set to ``threads``; None leaves them alone) and leaves it cleanly. ``fn`` and ``args`` must
    be picklable (``fn`` a module-level function of an importable module) and so must its
    return value. Raises :class:`RankError` with the first failing rank's traceback (the other
    ranks are terminated), or :class:`TimeoutError` if the ranks have not all returned within
    ``timeout`` seconds of their start (their own start-up, joining the group, included; the
    first call in a process also waits, before that, for the forkserver to import torch:
    seconds). Never leaves a child process behind.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
    ctx = torch.multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        # The server imports torch once; every later rank is a fork of it (milliseconds, not
        # the seconds of a fresh `import torch` per rank). The server starts with a clean
        # interpreter, like spawn, so the same rule holds: fn is pickled by reference.
        # With torch, the parts of it that a rank would import at first use (an autograd
        # Function, a DistributedDataParallel): 1 to 2 s of CPU per rank each.
        ctx.set_forkserver_preload(["torch", "torch.distributed", *FIRST_USE, __package__])
    out_q = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(r, world_size, port, backend, timeout, threads, fn, args, out_q),
            daemon=True,
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    grace_end = None  # after a first error, listen briefly for the root cause
    try:
        while len(results) + len(errors) < world_size:
            now = time.monotonic()
            if grace_end is not None and now >= grace_end:
                break
            if now >= deadline:
                if errors:
                    break
                missing = sorted(set(range(world_size)) - set(results))
                raise TimeoutError(
                    f"ranks {missing} of {world_size} did not finish within {timeout:.0f} s"
                )
            try:
                rank, ok, payload = out_q.get(timeout=max(0.01, min(deadline - now, 0.2)))
            except queue_mod.Empty:
                for r, p in enumerate(procs):
                    # A rank killed by a signal (or os._exit) sends nothing.
                    if r not in results and r not in errors and p.exitcode not in (None, 0):
                        errors[r] = f"process exited with code {p.exitcode} and no traceback"
                        grace_end = grace_end or time.monotonic() + 1.0
                continue
            if ok:
                results[rank] = pickle.loads(payload)
            else:
                errors[rank] = payload
                grace_end = grace_end or time.monotonic() + 1.0
        if errors:
            raise _root_cause(errors)
    finally:
        for p in procs:
            p.join(timeout=0 if len(results) < world_size else 5)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():  # pragma: no cover - a child that ignores SIGTERM
                p.kill()
                p.join()
        out_q.close()
        out_q.join_thread()
    return [results[r] for r in range(world_size)]
