"""BatchNorm at initialization: the gradient grows toward the input, layer after layer.

A deep ReLU MLP (``Linear -> BatchNorm -> ReLU`` blocks, :func:`normedu.mlp.deep_mlp`, He
init: weights ~ N(0, 2/fan_in)) and the same MLP without a norm, at the same initialization,
each take ONE backward pass on a batch of digits. The measured quantity is the ratio of the
gradient norms of the first and the last hidden weight matrices,
``‖∂L/∂W_1‖ / ‖∂L/∂W_L‖``; nothing is trained.

Why BatchNorm makes it grow (K. Luther's 2020 back-of-the-envelope form of Yang et al.
2019's mean-field result): a BN layer's input is ``W relu(x̂)`` with ``x̂`` of unit
variance; ``relu`` of a standard normal has variance (π − 1)/(2π), and He init doubles it,
so each BN divides by a batch standard deviation σ ≈ sqrt((π − 1)/π) ≈ 0.83 < 1. The
backward pass divides by the same σ, so every block multiplies the gradient norm by about
1/σ = sqrt(π/(π − 1)) ≈ 1.21 (:data:`RELU_BN_RATE`); without a norm, He init keeps it at 1
on average.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from .. import seeding
from ..data import digits
from ..mlp import hidden_linears, norm_layers

__all__ = ["RELU_BN_RATE", "RELU_BN_SIGMA", "init_gradient_ratio", "growth_with_depth", "fit_rate"]

#: Batch standard deviation of a BN input after relu and He init, in the wide, large-batch
#: limit: sqrt(2 · Var(relu(z))) for z ~ N(0, 1), i.e. sqrt((π − 1)/π).
RELU_BN_SIGMA = math.sqrt((math.pi - 1) / math.pi)
#: The per-block growth of the gradient norm that 1/σ predicts: sqrt(π/(π − 1)) ≈ 1.211.
RELU_BN_RATE = 1 / RELU_BN_SIGMA


def init_gradient_ratio(
    depth: int, norm: str, seed: int, width: int = 64, batch: int = 64
) -> tuple[float, float]:
    """One backward pass of a fresh MLP at initialization.

    ``depth`` hidden blocks of ``width`` (``norm``: ``"batchnorm"`` or ``"none"``; BN in
    training mode), a batch of ``batch`` training digits drawn with ``seed`` (which also seeds
    the weights), cross-entropy loss. Returns ``(‖∂L/∂W_1‖ / ‖∂L/∂W_depth‖, mean batch std of
    the BN inputs after the first block)`` (the second is nan without a norm, or with one
    block). The first BN layer is left out of the mean: its input is ``W_1 x`` on the digits,
    not ``W relu(x̂)``, which is what :data:`RELU_BN_SIGMA` predicts.
    """
    from ..mlp import deep_mlp

    d = digits()
    model = deep_mlp(64, width, 10, depth, norm=norm, act="relu", seed=seed, bias=norm == "none")
    gen = seeding.generator(seed)
    idx = torch.randperm(len(d.x_train), generator=gen)[:batch]
    stds: list[torch.Tensor] = []
    hooks = [
        m.register_forward_hook(lambda _m, a, _o: stds.append(a[0].detach().std(0, correction=0)))
        for m in norm_layers(model)
    ]
    F.cross_entropy(model(d.x_train[idx]), d.y_train[idx]).backward()
    for h in hooks:
        h.remove()
    lins = hidden_linears(model)
    ratio = float(lins[0].weight.grad.norm() / lins[-1].weight.grad.norm())
    sigma = float(torch.cat(stds[1:]).mean()) if len(stds) > 1 else float("nan")
    return ratio, sigma


def fit_rate(depths, ratios) -> float:
    """Per-block growth factor: exp of the least-squares slope of log(ratio) on depth − 1.

    ``ratios``: one row of per-seed ratios per depth; every seed's point enters the fit.
    """
    xs = np.repeat(np.asarray(depths, dtype=float) - 1, [len(r) for r in ratios])
    ys = np.log(np.concatenate([np.asarray(r, dtype=float) for r in ratios]))
    slope = np.polyfit(xs, ys, 1)[0]
    return float(np.exp(slope))


def growth_with_depth(
    depths: tuple[int, ...] = (4, 8, 16, 32),
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    width: int = 64,
    batch: int = 64,
) -> dict:
    """:func:`init_gradient_ratio` for every depth and seed, with and without BatchNorm.

    Returns ``{"depths", "seeds", "width", "batch", "ratio": {norm: [[per seed] per depth]},
    "rate": {norm: fitted growth per block}, "sigma": mean batch std of the BN inputs after
    the first block}``,
    norms ``"batchnorm"`` and ``"none"``. Cached: the chapter and its claims share one run.
    """
    return _growth(tuple(depths), tuple(seeds), width, batch)


@lru_cache(maxsize=4)
def _growth(depths: tuple[int, ...], seeds: tuple[int, ...], width: int, batch: int) -> dict:
    with torch.random.fork_rng():  # the models draw from their own generators; keep it so
        ratio: dict[str, list[list[float]]] = {"batchnorm": [], "none": []}
        sigmas: list[float] = []
        for norm, rows in ratio.items():
            for depth in depths:
                row = []
                for seed in seeds:
                    r, s = init_gradient_ratio(depth, norm, seed, width, batch)
                    row.append(r)
                    if norm == "batchnorm":
                        sigmas.append(s)
                rows.append(row)
    return {
        "depths": list(depths),
        "seeds": list(seeds),
        "width": width,
        "batch": batch,
        "ratio": ratio,
        "rate": {norm: fit_rate(depths, rows) for norm, rows in ratio.items()},
        "sigma": float(np.mean(sigmas)),
    }
