"""Training several digits CNNs (:func:`normedu.convnet.conv_net`) as one network.

The CNN experiments train many small networks at one batch size: BatchNorm and GroupNorm,
several seeds, several G. On a CPU a step of one such network is mostly per-operation
overhead (a batch of 2 images of 8x8), so :func:`train_stacked` trains ``k`` of them at once:
replica ``r`` reads its images on input channel ``r``, the convolutions are grouped
(``groups=k``: no replica sees another's channels), each norm layer acts on each replica's own
channels (BatchNorm per channel, GroupNorm per group of one replica), and the linear heads
are one batched matrix product. The loss is the sum of the replicas' mean cross-entropies, so
each replica's gradient is exactly its own; SGD with momentum updates each number on its own.
Every replica therefore follows the same algorithm, from the same initialization and order of
batches, as when trained alone (:func:`normedu.experiments.convnet.train_cnn`); only the
rounding of the grouped convolution differs. After training, the weights and running
statistics are copied back into ordinary :func:`conv_net` models.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from .. import seeding
from ..convnet import IMAGE, conv_net, norm_modules

__all__ = ["train_stacked"]


def _segments(keys: list) -> list[tuple[int, int]]:
    """(start, stop) of each run of equal consecutive ``keys``."""
    out, start = [], 0
    for _, run in itertools.groupby(keys):
        stop = start + len(list(run))
        out.append((start, stop))
        start = stop
    return out


def _cat_norm(mods: list[nn.Module]) -> nn.Module:
    """One norm module over the channels of ``mods`` (same kind and G), side by side."""
    first = mods[0]
    with torch.no_grad():
        if isinstance(first, nn.BatchNorm2d):
            new = nn.BatchNorm2d(sum(m.num_features for m in mods), first.eps, first.momentum)
            for name in ("running_mean", "running_var"):
                getattr(new, name).copy_(torch.cat([getattr(m, name) for m in mods]))
        else:  # GroupNorm: G groups per replica stay inside that replica's channels
            new = nn.GroupNorm(
                first.num_groups * len(mods), first.num_channels * len(mods), first.eps
            )
        new.weight.copy_(torch.cat([m.weight for m in mods]))
        new.bias.copy_(torch.cat([m.bias for m in mods]))
    return new


class _Stack(nn.Module):
    """``k`` conv_nets of one norm position as one module: x (B, k, 8, 8) -> (B, k, 10)."""

    def __init__(self, nets: list[nn.Sequential], before: bool, keys: list) -> None:
        super().__init__()
        self.k, self.before = len(nets), before
        convs = [[m for m in n if isinstance(m, nn.Conv2d)] for n in nets]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.cat([c[i].weight.detach() for c in convs])) for i in range(2)
        )
        has_bias = convs[0][0].bias is not None
        self.biases = (
            nn.ParameterList(
                nn.Parameter(torch.cat([c[i].bias.detach() for c in convs])) for i in range(2)
            )
            if has_bias
            else None
        )
        self.segs = _segments(keys)
        self.width = convs[0][0].out_channels
        norms = [norm_modules(n) for n in nets]
        self.norms = nn.ModuleList(
            nn.ModuleList(_cat_norm([norms[r][i] for r in range(a, b)]) for a, b in self.segs)
            for i in range(2)
        )
        heads = [n[-1] for n in nets]
        self.head_w = nn.Parameter(torch.stack([h.weight.detach() for h in heads]))
        self.head_b = nn.Parameter(torch.stack([h.bias.detach() for h in heads]))

    def _norm(self, z: torch.Tensor, i: int) -> torch.Tensor:
        if len(self.segs) == 1:
            return self.norms[i][0](z)
        w = self.width
        return torch.cat(
            [m(z[:, a * w : b * w]) for m, (a, b) in zip(self.norms[i], self.segs, strict=True)],
            dim=1,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x
        for i in range(2):
            bias = None if self.biases is None else self.biases[i]
            z = F.conv2d(z, self.weights[i], bias, padding=1, groups=self.k)
            z = F.relu(self._norm(z, i)) if self.before else self._norm(F.relu(z), i)
        z = F.max_pool2d(z, 2).reshape(len(x), self.k, -1)
        return torch.einsum("bki,koi->bko", z, self.head_w) + self.head_b

    @torch.no_grad()
    def unstack(self, nets: list[nn.Sequential]) -> None:
        """Copy the trained numbers back into ``nets`` (the models this stack was built from)."""
        w = self.width
        for r, net in enumerate(nets):
            convs = [m for m in net if isinstance(m, nn.Conv2d)]
            for i, conv in enumerate(convs):
                conv.weight.copy_(self.weights[i][r * w : (r + 1) * w])
                if conv.bias is not None:
                    conv.bias.copy_(self.biases[i][r * w : (r + 1) * w])
            seg = next(j for j, (a, b) in enumerate(self.segs) if a <= r < b)
            lo = (r - self.segs[seg][0]) * w
            for i, norm in enumerate(norm_modules(net)):
                big = self.norms[i][seg]
                names = ["weight", "bias"]
                if isinstance(norm, nn.BatchNorm2d):
                    names += ["running_mean", "running_var", "num_batches_tracked"]
                for name in names:
                    src = getattr(big, name)
                    getattr(norm, name).copy_(src if src.dim() == 0 else src[lo : lo + w])
            net[-1].weight.copy_(self.head_w[r])
            net[-1].bias.copy_(self.head_b[r])


def train_stacked(
    runs: tuple[tuple[str, int | None, int], ...],
    batch: int,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    width: int,
    norm_position: str = "before",
    epochs: int = 1,
) -> list[nn.Sequential]:
    """Train one :func:`conv_net` per ``(norm, groups, seed)`` of ``runs``, all at once.

    x (N, 64) training digits, y (N,) labels. Each run: SGD (``lr``, momentum 0.9), ``epochs``
    passes in the order of ``randperm(N)`` drawn from a generator seeded ``seed + 1`` (as
    :func:`normedu.training.train_epoch` draws it), ``batch`` images per step, the last
    incomplete batch dropped. Returns the trained models, in the order of ``runs``, in eval mode.
    """
    nets = [
        conv_net(n, groups=g, norm_position=norm_position, channels=(width, width), seed=s)
        for n, g, s in runs
    ]
    stack = _Stack(nets, norm_position == "before", [(n, g) for n, g, _ in runs])
    opt = torch.optim.SGD(stack.parameters(), lr=lr, momentum=0.9)
    gens = {s: seeding.generator(s + 1) for s in sorted({s for *_, s in runs})}
    n, k = len(x), len(runs)
    for _ in range(epochs):
        perm = {s: torch.randperm(n, generator=g) for s, g in gens.items()}
        order = torch.stack([perm[s] for *_, s in runs], dim=1)  # (N, k): row i, replica r
        xs = x[order].reshape(n, k, IMAGE, IMAGE)
        ys = y[order]
        for i in range(0, n - batch + 1, batch):
            logits = stack(xs[i : i + batch])
            # Sum over replicas of each replica's mean loss: replica r's gradient is its own.
            loss = (
                F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]),
                    ys[i : i + batch].reshape(-1),
                    reduction="sum",
                )
                / batch
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    stack.unstack(nets)
    return [net.eval() for net in nets]
