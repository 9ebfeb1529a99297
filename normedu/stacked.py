"""Many small ReLU MLPs trained side by side as one stack of batched matrix products.

The chapters' ablations train a dozen or more tiny MLPs (a few thousand parameters each) on the
digits data. On a CPU each optimizer step of such a model costs its dispatch overhead, not its
arithmetic, so training M of them one after the other costs M times the overhead. Stacking
them (weights (M, out, in), activations (M, batch, features)) runs every model's step in one
set of operations: the same algorithm per model, to the last bits of rounding.

Every model keeps its own weights, norm, batch order and optimizer state:

- the loss is the sum of the models' own mean cross-entropies, so each model's gradient is the
  gradient of its own loss (the others' terms do not depend on its weights);
- Adam is elementwise, so one Adam over the stacked tensors is M independent Adams;
- a norm parameter a model does not have (RMSNorm's bias, every parameter of "none") is masked
  out of the forward pass: its gradient is zero and Adam leaves it where it is.

Only ``deep_mlp(..., act="relu")`` models with the norms of :data:`NORM_PARTS` are supported.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import seeding
from .conventions import DEFAULT_EPS
from .training import WrittenAdam

__all__ = ["NORM_PARTS", "StackedMLP", "stacked_accuracy", "train_stacked"]

#: What each norm does to a row x: (subtract its mean, divide by its rms, has gamma, has beta).
#: LayerNorm = (x - mean) / rms(x - mean); RMSNorm = x / rms(x); "center" = x - mean.
NORM_PARTS: dict[str, tuple[bool, bool, bool, bool]] = {
    "layernorm": (True, True, True, True),
    "rmsnorm": (False, True, True, False),
    "center": (True, False, True, True),
    "none": (False, False, False, False),
}


class StackedMLP(nn.Module):
    """M ReLU MLPs of the same shape as one module; input (M, N, d_in) -> logits (M, N, d_out).

    ``models``: ``nn.Sequential`` stacks of ``Linear [-> norm] -> ReLU`` blocks and a final
    ``Linear`` (e.g. :func:`normedu.mlp.deep_mlp` with ``act="relu"``), all of the same depth,
    inputs and outputs; hidden widths may differ (narrower ones are zero-padded and masked);
    ``norms``: each model's norm, a key of :data:`NORM_PARTS`. The weights (and any norm's
    gamma/beta) are copied from the models; the models themselves are not trained.
    """

    def __init__(self, models: Sequence[nn.Sequential], norms: Sequence[str], eps=DEFAULT_EPS):
        super().__init__()
        if len(models) != len(norms) or not models:
            raise ValueError("one norm per model, at least one model")
        self.eps = eps
        lins = [[m for m in model if isinstance(m, nn.Linear)] for model in models]
        extras = [[m for m in model if not isinstance(m, (nn.Linear, nn.ReLU))] for model in models]
        if len({len(ls) for ls in lins}) != 1:
            raise ValueError("every model needs the same depth")
        depth = len(lins[0]) - 1
        widths = [ls[0].out_features for ls in lins]
        width = max(widths)

        def padded(t: Tensor, *shape: int) -> Tensor:
            # Zeros beyond a narrower model's own features: they stay zero (see _mask).
            out = torch.zeros(shape)
            out[tuple(slice(0, n) for n in t.shape)] = t.detach()
            return out

        def stack(i: int, bias: bool) -> nn.Parameter:
            d_in = lins[0][i].in_features if i == 0 else width
            d_out = width if i < depth else lins[0][i].out_features
            if bias:
                return nn.Parameter(
                    torch.stack([padded(ls[i].bias[None], 1, d_out) for ls in lins])
                )
            return nn.Parameter(torch.stack([padded(ls[i].weight.T, d_in, d_out) for ls in lins]))

        self.weights = nn.ParameterList(stack(i, False) for i in range(depth + 1))
        self.biases = nn.ParameterList(stack(i, True) for i in range(depth + 1))
        gammas = torch.ones(depth, len(models), 1, width)
        betas = torch.zeros(depth, len(models), 1, width)
        for m, found in enumerate(extras):
            if len(found) not in (0, depth):
                raise ValueError(f"model {m}: expected {depth} norm modules, found {len(found)}")
            for layer, module in enumerate(found):
                if getattr(module, "weight", None) is not None:
                    gammas[layer, m, 0, : widths[m]] = module.weight.detach()
                if getattr(module, "bias", None) is not None:
                    betas[layer, m, 0, : widths[m]] = module.bias.detach()
        self.gammas = nn.Parameter(gammas)
        self.betas = nn.Parameter(betas)
        parts = torch.tensor([NORM_PARTS[n] for n in norms], dtype=torch.float32)
        # (4, M, 1, 1): broadcast over the batch and the features of each model.
        self.register_buffer("parts", parts.T[:, :, None, None].contiguous())
        # Models of different widths: a (M, 1, width) mask of each one's own features, and its
        # width to average over. Every padded feature is multiplied by 0 after each Linear and
        # each norm, so it is 0 forward, gets no gradient, and its weights stay 0 under Adam.
        w = torch.tensor(widths, dtype=torch.float32)[:, None, None]
        self.register_buffer("width", w)
        mask = (torch.arange(width) < w).float() if min(widths) < width else None
        self.register_buffer("mask", mask)

    def _masked(self, h: Tensor) -> Tensor:
        return h if self.mask is None else h * self.mask

    def _norm(self, h: Tensor, layer: int) -> Tensor:
        center, scale, has_gamma, has_beta = self.parts
        if self.mask is None:
            h = h - center * h.mean(dim=-1, keepdim=True)
            inv = torch.rsqrt((h * h).mean(dim=-1, keepdim=True) + self.eps)
        else:
            h = self._masked(h - center * h.sum(dim=-1, keepdim=True) / self.width)
            inv = torch.rsqrt((h * h).sum(dim=-1, keepdim=True) / self.width + self.eps)
        h = h * (scale * inv + (1 - scale))
        gamma = self.gammas[layer] * has_gamma + (1 - has_gamma)
        return self._masked(h * gamma + self.betas[layer] * has_beta)

    def forward(self, x: Tensor) -> Tensor:
        h = x
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = torch.relu(self._norm(self._masked(h), i))
        return h


def train_stacked(
    net: StackedMLP,
    x: Tensor,
    y: Tensor,
    order_seeds: Sequence[int],
    *,
    batch: int,
    epochs: int,
    lr: float,
) -> list[list[float]]:
    """Adam (lr ``lr``, :class:`normedu.training.WrittenAdam`) on each model's mean
    cross-entropy, ``epochs`` passes over ``(x, y)`` (N, d_in), (N,) in minibatches of
    ``batch``. Returns each model's mean training loss per epoch (``[model][epoch]``), so a
    caller can say whether the loss had stopped falling.

    Model m visits the examples in the order of ``seeding.generator(order_seeds[m])``
    drawn as :func:`normedu.training.train_epoch` draws it (one ``randperm(N)`` per epoch), so
    model m sees the very batches it would see trained alone with that generator.
    """
    distinct = sorted(set(order_seeds))
    opt = WrittenAdam(net.parameters(), lr)
    gens = {s: seeding.generator(s) for s in distinct}
    row = torch.tensor([distinct.index(s) for s in order_seeds])
    n = len(x)
    history: list[list[float]] = [[] for _ in order_seeds]
    for _ in range(epochs):
        total = torch.zeros(len(order_seeds))
        perms = torch.stack([torch.randperm(n, generator=gens[s]) for s in distinct])[row]
        for i in range(0, n, batch):
            idx = perms[:, i : i + batch]  # (M, B)
            logits = net(x[idx])
            per_model = F.cross_entropy(
                logits.flatten(0, 1), y[idx].flatten(), reduction="none"
            ).view(idx.shape)
            opt.zero_grad()
            per_model.mean(dim=1).sum().backward()
            opt.step()
            total += per_model.detach().sum(dim=1)
        for m, t in enumerate((total / n).tolist()):
            history[m].append(t)
    return history


def stacked_accuracy(net: StackedMLP, x: Tensor, y: Tensor) -> list[float]:
    """Each model's fraction of rows of ``x`` (N, d_in) classified as ``y`` (N,)."""
    with torch.no_grad():
        logits = net(x.expand(len(net.parts[0]), *x.shape))
    return (logits.argmax(-1) == y).float().mean(dim=1).tolist()
