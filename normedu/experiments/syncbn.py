"""Data-parallel training with DistributedDataParallel: local BatchNorm, SyncBN, GroupNorm.

P processes (gloo, CPU) each take ``m`` samples of every global batch of ``P * m`` digits and
train the same MLP (64 -> width -> width -> 10, a norm after each hidden linear layer) with
``DistributedDataParallel``. Four variants, same data order, same initial weights, same
steps:

- ``local``:  ``torch.nn.BatchNorm1d``, statistics of the process's own ``m`` samples;
- ``sync``:   :class:`normedu.distributed.SyncBatchNorm`, statistics of the global batch;
- ``group``:  ``torch.nn.GroupNorm`` (8 groups), no batch statistics at all;
- ``global``: one process, ``torch.nn.BatchNorm1d`` on the whole global batch, no DDP (the
  target SyncBN should reproduce: with equal shards its gradients are the same numbers).

Reported per (P, m, variant): test error on the 450 test digits (rank 0's model in eval mode;
buffers are not broadcast, so local BN's running statistics are rank 0's, exactly what DDP's
default buffer broadcast would have given it), the mean step time, and the share of the step
time spent in all-reduce.

How the all-reduce share is measured: every process adds the wall time of each all-reduce it
makes to a counter, and divides the sum by the wall time of its training steps (forward,
backward, optimizer step); the share is averaged over processes. Two kinds of all-reduce are
counted: those inside SyncBN (forward and backward; :func:`normedu.distributed.all_reduce`
times them) and DDP's gradient all-reduce, which goes through a communication hook
(:func:`timed_allreduce_hook`) that all-reduces each gradient bucket synchronously and times it.
For this small model the gradients form a single bucket that DDP only hands over after the
whole backward, so the hook gives up no overlap of communication with computation. The time in
an all-reduce includes waiting for the slowest process to arrive: when more processes than
cores share a machine, that wait is most of it.

Launch it the standard way::

    torchrun --nproc-per-node 4 -m normedu.experiments.syncbn

or from Python / a notebook with :func:`ddp_table`, which starts the processes with
:func:`normedu.distributed.run_ranks`. Sizes come from :data:`SIZES` via
:func:`normedu.device.choose`; the ``cuda`` preset is stored as ``results/gpu/syncbn_ddp.json``
(its processes still run gloo on the CPU cores of the GPU machine: NCCL cannot put two
processes on one GPU).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .. import seeding
from ..data import digits
from ..device import choose, preset_name
from ..distributed import COMM_SECONDS, SyncBatchNorm, run_ranks
from ..training import accuracy
from .scale import scale_experiment, threads

__all__ = [
    "DDPSize",
    "SIZES",
    "VARIANTS",
    "mlp",
    "timed_allreduce_hook",
    "train_rank",
    "train_global",
    "ddp_table",
    "local_bn_replica",
    "main",
]

#: The four variants, in table order.
VARIANTS = ("local", "sync", "group", "global")


@dataclass(frozen=True)
class DDPSize:
    """World sizes P, samples per process m, epochs, a cap on the steps per run (None: no
    cap), seeds averaged, hidden width."""

    world_sizes: tuple[int, ...]
    per_process: tuple[int, ...]
    epochs: int
    max_steps: int | None
    seeds: tuple[int, ...]
    width: int = 64


SIZES = {
    # The chapter's live run. Four processes on two cores wait for each other at every
    # all-reduce (milliseconds each), so every run stops after 40 steps.
    "cpu": DDPSize((2, 4), (2, 8), 1, 40, (0,)),
    # A GPU machine has many CPU cores: more processes, a larger m, more epochs and seeds.
    "cuda": DDPSize((2, 4, 8), (2, 8, 32), 3, None, (0, 1, 2)),
}

#: SGD learning rate (momentum 0.9), the same for every batch size.
LR = 0.05


def mlp(variant: str, width: int = 64, seed: int = 0) -> nn.Sequential:
    """The MLP of every variant: x (N, 64) -> logits (N, 10), a norm after each hidden linear."""

    def norm():
        if variant in ("local", "global"):
            return nn.BatchNorm1d(width)
        if variant == "sync":
            return SyncBatchNorm(width)
        if variant == "group":
            return nn.GroupNorm(8, width)
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")

    seeding.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(64, width),
        norm(),
        nn.ReLU(),
        nn.Linear(width, width),
        norm(),
        nn.ReLU(),
        nn.Linear(width, 10),
    )


def timed_allreduce_hook(state, bucket):
    """DDP communication hook: all-reduce the gradient bucket now, time it, average it.

    Equivalent to DDP's default all-reduce (sum, then divide by the world size); the seconds
    go to :data:`normedu.distributed.COMM_SECONDS`.
    """
    buf = bucket.buffer()
    t0 = time.perf_counter()
    dist.all_reduce(buf)
    COMM_SECONDS[0] += time.perf_counter() - t0
    buf.div_(dist.get_world_size())
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def _batches(n_train: int, global_batch: int, sz: DDPSize, seed: int) -> list:
    """Index tensors of the global batches: a seeded permutation per epoch, last one dropped,
    at most ``sz.max_steps`` of them."""
    gen = seeding.generator(seed + 1)
    out = []
    for _ in range(sz.epochs):
        perm = torch.randperm(n_train, generator=gen)
        out += [
            perm[i : i + global_batch] for i in range(0, n_train - global_batch + 1, global_batch)
        ]
    return out if sz.max_steps is None else out[: sz.max_steps]


def _digits64():
    """The digits split in float64: SyncBN then matches one-process BatchNorm to rounding."""
    d = digits()
    return d.x_train.double(), d.y_train, d.x_test.double(), d.y_test


def train_rank(rank: int, world_size: int, size: dict) -> dict:
    """This process's part of the DDP runs (inside an initialized process group).

    ``size``: :class:`DDPSize` as a dict. Trains every (m, seed) of the ``local``, ``sync`` and
    ``group`` variants with DDP, in float64. Returns ``{"m": [...], "seeds": [...],
    "<variant>": {"error": [[per seed] per m] (None except on rank 0), "step_s": [[seconds of
    training steps per seed] per m], "comm_s": [[seconds in all-reduce ...]], "steps": [steps
    per m]}}``.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    sz = DDPSize(**size)
    x_train, y_train, x_test, y_test = _digits64()
    out: dict = {"m": list(sz.per_process), "seeds": list(sz.seeds)}
    for variant in ("local", "sync", "group"):
        res: dict = {"error": [], "step_s": [], "comm_s": [], "steps": []}
        for m in sz.per_process:
            errs, steps, comms = [], [], []
            for seed in sz.seeds:
                # Buffers are not synchronized: local BN keeps rank 0's running statistics
                # (what the default broadcast from rank 0 would give), SyncBN's agree anyway.
                model = DDP(mlp(variant, sz.width, seed).double(), forward_sync_buffers=False)
                model.register_comm_hook(None, timed_allreduce_hook)
                opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
                batches = _batches(len(x_train), m * world_size, sz, seed)
                COMM_SECONDS[0] = 0.0
                t_steps = 0.0
                for idx in batches:
                    mine = idx[rank * m : (rank + 1) * m]  # this process's slice
                    t0 = time.perf_counter()
                    loss = F.cross_entropy(model(x_train[mine]), y_train[mine])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    t_steps += time.perf_counter() - t0
                steps.append(t_steps)
                comms.append(COMM_SECONDS[0])
                if rank == 0:
                    model.eval()
                    with torch.no_grad():
                        errs.append(1 - accuracy(model.module(x_test), y_test))
            res["error"].append(errs if rank == 0 else None)
            res["step_s"].append(steps)
            res["comm_s"].append(comms)
            res["steps"].append(len(batches))
        out[variant] = res
    return out


def train_global(world_size: int, m: int, sz: DDPSize, seed: int) -> float:
    """Test error of one process with BatchNorm on the global batch of ``world_size * m``."""
    x_train, y_train, x_test, y_test = _digits64()
    model = mlp("global", sz.width, seed).double()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for idx in _batches(len(x_train), m * world_size, sz, seed):
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        return 1 - accuracy(model(x_test), y_test)


def _rows(world_size: int, per_rank: list[dict], sz: DDPSize) -> list[dict]:
    """Table rows for one world size from every rank's :func:`train_rank` output."""
    rows = []
    for i, m in enumerate(sz.per_process):
        for variant in VARIANTS:
            row = {"processes": world_size, "per_process": m, "variant": variant}
            if variant == "global":
                with threads(1):  # a tiny model: one thread is faster than two fighting
                    errs = [train_global(world_size, m, sz, s) for s in sz.seeds]
                row.update(
                    error=sum(errs) / len(errs), errors=errs, step_ms=None, allreduce_share=None
                )
            else:
                r0 = per_rank[0][variant]
                step_s = [sum(r[variant]["step_s"][i]) for r in per_rank]
                comm_s = [sum(r[variant]["comm_s"][i]) for r in per_rank]
                n_steps = r0["steps"][i] * len(sz.seeds)
                row.update(
                    error=sum(r0["error"][i]) / len(sz.seeds),
                    errors=list(r0["error"][i]),
                    step_ms=1e3 * sum(step_s) / len(step_s) / n_steps,
                    allreduce_share=sum(c / t for c, t in zip(comm_s, step_s, strict=True))
                    / len(step_s),
                )
            rows.append(row)
    return rows


@lru_cache(maxsize=4)
def ddp_table(
    preset: str | None = None, timeout: float = 300.0, seeds: tuple[int, ...] | None = None
) -> dict:
    """Run every world size of :data:`SIZES` (``preset``, default the device's) and tabulate.

    ``seeds``: instead of the preset's seeds (the multi-seed record of the chapter,
    :mod:`.batchnorm_seeds`, runs five). Starts each process group with
    :func:`normedu.distributed.run_ranks` (so it works from a notebook). Returns ``{"size":
    {...}, "rows": [{"processes", "per_process", "variant", "error" (mean over the seeds),
    "errors" (per seed), "step_ms", "allreduce_share"}, ...], "cpu_count": int}``;
    ``step_ms`` and ``allreduce_share`` are None for the single-process ``global`` variant.
    """
    sz = SIZES[preset] if preset else choose(SIZES)
    if seeds is not None:
        sz = replace(sz, seeds=tuple(seeds))
    rows = []
    for p in sz.world_sizes:
        per_rank = run_ranks(train_rank, p, asdict(sz), timeout=timeout)
        rows += _rows(p, per_rank, sz)
    return {"size": asdict(sz), "rows": rows, "cpu_count": os.cpu_count()}


def _normalized(z: torch.Tensor, eps: float) -> torch.Tensor:
    """x̂ of BatchNorm in training mode: z (m, C) normalized with its own mean and biased var."""
    return (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=False) + eps)


def local_bn_replica(
    world_size: int = 2, m: int = 2, preset: str | None = None, seed: int = 0
) -> dict:
    """The ``local`` variant of :func:`ddp_table` replayed in one process, opened up.

    DDP with local BatchNorm is, step for step, this: each of the ``world_size`` slices of a
    global batch goes through the model in training mode on its own (its own BN statistics),
    the parameter gradients are summed and divided by ``world_size`` (DDP's average), and only
    rank 0's slice updates the running statistics (buffers are not synchronized). Same seeds,
    batches, learning rate and float64 data as :func:`train_rank` (``preset``: a key of
    :data:`SIZES`, default the device's; one seed of it); on 2 processes the sum of
    two gradients is the same floating-point operation, so the test error equals the table's
    (with more processes gloo's summation order may differ in the last bits).

    Returns ``{"error"`` (test error, eval mode), ``"error_train_mode"`` (test digits in pairs
    of ``m`` consecutive ones, BN in training mode), ``"agree"`` (share of test digits whose
    prediction is the same in both modes), ``"pm1_train"`` ([per BN layer] share of the
    training-mode x̂ of rank 0's slices within 1e-3 of ±1), ``"max_formula_error"`` (largest
    |x̂ − sign(d)·|d|/sqrt(d² + eps)|, d = (z₁ − z₂)/2, when m = 2), ``"max_abs_train"``
    (largest |x̂| in training mode), and over the test set in eval mode, per BN layer:
    ``"pm1_eval"``, ``"std_eval"`` (standard deviation of x̂), ``"beyond1_eval"`` (share of
    |x̂| > 1)}``. Cached: the chapter and its claims share one run.
    """
    return _replica(world_size, m, preset or preset_name(), seed)


@lru_cache(maxsize=4)
def _replica(world_size: int, m: int, preset: str, seed: int) -> dict:
    sz = SIZES[preset]
    x_train, y_train, x_test, y_test = _digits64()
    model = mlp("local", sz.width, seed).double()
    bns = [mod for mod in model if isinstance(mod, nn.BatchNorm1d)]
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    seen: list[list[torch.Tensor]] = [[] for _ in bns]  # rank 0's training-mode x̂, per layer
    inputs: list[list[torch.Tensor]] = [[] for _ in bns]
    rank0 = [True]

    def hook(layer: int):
        def record(mod, args, _out):
            if mod.training and rank0[0]:
                inputs[layer].append(args[0].detach())
                seen[layer].append(_normalized(args[0].detach(), mod.eps))

        return record

    handles = [bn.register_forward_hook(hook(i)) for i, bn in enumerate(bns)]
    for idx in _batches(len(x_train), m * world_size, sz, seed):
        opt.zero_grad()
        for rank in range(world_size):
            rank0[0] = rank == 0
            kept = [(bn.running_mean.clone(), bn.running_var.clone()) for bn in bns]
            mine = idx[rank * m : (rank + 1) * m]
            F.cross_entropy(model(x_train[mine]), y_train[mine]).backward()
            if rank > 0:  # only rank 0's buffers reach the evaluated model
                for bn, (mean, var) in zip(bns, kept, strict=True):
                    bn.running_mean.copy_(mean)
                    bn.running_var.copy_(var)
        for p in model.parameters():
            p.grad.div_(world_size)
        opt.step()
    for h in handles:
        h.remove()
    out: dict = {"pm1_train": [], "max_abs_train": 0.0, "max_formula_error": 0.0}
    for layer, bn in enumerate(bns):
        xh = torch.cat(seen[layer])
        out["pm1_train"].append(float(((xh.abs() - 1).abs() < 1e-3).double().mean()))
        out["max_abs_train"] = max(out["max_abs_train"], float(xh.abs().max()))
        if m == 2:
            z = torch.stack(inputs[layer])  # (steps, 2, C)
            d = (z[:, 0] - z[:, 1]) / 2
            first = d / torch.sqrt(d**2 + bn.eps)  # x̂ of the first sample; the second is −it
            got = torch.stack(seen[layer])
            err = torch.maximum((got[:, 0] - first).abs(), (got[:, 1] + first).abs())
            out["max_formula_error"] = max(out["max_formula_error"], float(err.max()))
    model.eval()
    with torch.no_grad():
        logits_eval = model(x_test)
        out["error"] = 1 - accuracy(logits_eval, y_test)
        z, stats = x_test, {"pm1_eval": [], "std_eval": [], "beyond1_eval": []}
        for mod in model:
            if isinstance(mod, nn.BatchNorm1d):
                xh = (z - mod.running_mean) / torch.sqrt(mod.running_var + mod.eps)
                stats["pm1_eval"].append(float(((xh.abs() - 1).abs() < 1e-3).double().mean()))
                stats["std_eval"].append(float(xh.std()))
                stats["beyond1_eval"].append(float((xh.abs() > 1).double().mean()))
            z = mod(z)
        out.update(stats)
        model.train()  # training mode on pairs of test digits; buffers restored afterwards
        kept = [(bn.running_mean.clone(), bn.running_var.clone()) for bn in bns]
        n = len(x_test) // m * m
        logits_train = torch.cat([model(x_test[i : i + m]) for i in range(0, n, m)])
        for bn, (mean, var) in zip(bns, kept, strict=True):
            bn.running_mean.copy_(mean)
            bn.running_var.copy_(var)
    out["error_train_mode"] = 1 - accuracy(logits_train, y_test[:n])
    out["agree"] = float((logits_train.argmax(1) == logits_eval[:n].argmax(1)).double().mean())
    out.update(
        world_size=world_size, m=m, steps=len(_batches(len(x_train), m * world_size, sz, seed))
    )
    return out


@scale_experiment("syncbn_ddp")
def ddp_for_store(preset: str) -> dict:
    """:func:`ddp_table` at ``preset`` as JSON-serialisable data (stored as syncbn_ddp.json)."""
    if preset not in SIZES:
        raise ValueError(f"preset must be one of {sorted(SIZES)}, got {preset!r}")
    return {**ddp_table(preset, timeout=1800.0), "preset": preset}


def format_table(rows: list[dict]) -> str:
    """The rows as a Markdown table (error in %, step time in ms, all-reduce share in %)."""
    lines = [
        "| processes | samples per process | variant | test error | ms per step | all-reduce |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        ms = "" if r["step_ms"] is None else f"{r['step_ms']:.2f}"
        share = "" if r["allreduce_share"] is None else f"{r['allreduce_share']:.0%}"
        lines.append(
            f"| {r['processes']} | {r['per_process']} | {r['variant']} | {r['error']:.1%} "
            f"| {ms} | {share} |"
        )
    return "\n".join(lines)


def main() -> int:
    """``torchrun --nproc-per-node P -m normedu.experiments.syncbn``: one world size, printed.

    Without torchrun's environment (``RANK`` unset) it runs :func:`ddp_table` instead.
    """
    if "RANK" not in os.environ:
        print(format_table(ddp_table()["rows"]))
        return 0
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        sz = choose(SIZES)
        mine = train_rank(rank, world_size, asdict(sz))
        everyone = [None] * world_size
        dist.all_gather_object(everyone, mine)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        print(format_table(_rows(world_size, everyone, sz)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
