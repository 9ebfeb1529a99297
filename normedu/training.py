"""The training chores the experiments share: one epoch of minibatch steps, accuracy, and the
Adam they train with.

Kept tiny on purpose: each experiment still builds its own model and optimizer, so the page
that runs it shows what it trains; only what every one of them repeated lives here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["train_epoch", "accuracy", "adam", "WrittenAdam"]


def train_epoch(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    batch: int,
    gen: torch.Generator,
    drop_last: bool = False,
) -> None:
    """One pass over ``(x, y)`` in a random order drawn from ``gen``: cross-entropy steps.

    Inputs: x (N, ...) inputs, y (N,) class labels on the model's device; ``batch`` examples
    per step; ``drop_last`` skips an incomplete final batch (BatchNorm cannot normalize a
    batch of 1 in training mode). Draws exactly one ``randperm(N)`` from ``gen``.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    n = len(x)
    perm = torch.randperm(n, generator=gen)
    stop = n - batch + 1 if drop_last else n
    for i in range(0, stop, batch):
        idx = perm[i : i + batch]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()


def accuracy(logits: Tensor, y: Tensor) -> float:
    """Fraction of rows of ``logits`` (N, classes) whose argmax equals ``y`` (N,)."""
    return float((logits.argmax(1) == y).float().mean())


def adam(params, lr: float, **kwargs) -> torch.optim.Adam:
    """``torch.optim.Adam(params, lr, **kwargs)`` with ``fused=True``.

    The fused update is one kernel per parameter tensor for the whole Adam step; unless asked,
    PyTorch runs the step op by op. The chapters' models are small enough on a CPU for that to
    show: the prepost chapter's training took 15 instead of 17 CPU-s. Same algorithm; only the
    last bits of rounding differ. A chapter with no other ``torch.optim`` optimizer may use
    :class:`WrittenAdam` instead, and skip the import that constructing one costs.
    """
    return torch.optim.Adam(params, lr=lr, fused=True, **kwargs)


class WrittenAdam:
    """Adam (betas 0.9, 0.999, eps 1e-8, no weight decay) written out, with ``step()`` and
    ``zero_grad()`` like a ``torch.optim`` optimizer: ``torch.optim.Adam``'s single-tensor
    update, the same operations in the same order (a test compares the two).

    Why: constructing any ``torch.optim`` optimizer imports ``torch._dynamo`` and sympy on its
    first use, 1.5 to 2.5 CPU-s once per fresh kernel, more than a chapter's small training
    itself. A chapter whose every optimizer is this one never pays it.
    """

    def __init__(
        self, params, lr: float | None = None, betas=(0.9, 0.999), eps: float = 1e-8
    ) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float | Tensor | None = None) -> None:
        """One update at ``lr`` (default: the constructor's). A tensor (n,) gives each of n
        models stacked on the parameters' leading axis (each parameter (n, ...)) its own."""
        lr = self.lr if lr is None else lr
        if lr is None:
            raise ValueError("no learning rate: give one to the constructor or to step()")
        (b1, b2), self.t = self.betas, self.t + 1
        c1, c2 = 1 - b1**self.t, math.sqrt(1 - b2**self.t)
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = v.sqrt().div_(c2).add_(self.eps)
            if isinstance(lr, Tensor):
                p.addcdiv_(m * (-lr / c1).view(-1, *([1] * (p.dim() - 1))), denom)
            else:
                p.addcdiv_(m, denom, value=-lr / c1)
