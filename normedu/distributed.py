"""Synchronized BatchNorm over ``torch.distributed``, and a helper that runs ranks on this machine.

Data parallelism splits a global batch of N samples over P processes; process p holds N_p of
them (the N_p may differ). Local BatchNorm normalizes each slice with its own statistics.
:class:`SyncBatchNorm` normalizes every slice with the statistics of the *global* batch, so that
P processes compute exactly what one BatchNorm computes on the concatenated batch.

What each process holds and what is summed (per channel c; x is (N_p, C) or (N_p, C, *), the
reduction runs over every axis but 1, so "count" is N_p times the spatial size):

forward (two all-reduces; two passes, like :mod:`normedu.functional`, so no cancellation)
    1. all-reduce ``[count_p, sum_p(x)]``            -> global count M and mean mu
    2. all-reduce ``sum_p((x - mu)^2)``              -> global biased variance var
    every process then normalizes its own slice: ``x_hat = (x - mu) / sqrt(var + eps)``.
backward (one all-reduce)
    all-reduce ``[sum_p(dy), sum_p(dy * x_hat)]``   -> global sums S1, S2
    ``dx = gamma / sqrt(var + eps) * (dy - S1 / M - x_hat * S2 / M)``: each process's dx is
    exactly its slice of the full-batch gradient. The parameter gradients are the *local* sums
    ``dgamma_p = sum_p(dy * x_hat)``, ``dbeta_p = sum_p(dy)``: DistributedDataParallel averages
    them over processes afterwards (as it does for ``torch.nn.SyncBatchNorm``), so summing them
    over processes gives the full-batch gradient.

Running statistics follow PyTorch: ``running = (1 - momentum) * running + momentum * new``,
with the biased global variance rescaled to the unbiased one by ``M / (M - 1)`` (M the GLOBAL
count). Every process applies the same update, so the buffers stay identical on all ranks.

The all-reduce goes through :func:`all_reduce` (``torch.distributed.all_reduce`` with SUM, or
nothing when no process group is initialized: then the module is plain BatchNorm), and the
seconds spent in it are added to :data:`COMM_SECONDS` so experiments can report the share of a
step spent communicating. It works with gloo on CPU tensors and with NCCL on CUDA tensors
(``torch.nn.SyncBatchNorm`` refuses CPU tensors).

:func:`run_ranks` launches ``world_size`` processes with ``torch.multiprocessing`` (spawn) on
127.0.0.1, runs ``fn(rank, world_size, *args)`` in each inside an initialized process group and
returns the results in rank order. A failing rank raises :class:`RankError` carrying its
traceback; a rank that hangs raises :class:`TimeoutError`. Spawn pickles ``fn`` by reference,
so ``fn`` must live in an importable module (not in a notebook cell).
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
from torch import Tensor, nn

from .torch_imports import FIRST_USE

__all__ = [
    "COMM_SECONDS",
    "all_reduce",
    "sync_batch_norm",
    "SyncBatchNorm",
    "convert_sync_batchnorm",
    "rank_pass",
    "make_global_batch",
    "cuda_rank_pass",
    "trace_pass",
    "numpy_syncbn_pass",
    "batchnorm_reference",
    "RankError",
    "free_port",
    "run_ranks",
]

#: Seconds spent inside :func:`all_reduce` by this process (``COMM_SECONDS[0]``; reset it by
#: assigning 0.0). A list so that importers share one mutable counter.
COMM_SECONDS = [0.0]

#: When a list, :func:`all_reduce` appends ``(sent, received)`` copies of every call to it
#: (see :func:`trace_pass`); None (the default) records nothing.
_TRACE: list | None = None


def all_reduce(t: Tensor, group=None) -> Tensor:
    """Sum ``t`` elementwise over the processes of ``group`` in place and return it.

    Without an initialized process group this is the identity (a world of one process). The
    wall time is added to :data:`COMM_SECONDS`; on CUDA the stream is synchronized first and
    after, so the time is the collective's and not the queued kernels'.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return t
    cuda = t.is_cuda
    if cuda:
        torch.cuda.synchronize(t.device)
    sent = t.detach().clone() if _TRACE is not None else None
    t0 = time.perf_counter()
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    if cuda:
        torch.cuda.synchronize(t.device)
    COMM_SECONDS[0] += time.perf_counter() - t0
    if _TRACE is not None:
        _TRACE.append((sent, t.detach().clone()))
    return t


def _shape_c(x: Tensor) -> tuple[int, ...]:
    """Shape that broadcasts a (C,) vector against x (N, C, *)."""
    return (1, x.shape[1]) + (1,) * (x.dim() - 2)


def _dims(x: Tensor) -> list[int]:
    return [0] + list(range(2, x.dim()))


class _SyncBatchNormFn(torch.autograd.Function):
    """Autograd function of :func:`sync_batch_norm` (training mode). See the module docstring."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group):
        c = x.shape[1]
        dims = _dims(x)
        # Statistics in at least float32: half-precision sums over many values lose digits.
        xs = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        local_count = x.numel() // c if c else 0
        packed = torch.empty(c + 1, dtype=xs.dtype, device=x.device)
        packed[0] = local_count
        packed[1:] = xs.sum(dims)
        all_reduce(packed, group)
        count = float(packed[0].item())
        if count < 2:
            # Same rule as torch: one value per channel leaves nothing to normalize with.
            # Every rank sees the same global count, so every rank raises: nobody hangs.
            raise ValueError(
                f"SyncBatchNorm needs more than 1 value per channel over all processes, got "
                f"{int(count)} (local input shape {tuple(x.shape)})"
            )
        mean = packed[1:] / count
        xc = xs - mean.reshape(_shape_c(x))
        sq = (xc * xc).sum(dims)
        all_reduce(sq, group)
        var = sq / count
        invstd = torch.rsqrt(var + eps)
        x_hat = xc * invstd.reshape(_shape_c(x))
        y = x_hat
        if weight is not None:
            y = y * weight.reshape(_shape_c(x))
        if bias is not None:
            y = y + bias.reshape(_shape_c(x))
        if running_mean is not None:
            with torch.no_grad():
                unbiased = var * (count / (count - 1))
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        ctx.save_for_backward(x_hat, invstd, weight)
        ctx.count, ctx.group, ctx.has_bias = count, group, bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x_hat, invstd, weight = ctx.saved_tensors
        c = x_hat.shape[1]
        dims = _dims(x_hat)
        dys = dy.to(x_hat.dtype)
        local = torch.empty(2 * c, dtype=x_hat.dtype, device=x_hat.device)
        local[:c] = dys.sum(dims)
        local[c:] = (dys * x_hat).sum(dims)
        # The parameter gradients are the LOCAL sums: keep them before the all-reduce.
        dbeta = local[:c].clone() if ctx.has_bias else None
        dgamma = local[c:].clone() if weight is not None else None
        glob = all_reduce(local, ctx.group)
        s1, s2 = glob[:c] / ctx.count, glob[c:] / ctx.count
        scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
        shp = _shape_c(x_hat)
        dx = scale.reshape(shp) * (dys - s1.reshape(shp) - x_hat * s2.reshape(shp))
        if dgamma is not None:
            dgamma = dgamma.to(weight.dtype)
        if dbeta is not None:
            dbeta = dbeta.to(dy.dtype)
        return dx.to(dy.dtype), dgamma, dbeta, None, None, None, None, None


def sync_batch_norm(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    eps: float = 1e-5,
    momentum: float = 0.1,
    group=None,
) -> Tensor:
    """Training-mode BatchNorm of x (N_p, C) or (N_p, C, *) with global-batch statistics.

    weight/bias: (C,) or None. running_mean/running_var: (C,) buffers updated in place (PyTorch
    convention, unbiased variance over the global count) or None. ``group``: the process group
    (None: the default one). Every process of the group must call this with the same C.
    """
    if x.dim() < 2:
        raise ValueError(f"x must be (N, C) or (N, C, *), got shape {tuple(x.shape)}")
    return _SyncBatchNormFn.apply(x, weight, bias, running_mean, running_var, eps, momentum, group)


class SyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm whose training-mode statistics are those of the global batch of all processes.

    Same constructor, parameters, buffers and eval-mode behaviour as ``torch.nn.BatchNorm1d/2d``
    (so state dicts are interchangeable); input (N_p, C) or (N_p, C, *). In eval mode it uses the
    running statistics like BatchNorm and communicates nothing. ``process_group``: the group to
    synchronize over (None: the default group; with no initialized group it is plain BatchNorm).
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group=None,
        device=None,
        dtype=None,
    ):
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype
        )
        self.process_group = process_group

    def _check_input_dim(self, x: Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (N, C, *), got {x.dim()}D")

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats:
            return nn.functional.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        momentum = 0.0 if self.momentum is None else self.momentum
        track = self.training and self.track_running_stats
        if track:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, as torch does
                momentum = 1.0 / float(self.num_batches_tracked)
        return sync_batch_norm(
            x,
            self.weight,
            self.bias,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.eps,
            momentum,
            self.process_group,
        )


def convert_sync_batchnorm(module: nn.Module, process_group=None) -> nn.Module:
    """Return ``module`` with every ``torch.nn`` BatchNorm layer replaced by :class:`SyncBatchNorm`.

    Parameters and buffers are copied, so the converted model computes what the original does on
    one process. Mirrors ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``.
    """
    out = module
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(
        module, SyncBatchNorm
    ):
        like = next(iter(module.parameters()), None)
        like = like if like is not None else module.running_mean
        out = SyncBatchNorm(
            module.num_features,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
            process_group,
            device=None if like is None else like.device,
            dtype=None if like is None else like.dtype,
        )
        with torch.no_grad():
            if module.affine:
                out.weight.copy_(module.weight)
                out.bias.copy_(module.bias)
            if module.track_running_stats:
                out.running_mean.copy_(module.running_mean)
                out.running_var.copy_(module.running_var)
                out.num_batches_tracked.copy_(module.num_batches_tracked)
        out.train(module.training)
    for name, child in module.named_children():
        out.add_module(name, convert_sync_batchnorm(child, process_group))
    return out


def rank_pass(
    rank: int,
    world_size: int,
    cases: list[dict],
    fail_rank: int | None = None,
    stall_rank: int | None = None,
    stall_seconds: float = 60.0,
):
    """One rank's SyncBatchNorm forward and backward on its slice of seeded global batches.

    Runs in a spawned process (see :func:`run_ranks`). Each case is a dict with ``local``
    (tuple of local batch sizes, one per rank), ``shape`` (C, *spatial), ``seed`` and optional
    ``dtype`` (default float64) and ``momentum``. Every rank draws the same global x, dy,
    gamma and beta from ``seed``, keeps rows ``sum(local[:rank]) : sum(local[:rank + 1])``, runs
    :class:`SyncBatchNorm` forward and backward, and returns per case a dict of tensors:
    ``out``, ``dx`` (its slice), ``dgamma``, ``dbeta`` (local sums), ``running_mean``,
    ``running_var``. ``fail_rank``: that rank raises before any communication; ``stall_rank``:
    that rank sleeps ``stall_seconds`` first, so its peers wait in the all-reduce (both show
    how :func:`run_ranks` reports a failing or hanging rank).
    """
    if rank == fail_rank:
        raise RuntimeError(f"deliberate failure on rank {rank}")
    if rank == stall_rank:
        time.sleep(stall_seconds)
    res = []
    for case in cases:
        local = tuple(case["local"])
        if len(local) != world_size:
            raise ValueError(f"case {case} has {len(local)} local sizes for {world_size} ranks")
        x, dy, gamma, beta = make_global_batch(case)
        lo = sum(local[:rank])
        xs = x[lo : lo + local[rank]].clone().requires_grad_(True)
        bn = SyncBatchNorm(x.shape[1], momentum=case.get("momentum", 0.1), dtype=x.dtype)
        with torch.no_grad():
            bn.weight.copy_(gamma)
            bn.bias.copy_(beta)
        out = bn(xs)
        out.backward(dy[lo : lo + local[rank]])
        res.append(
            {
                "out": out.detach(),
                "dx": xs.grad,
                "dgamma": bn.weight.grad,
                "dbeta": bn.bias.grad,
                "running_mean": bn.running_mean,
                "running_var": bn.running_var,
            }
        )
    return res


def trace_pass(rank: int, world_size: int, case: dict) -> dict:
    """:func:`rank_pass` of one case, recording what this rank sends to each all-reduce.

    Returns ``{"local": this rank's batch size, "calls": [(sent, received), ...]}`` in call
    order: forward ``[count, sum x]`` (C + 1), forward ``sum (x - mu)^2`` (C), backward
    ``[sum dy, sum dy * x_hat]`` (2C).
    """
    global _TRACE
    _TRACE = []
    try:
        rank_pass(rank, world_size, [case])
        return {"local": case["local"][rank], "calls": _TRACE}
    finally:
        _TRACE = None


def batchnorm_reference(case: dict) -> dict:
    """``torch.nn.BatchNorm1d/2d`` on the concatenated global batch of a :func:`rank_pass` case.

    Returns the same keys as one rank's result of :func:`rank_pass` (``out``, ``dx``, ``dgamma``,
    ``dbeta``, ``running_mean``, ``running_var``), for the whole batch.
    """
    x, dy, gamma, beta = make_global_batch(case)
    cls = nn.BatchNorm2d if x.dim() == 4 else nn.BatchNorm1d
    bn = cls(x.shape[1], momentum=case.get("momentum", 0.1), dtype=x.dtype)
    with torch.no_grad():
        bn.weight.copy_(gamma)
        bn.bias.copy_(beta)
    x = x.clone().requires_grad_(True)
    out = bn(x)
    out.backward(dy)
    return {
        "out": out.detach(),
        "dx": x.grad,
        "dgamma": bn.weight.grad,
        "dbeta": bn.bias.grad,
        "running_mean": bn.running_mean,
        "running_var": bn.running_var,
    }


def cuda_rank_pass(rank: int, world_size: int, case: dict, against_torch: bool = False) -> dict:
    """:func:`rank_pass` of one case on ``cuda:rank`` (NCCL), results moved to the CPU.

    With ``against_torch`` the same slice also goes through ``torch.nn.SyncBatchNorm`` and its
    results are returned under ``torch_<key>`` (NCCL cannot put two ranks on one GPU, so this
    needs ``world_size`` GPUs).
    """
    dev = torch.device("cuda", rank)
    x, dy, gamma, beta = make_global_batch(case)
    lo = sum(case["local"][:rank])
    xs, dys = x[lo : lo + case["local"][rank]].to(dev), dy[lo : lo + case["local"][rank]].to(dev)
    mods = {"": SyncBatchNorm(x.shape[1], dtype=x.dtype, device=dev)}
    if against_torch:
        mods["torch_"] = nn.SyncBatchNorm(x.shape[1], dtype=x.dtype, device=dev)
    out = {}
    for prefix, bn in mods.items():
        with torch.no_grad():
            bn.weight.copy_(gamma)
            bn.bias.copy_(beta)
        xr = xs.clone().requires_grad_(True)
        y = bn(xr)
        y.backward(dys)
        for key, t in (
            ("out", y.detach()),
            ("dx", xr.grad),
            ("dgamma", bn.weight.grad),
            ("dbeta", bn.bias.grad),
            ("running_mean", bn.running_mean),
            ("running_var", bn.running_var),
        ):
            out[prefix + key] = t.cpu()
    return out


def numpy_syncbn_pass(
    rank: int, world_size: int, module_path: str, local: tuple, channels: int, seed: int
) -> dict:
    """Run numpy ``syncbn_forward``/``syncbn_backward`` from ``module_path`` on this rank.

    The functions (the ``syncbn`` assignment's signatures) get this rank's rows of a seeded
    global batch and an ``all_reduce`` over ``torch.distributed``. Returns numpy arrays:
    ``x``, ``dout`` (this rank's rows), ``gamma``, ``beta`` and the function outputs ``out``,
    ``dx``, ``dgamma``, ``dbeta``.
    """
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location("syncbn_student", module_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(seed)
    n = sum(local)
    x = 3 + 2 * rng.standard_normal((n, channels))
    dout = rng.standard_normal((n, channels))
    gamma, beta = rng.uniform(0.5, 2, channels), rng.standard_normal(channels)
    lo = sum(local[:rank])
    x, dout = x[lo : lo + local[rank]], dout[lo : lo + local[rank]]

    def np_all_reduce(a):
        t = torch.from_numpy(np.array(a, dtype=np.float64))
        return all_reduce(t).numpy()

    out = mod.syncbn_forward(x.copy(), gamma.copy(), beta.copy(), np_all_reduce)
    dx, dgamma, dbeta = mod.syncbn_backward(dout.copy(), x.copy(), gamma.copy(), np_all_reduce)
    return dict(x=x, dout=dout, gamma=gamma, beta=beta, out=out, dx=dx, dgamma=dgamma, dbeta=dbeta)


def make_global_batch(case: dict) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The global batch of a :func:`rank_pass` case: x, dy (sum(local), *shape), gamma, beta (C,).

    x has a per-channel offset of 3 and scale in [0.5, 2.5] so that mean and variance matter.
    """
    gen = torch.Generator().manual_seed(case["seed"])
    dtype = case.get("dtype", torch.float64)
    n, shape = sum(case["local"]), tuple(case["shape"])
    c = shape[0]
    shp = (1, c) + (1,) * (len(shape) - 1)
    x = torch.randn(n, *shape, generator=gen, dtype=dtype)
    x = 3 + (0.5 + 2 * torch.rand(c, generator=gen, dtype=dtype)).reshape(shp) * x
    dy = torch.randn(n, *shape, generator=gen, dtype=dtype)
    gamma = 1 + 0.5 * torch.randn(c, generator=gen, dtype=dtype)
    beta = torch.randn(c, generator=gen, dtype=dtype)
    return x, dy, gamma, beta


# ---------------------------------------------------------------------------------------------
# Running ranks on this machine
# ---------------------------------------------------------------------------------------------


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
    ``timeout`` seconds (start-up included). Never leaves a child process behind.
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
        ctx.set_forkserver_preload(["torch", "torch.distributed", *FIRST_USE, __name__])
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
