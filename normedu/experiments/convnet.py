"""Experiments on the digits CNN (:func:`normedu.convnet.conv_net`): BatchNorm against
GroupNorm across batch sizes, the choice of G, and BatchNorm before or after the ReLU.

Every run is deterministic and cached (:func:`functools.lru_cache`), so a chapter and its claim
checks share one computation. Sizes come from :data:`SIZES` through
:func:`normedu.device.choose`.

Protocol (the BatchNorm chapter's MLP sweep, on a CNN): SGD with momentum 0.9, the learning
rate scaled linearly with the batch size (``BASE_LR * batch / 32``, as Wu & He 2018 and
Goyal et al. 2017 do), and the **same number of epochs** at every batch size: every run sees
the same training images the same number of times, so a difference between batch sizes is
not one of data, and with the scaled rate the small-batch runs take proportionally smaller
steps. Test error is measured in eval mode (BatchNorm with its running statistics).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from .. import seeding
from ..convnet import IMAGE, norm_modules
from ..data import digits
from ..device import choose
from ..norms import groups_for
from ..training import accuracy
from .batchnorm import BASE_LR
from .convnet_stack import train_stacked

__all__ = [
    "ConvSize",
    "SIZES",
    "train_cnn",
    "train_cnns",
    "batch_size_sweep",
    "crossover",
    "group_sweep",
    "stat_noise",
    "position_comparison",
    "difference",
    "judged",
]


@dataclass(frozen=True)
class ConvSize:
    """Sizes of the CNN experiments.

    - batch_sizes, epochs, seeds: the BatchNorm-vs-GroupNorm sweep.
    - group_batch, groups: the sweep of G (GroupNorm at one batch size, same epochs/seeds).
    - position_batch, position_epochs, position_seeds: BatchNorm before vs after the ReLU.
    """

    batch_sizes: tuple[int, ...]
    epochs: int
    seeds: tuple[int, ...]
    group_batch: int
    groups: tuple[int, ...]
    position_batch: int
    position_epochs: int
    position_seeds: tuple[int, ...]


#: The CNN's width: both convolutions have this many channels, so G = WIDTH is InstanceNorm.
WIDTH = 16

SIZES = {
    # One epoch: batch 2 alone is 673 steps (about 1.5 CPU-s per run, less side by side).
    # G is swept at batch 16: GroupNorm uses no batch statistics, and 16 costs half of 8.
    # Five seeds for the two sweeps and for the BatchNorm chapter's before/after-ReLU verdict: a
    # run costs under 2 CPU-s (the placement comparison: two epochs at batch 32, about 0.2 CPU-s
    # per placement and seed), and their verdicts follow the course's rule
    # (normedu.seeding.compare), which two seeds could not satisfy robustly.
    "cpu": ConvSize(
        (2, 4, 8, 16, 32), 1, (0, 1, 2, 3, 4), 16, (1, 2, 4, 8, WIDTH), 32, 2, (0, 1, 2, 3, 4)
    ),
    "cuda": ConvSize(
        (2, 4, 8, 16, 32, 64), 3, (0, 1, 2, 3, 4), 16, (1, 2, 4, 8, WIDTH), 16, 3, tuple(range(8))
    ),
}


def _images(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, 1, IMAGE, IMAGE)


#: Below this batch size the runs skip oneDNN's convolutions: on a CPU their per-call setup
#: outweighs the work of a few 8x8 images (one epoch at batch 2: 1.3 instead of 1.7 CPU-s),
#: while from batch 16 on they are the faster ones. Same arithmetic up to rounding.
ONEDNN_FROM = 8


@contextlib.contextmanager
def _conv_backend(batch: int) -> Iterator[None]:
    with warnings.catch_warnings():
        # Toggling oneDNN warns about an Intel-GPU TF32 setting that a CPU run never uses.
        warnings.simplefilter("ignore", UserWarning)
        with torch.backends.mkldnn.flags(enabled=batch >= ONEDNN_FROM):
            yield


def _run(norm: str, groups: int | None, seed: int) -> tuple[str, int | None, int]:
    """A run's key with G made explicit (GroupNorm's default) and dropped for other norms, so
    that one network is never trained twice under two spellings."""
    if norm == "groupnorm":
        return (norm, groups_for(WIDTH) if groups is None else groups, seed)
    return (norm, None, seed)


@lru_cache(maxsize=64)
def train_cnns(
    runs: tuple[tuple[str, int | None, int], ...],
    batch: int,
    *,
    norm_position: str = "before",
    epochs: int = 1,
) -> tuple[tuple[nn.Module, float], ...]:
    """Train one CNN per ``(norm, groups, seed)`` of ``runs`` at ``batch``; ``(model, error)``
    each, in order (see :func:`train_cnn`).

    The runs are trained side by side as one network (:func:`.convnet_stack.train_stacked`):
    the same algorithm, initialization and batches per run as alone, at a fraction of the
    per-step overhead (four runs at batch 2: 3.4 instead of 6.5 CPU-s).
    """
    data = digits()
    with _conv_backend(batch):
        nets = train_stacked(
            runs,
            batch,
            data.x_train,
            data.y_train,
            lr=BASE_LR * batch / 32,
            width=WIDTH,
            norm_position=norm_position,
            epochs=epochs,
        )
    with torch.no_grad():
        x = _images(data.x_test)
        return tuple((m, 1.0 - accuracy(m(x), data.y_test)) for m in nets)


@lru_cache(maxsize=128)
def train_cnn(
    norm: str,
    batch: int,
    *,
    groups: int | None = None,
    norm_position: str = "before",
    epochs: int = 1,
    seed: int = 0,
) -> tuple[nn.Module, float]:
    """Train :func:`conv_net` on the digits; returns ``(model in eval mode, test error)``.

    The error is a fraction of the 450 test digits. SGD with momentum 0.9 at
    ``BASE_LR * batch / 32``; seeds fix the initialization and the order of the batches;
    incomplete last batches are dropped, so that no BatchNorm step normalizes a leftover
    batch smaller than ``batch``.
    """
    return train_cnns(
        (_run(norm, groups, seed),), batch, norm_position=norm_position, epochs=epochs
    )[0]


def difference(
    a: list[float], b: list[float], resolution: float = 0.0, paired: bool = False
) -> dict:
    """Mean of ``a`` minus mean of ``b`` and its standard error (sample stds).

    ``paired``: ``a[i]`` and ``b[i]`` come from the same seed, so the standard error is that
    of the per-seed differences, sd(a − b)/√n (same length required); otherwise the two sides
    are independent samples, sqrt(var(a)/n_a + var(b)/n_b).
    ``resolution``: the smallest step of the measured quantity (one test image's share of the
    test error); the standard error is never taken below it, since two seeds that happen to
    score the same do not prove that seeds do not matter. ``clear`` is True when the
    difference exceeds twice the standard error: a difference the seeds' spread does not
    explain. One seed per side gives no spread: never clear.
    """
    diff = float(np.mean(a) - np.mean(b))
    if min(len(a), len(b)) < 2:
        return {"diff": diff, "se": math.inf, "clear": False}
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired difference needs equal lengths, got {len(a)} and {len(b)}")
        se = float(np.std(np.subtract(a, b), ddof=1) / math.sqrt(len(a)))
    else:
        se = float(math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)))
    se = max(se, resolution)
    return {"diff": diff, "se": se, "clear": abs(diff) > 2 * se}


def judged(a: list[float], b: list[float]) -> dict:
    """``a`` against ``b``, paired by seed (same seed: same initialization of the convolutions
    and the same order of batches), judged by the course's rule
    (:func:`normedu.seeding.compare`, a difference within one test image counting for neither
    side): ``{"diff": mean of a − b, "se": its standard error, never below one test image,
    "clear": the rule finds a difference, "comparison": the SeedComparison}``."""
    c = seeding.compare(a, b, tie=_one_image())
    return {"diff": c.mean, "se": max(c.se, _one_image()), "clear": c.clear, "comparison": c}


def _one_image() -> float:
    """One test image's share of the test error (1/450 with the default split)."""
    return 1.0 / len(digits().y_test)


#: The two norms of :func:`batch_size_sweep`.
_SWEEP_NORMS = ("batchnorm", "groupnorm")


def _sweep_models(batch: int, size: ConvSize) -> tuple[tuple[nn.Module, float], ...]:
    """The sweep's runs at ``batch``, trained together: every norm, then every seed."""
    runs = tuple(_run(n, None, s) for n in _SWEEP_NORMS for s in size.seeds)
    return train_cnns(runs, batch, epochs=size.epochs)


@lru_cache(maxsize=4)
def batch_size_sweep(preset: str | None = None) -> dict:
    """Test error of the BatchNorm and the GroupNorm CNN at each batch size (same epochs).

    Returns ``{"batch_sizes", "epochs", "seeds", "groups", "batchnorm": [mean error per batch
    size], "batchnorm_all": [[error per seed] ...], "groupnorm", "groupnorm_all", "gn_minus_bn":
    [judged(...) per batch size], "crossover": see :func:`crossover`}``.
    """
    size = SIZES[preset] if preset else choose(SIZES)
    out: dict = {
        "batch_sizes": list(size.batch_sizes),
        "epochs": size.epochs,
        "seeds": list(size.seeds),
        "groups": groups_for(WIDTH),
    }
    k = len(size.seeds)
    errs = [[e for _, e in _sweep_models(b, size)] for b in size.batch_sizes]
    for i, norm in enumerate(_SWEEP_NORMS):
        per = [e[i * k : (i + 1) * k] for e in errs]
        out[norm] = [float(np.mean(p)) for p in per]
        out[f"{norm}_all"] = per
    out["gn_minus_bn"] = [
        judged(g, b) for g, b in zip(out["groupnorm_all"], out["batchnorm_all"], strict=True)
    ]
    out["crossover"] = crossover(out)
    return out


def crossover(sweep: dict) -> int | None:
    """The largest batch size up to which GroupNorm clearly beats BatchNorm at every size.

    "Clearly": GroupNorm's error lower by the course's rule over the seeds (:func:`judged`).
    None: GroupNorm does not clearly beat BatchNorm even at the smallest batch size of the sweep.
    """
    best = None
    for b, d in zip(sweep["batch_sizes"], sweep["gn_minus_bn"], strict=True):
        if not (d["clear"] and d["diff"] < 0):
            break
        best = b
    return best


@lru_cache(maxsize=4)
def group_sweep(preset: str | None = None) -> dict:
    """GroupNorm's test error against G at one batch size (:attr:`ConvSize.group_batch`).

    Returns ``{"batch", "channels", "groups": [G ...], "errors": [mean per G], "all": [[per
    seed] ...], "best": G of the lowest mean, "vs_best": [judged(G, best) per G],
    "beats_both": [G between the ends whose error is lower than both ends' by the rule]}``.
    G = 1 is LayerNorm over (C, H, W), G = channels is InstanceNorm.
    """
    size = SIZES[preset] if preset else choose(SIZES)
    runs = tuple(_run("groupnorm", g, s) for g in size.groups for s in size.seeds)
    errs = [e for _, e in train_cnns(runs, size.group_batch, epochs=size.epochs)]
    k = len(size.seeds)
    per = [errs[i * k : (i + 1) * k] for i in range(len(size.groups))]
    means = [float(np.mean(p)) for p in per]
    best = int(np.argmin(means))
    return {
        "batch": size.group_batch,
        "epochs": size.epochs,
        "seeds": list(size.seeds),
        "channels": WIDTH,
        "groups": list(size.groups),
        "errors": means,
        "all": per,
        "best": size.groups[best],
        "vs_best": [judged(p, per[best]) for p in per],
        "beats_both": [
            g
            for g, p in zip(size.groups[1:-1], per[1:-1], strict=True)
            if all(judged(p, end)["comparison"].sign < 0 for end in (per[0], per[-1]))
        ],
    }


@lru_cache(maxsize=8)
def stat_noise(batch: int, trained_at: int | None = None, n_batches: int = 200) -> dict:
    """How far a batch's statistics are from the running statistics eval mode uses.

    Takes the BatchNorm CNN trained at ``trained_at`` (default ``batch``; first seed of the
    sweep) and feeds ``n_batches`` random training batches of ``batch`` images through it in
    eval mode. At each norm layer, for each channel, the batch mean over (N, H, W) is compared
    with the running mean in units of the running standard deviation. Returns ``{"batch",
    "values_per_channel": batch * H * W, "rms": [RMS of that deviation per norm layer,
    averaged over channels], "independent": 1 / sqrt(values_per_channel)}``: the RMS the
    deviation would have if the values of a channel were independent draws.
    """
    size = choose(SIZES)
    model = _sweep_models(trained_at or batch, size)[0][0]  # BatchNorm, first seed
    layers = norm_modules(model)
    seen: list[torch.Tensor] = [torch.empty(0)] * len(layers)

    def record(i: int):
        def hook(_m, inp):  # each batch's channel means: (n_batches, C)
            seen[i] = inp[0].reshape(n_batches, batch, *inp[0].shape[1:]).mean((1, 3, 4))

        return hook

    hooks = [m.register_forward_pre_hook(record(i)) for i, m in enumerate(layers)]
    x = _images(digits().x_train)
    gen = seeding.generator(0)
    try:
        # All batches in one pass: in eval mode every image goes through the network on its
        # own, so one forward of n_batches * batch images gives each batch's activations.
        with torch.no_grad():
            model(x[torch.randint(0, len(x), (n_batches * batch,), generator=gen)])
    finally:
        for h in hooks:
            h.remove()
    rms = []
    for m, means in zip(layers, seen, strict=True):
        z = (means - m.running_mean) / torch.sqrt(m.running_var)
        rms.append(float(z.pow(2).mean(0).sqrt().mean()))
    n = batch * IMAGE * IMAGE
    return {"batch": batch, "values_per_channel": n, "rms": rms, "independent": n**-0.5}


@lru_cache(maxsize=4)
def position_comparison(norm: str = "batchnorm", preset: str | None = None) -> dict:
    """The CNN with ``norm`` before vs after the ReLU, same batch size, epochs and seeds.

    Returns ``{"batch", "epochs", "seeds", "before": [error per seed], "after": [...],
    "after_minus_before": difference(after, before, paired)}``: seed ``s`` trains both
    placements from the same seed and order of batches, so the seeds are paired.
    """
    size = SIZES[preset] if preset else choose(SIZES)
    out: dict = {
        "batch": size.position_batch,
        "epochs": size.position_epochs,
        "seeds": list(size.position_seeds),
    }
    for pos in ("before", "after"):
        runs = tuple(_run(norm, None, s) for s in size.position_seeds)
        trained = train_cnns(
            runs, size.position_batch, norm_position=pos, epochs=size.position_epochs
        )
        out[pos] = [e for _, e in trained]
    out["after_minus_before"] = difference(out["after"], out["before"], _one_image(), paired=True)
    return out
