"""Synchronized BatchNorm over ``torch.distributed``: :class:`SyncBatchNorm` and its all-reduce.

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
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "COMM_SECONDS",
    "all_reduce",
    "traced_all_reduces",
    "sync_batch_norm",
    "SyncBatchNorm",
    "convert_sync_batchnorm",
]

#: Seconds spent inside :func:`all_reduce` by this process (``COMM_SECONDS[0]``; reset it by
#: assigning 0.0). A list so that importers share one mutable counter.
COMM_SECONDS = [0.0]

#: When a list, :func:`all_reduce` appends ``(sent, received)`` copies of every call to it
#: (inside :func:`traced_all_reduces`); None (the default) records nothing.
_TRACE: list | None = None


@contextlib.contextmanager
def traced_all_reduces() -> Iterator[list[tuple[Tensor, Tensor]]]:
    """Inside the block, every :func:`all_reduce` of this process appends ``(sent, received)``
    copies of its tensor to the list this yields (what :func:`.passes.trace_pass` returns)."""
    global _TRACE
    _TRACE = []
    try:
        yield _TRACE
    finally:
        _TRACE = None


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
