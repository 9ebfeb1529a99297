"""Several seeds of the drift chapter's digits MLP, trained side by side as one stack.

:func:`normedu.experiments.drift.train_digits` trains one 20-layer MLP with plain SGD; on a
CPU a step of such a small network costs its per-operation overhead, not its arithmetic, so
training five seeds one after the other costs five times that overhead. Here the seeds of one
setting (norm, activation, gain, learning rate) train as one stack: weights (M, out, in),
activations (M, batch, width), one batched matrix product per layer. Each model keeps its own
initialization (``deep_mlp(..., seed=s)``), its own batch order (``seeding.generator(s + 1)``,
as ``train_digits`` draws it) and its own SGD update: the loss is the sum of the models' own
mean cross-entropies, so each model's gradient is that of its own loss. Seed ``s`` of the
stack is ``train_digits(..., seed=s)`` up to rounding (tests/test_experiments_drift.py).

Only the statistics the chapter's multi-seed verdicts need are kept: the loss per step.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import seeding
from ..conventions import DEFAULT_EPS
from ..data import digits
from ..device import choose
from ..mlp import activation, deep_mlp

__all__ = ["train_seeds", "final_losses"]

#: The norms a stack supports: none, or BatchNorm's training-mode batch statistics.
_NORMS = ("none", "batchnorm")


@lru_cache(maxsize=16)
def train_seeds(
    norm: str = "none",
    act: str = "relu",
    lr: float = 0.1,
    gain: float | None = None,
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    steps: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(losses, final)``: the minibatch training loss per seed and step, ``(len(seeds),
    steps)``, NaN from a model's first non-finite loss on (its update is then zeroed); and each
    model's loss on the whole training set after the last step, ``(len(seeds),)`` (BatchNorm
    with that set's statistics; inf for a diverged model).

    The sizes (depth, width, batch, steps) are :data:`normedu.experiments.drift.SIZES`' training
    sizes; ``steps`` overrides the number of steps (for a short check).
    """
    from .drift import SIZES

    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    size = choose(SIZES)
    steps = size.steps if steps is None else steps
    data = digits()
    nets = [
        deep_mlp(64, size.train_width, 10, size.train_depth, norm=norm, act=act, gain=gain, seed=s)
        for s in seeds
    ]
    lins = [[m for m in net if isinstance(m, nn.Linear)] for net in nets]
    # (M, out, in) weights and (M, 1, out) biases per layer, as leaf tensors trained by SGD.
    ws = [
        torch.stack([ls[i].weight.detach() for ls in lins]).requires_grad_()
        for i in range(len(lins[0]))
    ]
    bs = [
        torch.stack([ls[i].bias.detach() for ls in lins])[:, None].requires_grad_()
        for i in range(len(lins[0]))
    ]
    m_models, width = len(seeds), size.train_width
    # BatchNorm's affine parameters, one (M·width,) vector per hidden layer (start: 1 and 0).
    gammas = [torch.ones(m_models * width, requires_grad=True) for _ in ws[:-1]]
    betas = [torch.zeros(m_models * width, requires_grad=True) for _ in ws[:-1]]
    params = ws + bs + (gammas + betas if norm == "batchnorm" else [])
    fn = activation(act)
    gens = [seeding.generator(s + 1) for s in seeds]
    losses = np.full((m_models, steps), np.nan)

    def forward_loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(M, n, 64) inputs, (M, n) labels -> (M,) each model's mean cross-entropy."""
        n = h.shape[1]
        for i in range(len(ws) - 1):
            z = torch.baddbmm(bs[i], h, ws[i].transpose(1, 2))
            if norm == "batchnorm":  # per model and feature, over that model's batch
                flat = z.transpose(0, 1).reshape(n, -1)
                flat = F.batch_norm(flat, None, None, gammas[i], betas[i], True, 0.0, DEFAULT_EPS)
                z = flat.reshape(n, m_models, width).transpose(0, 1)
            h = fn(z)
        logits = torch.baddbmm(bs[-1], h, ws[-1].transpose(1, 2))
        loss = F.cross_entropy(logits.reshape(-1, 10), y.reshape(-1), reduction="none")
        return loss.reshape(m_models, n).mean(dim=1)

    alive = torch.ones(m_models)
    for step in range(steps):
        idx = torch.stack(
            [torch.randint(0, len(data.x_train), (size.batch,), generator=g) for g in gens]
        )
        per_model = forward_loss(data.x_train[idx], data.y_train[idx])
        vals = per_model.detach().numpy()
        finite = torch.from_numpy(np.isfinite(vals)).float()
        alive = alive * finite
        losses[:, step] = np.where(alive.numpy() > 0, vals, np.nan)
        if not alive.any():
            break
        for p in params:
            p.grad = None
        torch.where(alive > 0, per_model, 0.0).sum().backward()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(torch.nan_to_num(p.grad), alpha=-lr)
    with torch.no_grad():  # the whole training set at once (BatchNorm: its statistics)
        x_all = data.x_train.expand(m_models, *data.x_train.shape)
        whole = forward_loss(x_all, data.y_train.expand(m_models, -1)).numpy()
    return losses, np.where(alive.numpy() > 0, whole, np.inf)


def final_losses(
    norm: str, act: str, lr: float = 0.1, seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
) -> list[float]:
    """Per seed, the loss on the whole training set after the last step (inf if diverged):
    less noisy than the last minibatches' losses, so that seeds differ by the run, not by
    which batches came last."""
    return [float(v) for v in train_seeds(norm, act, lr, None, tuple(seeds))[1]]
