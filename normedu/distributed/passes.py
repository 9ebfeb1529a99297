"""What the ranks of :func:`normedu.distributed.run_ranks` run: SyncBatchNorm passes on
seeded global batches, and their single-process reference.

Every rank draws the same global batch from a case's seed (:func:`make_global_batch`) and
keeps its own rows, so the concatenated results of all ranks can be compared with
:func:`batchnorm_reference`, ``torch.nn.BatchNorm1d/2d`` on the whole batch in one process.
These functions are module-level in an importable module because the ranks receive them
pickled by reference.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from .syncbn import SyncBatchNorm, all_reduce, traced_all_reduces

__all__ = [
    "rank_pass",
    "trace_pass",
    "batchnorm_reference",
    "cuda_rank_pass",
    "numpy_syncbn_pass",
    "make_global_batch",
]


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
    with traced_all_reduces() as calls:
        rank_pass(rank, world_size, [case])
    return {"local": case["local"][rank], "calls": calls}


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


def cuda_rank_pass(
    rank: int, world_size: int, case: dict, against_torch: bool = False, device: str | None = None
) -> dict:
    """:func:`rank_pass` of one case on ``cuda:rank`` (NCCL), or on the one ``device`` every
    rank shares (gloo: NCCL refuses two ranks on one GPU), results moved to the CPU.

    With ``against_torch`` the same slice also goes through ``torch.nn.SyncBatchNorm`` and its
    results are returned under ``torch_<key>`` (NCCL cannot put two ranks on one GPU, so this
    needs ``world_size`` GPUs).
    """
    dev = torch.device(device) if device else torch.device("cuda", rank)
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
