"""normedu.distributed: SyncBatchNorm on real processes equals BatchNorm on the concatenated batch.

Each spawned group runs several cases at once (starting processes is the slow part). The
reference is BatchNorm of the concatenation of every rank's slice, written out from its
definition in float64 (:func:`reference`), and on CUDA also ``torch.nn.SyncBatchNorm``.
"""

from __future__ import annotations

import functools
import time

import pytest
import torch
from torch import nn

from normedu.distributed import (
    RankError,
    SyncBatchNorm,
    convert_sync_batchnorm,
    cuda_rank_pass,
    make_global_batch,
    rank_pass,
    run_ranks,
)

TOL = 1e-6
EPS = 1e-5  # BatchNorm's default eps, which the rank functions leave alone
KEYS = ("out", "dx", "dgamma", "dbeta", "running_mean", "running_var")

# Equal and unequal local batches; (N, C), (N, C, L) and (N, C, H, W) inputs.
CASES = {
    2: [
        dict(local=(4, 4), shape=(5,), seed=0),
        dict(local=(1, 6), shape=(3,), seed=1),
        dict(local=(2, 3), shape=(3, 2, 3), seed=2),
        dict(local=(3, 1), shape=(2, 5), seed=3, momentum=0.3),
    ],
    4: [
        dict(local=(2, 2, 2, 2), shape=(4,), seed=4),
        dict(local=(1, 3, 2, 5), shape=(3,), seed=5),
        dict(local=(2, 1, 1, 3), shape=(2, 3, 2), seed=6),
    ],
}


def reference(case):
    """BatchNorm of the concatenated global batch from its definition: out, dx, dgamma, dbeta,
    running buffers.

    Statistics over every axis but the channels (axis 1), the biased variance to normalize and
    the unbiased one (n / (n - 1)) for the running variance, which starts at 1 (the running mean
    at 0); gradients by autograd through these float64 formulas.
    """
    x, dy, gamma, beta = make_global_batch(case)
    momentum = case.get("momentum", 0.1)
    axes = [0, *range(2, x.dim())]
    per_channel = (1, -1) + (1,) * (x.dim() - 2)
    n = x.numel() // x.shape[1]
    x, gamma, beta = (t.clone().requires_grad_(True) for t in (x, gamma, beta))
    mean = x.mean(dim=axes)
    var = ((x - mean.view(per_channel)) ** 2).mean(dim=axes)
    x_hat = (x - mean.view(per_channel)) / torch.sqrt(var.view(per_channel) + EPS)
    out = gamma.view(per_channel) * x_hat + beta.view(per_channel)
    out.backward(dy)
    mean, var = mean.detach(), var.detach()
    return {
        "out": out.detach(),
        "dx": x.grad,
        "dgamma": gamma.grad,
        "dbeta": beta.grad,
        "running_mean": momentum * mean,
        "running_var": (1 - momentum) + momentum * var * n / (n - 1),
    }


@pytest.mark.parametrize("world_size", [2, 4])
def test_syncbn_equals_batchnorm_on_concatenated_batch(world_size):
    cases = CASES[world_size]
    per_rank = run_ranks(rank_pass, world_size, cases, timeout=120)
    for i, case in enumerate(cases):
        ref = reference(case)
        got = [r[i] for r in per_rank]
        assert [len(g["out"]) for g in got] == list(case["local"])
        for key in ("out", "dx"):  # each rank holds its slice, in rank order
            diff = (torch.cat([g[key] for g in got]) - ref[key]).abs().max().item()
            assert diff < TOL, (case, key, diff)
        for key in ("dgamma", "dbeta"):  # local sums; DDP averages them, so their sum is exact
            diff = (sum(g[key] for g in got) - ref[key]).abs().max().item()
            assert diff < TOL, (case, key, diff)
            if case["local"][0] != sum(case["local"]):
                assert (got[0][key] - ref[key]).abs().max() > TOL  # really local, not global
        for key in ("running_mean", "running_var"):  # global statistics, same on every rank
            for g in got:
                diff = (g[key] - ref[key]).abs().max().item()
                assert diff < TOL, (case, key, diff)


def test_failing_rank_raises_its_traceback():
    with pytest.raises(RankError) as info:
        run_ranks(rank_pass, 2, CASES[2][:1], 1, timeout=60)
    assert info.value.rank == 1
    assert "deliberate failure on rank 1" in str(info.value)
    assert "Traceback" in str(info.value)


def test_stalled_rank_times_out_instead_of_hanging():
    """Rank 1 stalls for 60 s; with a 2 s timeout the call returns long before. The bound is
    half the stall, not a few seconds: the first call in a process also waits for the
    forkserver to import torch (5 s here when quiet, 13 s in a busy test session)."""
    stall = 60.0
    t0 = time.monotonic()
    with pytest.raises((TimeoutError, RankError)):
        run_ranks(rank_pass, 2, CASES[2][:1], None, 1, stall, timeout=2)
    assert time.monotonic() - t0 < stall / 2


def test_single_process_and_eval_mode_equal_batchnorm():
    """No process group: SyncBatchNorm is BatchNorm (forward, backward, buffers, eval mode)."""
    case = dict(local=(6,), shape=(3, 4), seed=7)
    x, dy, gamma, beta = make_global_batch(case)
    ref = nn.BatchNorm1d(3, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(gamma)
        ref.bias.copy_(beta)
    ours = convert_sync_batchnorm(nn.Sequential(ref)).get_submodule("0")
    assert isinstance(ours, SyncBatchNorm)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ours(xa).backward(dy)
    ref(xb).backward(dy)
    assert (xa.grad - xb.grad).abs().max() < TOL
    assert (ours.weight.grad - ref.weight.grad).abs().max() < TOL
    assert (ours.running_var - ref.running_var).abs().max() < TOL
    ours.eval(), ref.eval()
    assert (ours(x) - ref(x)).abs().max() < TOL


CUDA_CASE = dict(local=(3, 5), shape=(3, 2, 2), seed=8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_world_size_one_matches_batchnorm():
    case = {**CUDA_CASE, "local": (sum(CUDA_CASE["local"]),)}
    (got,) = run_ranks(cuda_rank_pass, 1, case, timeout=120, backend="nccl")
    ref = reference(case)
    for key in KEYS:
        assert (got[key] - ref[key]).abs().max() < TOL, key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_torch_syncbatchnorm():
    """Two ranks on one GPU over gloo, unequal local batches: ours equals torch's SyncBatchNorm
    rank by rank, and both equal BatchNorm of the concatenated batch."""
    # NCCL refuses two ranks on one GPU; gloo stages both collectives through host memory
    # (torch's SyncBatchNorm has a gloo branch: all_gather into a list, then all_reduce).
    one_gpu = functools.partial(cuda_rank_pass, against_torch=True, device="cuda:0")
    got = run_ranks(one_gpu, 2, CUDA_CASE, timeout=120, backend="gloo")
    for g in got:
        for key in KEYS:
            assert (g[key] - g["torch_" + key]).abs().max() < TOL, key
    ref = reference(CUDA_CASE)
    for prefix in ("", "torch_"):
        for key in ("out", "dx"):
            assert (torch.cat([g[prefix + key] for g in got]) - ref[key]).abs().max() < TOL
        for key in ("dgamma", "dbeta"):  # local sums
            assert (sum(g[prefix + key] for g in got) - ref[key]).abs().max() < TOL
        for key in ("running_mean", "running_var"):
            assert all((g[prefix + key] - ref[key]).abs().max() < TOL for g in got)
