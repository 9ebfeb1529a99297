"""Synchronized BatchNorm over ``torch.distributed``, and a helper that runs ranks on this machine.

Data parallelism splits a global batch of N samples over P processes; process p holds N_p of
them. :class:`SyncBatchNorm` normalizes every slice with the statistics of the *global* batch,
so that P processes compute exactly what one BatchNorm computes on the concatenated batch (the
all-reduces of its forward and backward are set out in :mod:`.syncbn`). It works with gloo on
CPU tensors and with NCCL on CUDA tensors (``torch.nn.SyncBatchNorm`` refuses CPU tensors).

:func:`run_ranks` runs ``fn(rank, world_size, *args)`` on ``world_size`` processes of this
machine inside an initialized process group and returns the results in rank order, or raises
the failing rank's traceback (:class:`RankError`) or :class:`TimeoutError`, never hanging.
The ranks receive ``fn`` pickled by reference, so ``fn`` must live in an importable module
(not in a notebook cell).

Modules: :mod:`.syncbn` (the layer, its autograd function and :func:`all_reduce`),
:mod:`.passes` (what the ranks run: SyncBatchNorm passes on seeded batches, and the
single-process reference), :mod:`.ranks` (:func:`run_ranks`). Every name is re-exported here.
"""

from __future__ import annotations

from .passes import (
    batchnorm_reference,
    cuda_rank_pass,
    make_global_batch,
    numpy_syncbn_pass,
    rank_pass,
    trace_pass,
)
from .ranks import RankError, free_port, run_ranks
from .syncbn import (
    COMM_SECONDS,
    SyncBatchNorm,
    all_reduce,
    convert_sync_batchnorm,
    sync_batch_norm,
    traced_all_reduces,
)

__all__ = [
    "COMM_SECONDS",
    "all_reduce",
    "traced_all_reduces",
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
