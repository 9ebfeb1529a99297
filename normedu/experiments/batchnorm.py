"""Chapter 2 experiments: BatchNorm's training/inference modes and its failure modes.

Every runner is deterministic and cached (:func:`functools.lru_cache`), so the chapter and its
claim checks share one computation. The batch-size sweep is the scale-dependent one: its
:data:`SIZES` preset trains longer, on more batch sizes and seeds on a CUDA machine. The
demos without a batch to pool (padded sequences, a stream, a causal model) are in
:mod:`.batchnorm_sequences` and re-exported here.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from .. import seeding
from ..conventions import DEFAULT_MOMENTUM
from ..data import digits
from ..device import choose, pick_device
from ..mlp import deep_mlp
from ..nn import BatchNorm1d
from ..training import accuracy, train_epoch
from .batchnorm_sequences import causal_leak_demo, online_demo, padding_demo
from .scale import scale_experiment

__all__ = [
    "SweepSize",
    "SIZES",
    "WU_HE_2018",
    "train_mlp",
    "batch_size_sweep",
    "small_cnn",
    "eval_mode_demo",
    "distribution_shift",
    "padding_demo",
    "online_demo",
    "syncbn_simulation",
    "causal_leak_demo",
    "running_average_trace",
    "expected_local_var_ratio",
    "rms_mean_error",
    "recalibrate",
    "calibration_demo",
]


@dataclass(frozen=True)
class SweepSize:
    """Batch-size sweep sizes: batch sizes, epochs per run, seeds averaged, MLP depth/width."""

    batch_sizes: tuple[int, ...]
    epochs: int
    seeds: tuple[int, ...]
    depth: int
    width: int


SIZES = {
    # One epoch keeps the chapter under a minute on a laptop CPU; batch 2 alone is 673 steps.
    "cpu": SweepSize((2, 4, 8, 16, 32), 1, (0,), 3, 64),
    # Sized to fit a short GPU lease (about 80 s; tiny steps cost ~5 ms each on a GPU).
    "cuda": SweepSize((2, 4, 8, 16, 32, 64, 128), 2, (0, 1), 3, 64),
}

#: ResNet-50 on ImageNet, top-1 validation error (%) vs images per GPU, from Wu & He,
#: "Group Normalization", ECCV 2018, Figure 1 / Table 2 (BN 23.6 at 32, 34.7 at 2).
WU_HE_2018 = {"batchnorm": {32: 23.6, 2: 34.7}}

#: Learning rate per 32 samples; scaled linearly with the batch size (as Wu & He do).
BASE_LR = 0.05


@lru_cache(maxsize=64)
def train_mlp(
    norm: str, batch: int, epochs: int = 2, seed: int = 0, depth: int = 3, width: int = 64
):
    """Train a ReLU MLP on digits with SGD (momentum 0.9, lr = 0.05 * batch / 32).

    Returns ``(model, test_error)``: the model in eval mode and its error on the 450 test
    digits (a fraction in [0, 1]). Incomplete last batches are dropped (a batch of 1 cannot be
    batch-normalized in training mode).
    """
    dev = pick_device()
    data = digits().to(dev)
    seeding.manual_seed(seed)
    model = deep_mlp(64, width, 10, depth, norm=norm, act="relu", seed=seed).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR * batch / 32, momentum=0.9)
    gen = seeding.generator(seed + 1)
    for _ in range(epochs):
        train_epoch(model, opt, data.x_train, data.y_train, batch, gen, drop_last=True)
    model.eval()
    with torch.no_grad():
        err = 1.0 - accuracy(model(data.x_test), data.y_test)
    return model, err


@lru_cache(maxsize=4)
def batch_size_sweep(
    norms: tuple[str, ...] = ("batchnorm", "groupnorm", "layernorm"), preset: str | None = None
) -> dict:
    """Test error vs training batch size for each norm (same epochs, linearly scaled lr).

    ``preset`` picks :data:`SIZES` explicitly (default: :func:`normedu.device.choose`).

    Returns ``{"batch_sizes": [...], "epochs": int, "seeds": [...], "<norm>": [mean error per
    batch size], "<norm>_all": [[error per seed] per batch size]}``.
    """
    size = SIZES[preset] if preset else choose(SIZES)
    out: dict = {
        "batch_sizes": list(size.batch_sizes),
        "epochs": size.epochs,
        "seeds": list(size.seeds),
    }
    # tqdm.std writes a text bar to stderr (the book removes stderr); tqdm.auto would draw an
    # ipywidget that a static page shows as raw JSON.
    from tqdm.std import tqdm

    bar = tqdm(
        total=len(norms) * len(size.batch_sizes) * len(size.seeds),
        desc="batch-size sweep",
        leave=False,
        file=sys.stderr,
    )
    for norm in norms:
        per = []
        for b in size.batch_sizes:
            errs = []
            for s in size.seeds:
                errs.append(train_mlp(norm, b, size.epochs, s, size.depth, size.width)[1])
                bar.update()
            per.append(errs)
        out[norm] = [float(np.mean(p)) for p in per]
        out[f"{norm}_all"] = per
    bar.close()
    return out


def small_cnn(seed: int = 0) -> nn.Sequential:
    """A 3-conv CNN for 8x8 digits: (N, 1, 8, 8) -> (N, 10) logits, BatchNorm2d after each conv.

    Feature maps shrink 8x8 -> 4x4 -> 2x2, so in training mode at batch 1 the last BatchNorm
    has only 4 values per channel to take statistics from.
    """
    seeding.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1, stride=2),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, stride=2),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, 10),
    )


@lru_cache(maxsize=2)
def eval_mode_demo(seed: int = 0) -> dict:
    """Train the small CNN, then evaluate it in the right and the wrong mode.

    Returns test accuracies (fractions): ``eval_full`` (eval mode, one batch of 450),
    ``eval_batch1`` (eval mode, one image at a time: identical predictions),
    ``train_batch1`` (training mode, one image at a time: BN normalizes each image with its own
    8x8 spatial statistics), ``train_batch8`` (training mode, batches of 8),
    ``train_sorted8`` (training mode, batches of 8 consecutive images sorted by digit, so most
    batches hold one digit), and
    ``eval_after`` (eval mode again after the training-mode passes, whose running-average updates
    have overwritten the buffers), plus ``max_logit_diff_eval`` (max |logit difference| between
    eval mode one-at-a-time and batched).
    """
    data = digits()
    xtr, xte = data.x_train.reshape(-1, 1, 8, 8), data.x_test.reshape(-1, 1, 8, 8)
    model = small_cnn(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = seeding.generator(seed + 1)
    for _ in range(3):
        train_epoch(model, opt, xtr, data.y_train, 32, gen, drop_last=True)

    def acc(logits):
        return accuracy(logits, data.y_test)

    out = {}
    with torch.no_grad():
        model.eval()
        full = model(xte)
        one = torch.cat([model(xte[i : i + 1]) for i in range(len(xte))])
        out["eval_full"], out["eval_batch1"] = acc(full), acc(one)
        out["max_logit_diff_eval"] = float((full - one).abs().max())
        model.train()  # the mistake: inference in training mode
        out["train_batch1"] = acc(torch.cat([model(xte[i : i + 1]) for i in range(len(xte))]))
        out["train_batch8"] = acc(torch.cat([model(xte[i : i + 8]) for i in range(0, len(xte), 8)]))
        # Batches that are not a random sample: 8 consecutive images sorted by digit, so most
        # batches hold one digit.
        order = torch.argsort(data.y_test, stable=True)
        sorted_logits = torch.cat([model(xte[order[i : i + 8]]) for i in range(0, len(xte), 8)])
        out["train_sorted8"] = float((sorted_logits.argmax(1) == data.y_test[order]).float().mean())
        model.eval()
        out["eval_after"] = acc(model(xte))
    return out


@lru_cache(maxsize=8)
def distribution_shift(contrast: float = 0.5, brightness: float = 1.0, seed: int = 0) -> dict:
    """Test accuracy when test inputs are ``contrast * x + brightness`` (standardized pixels).

    Uses the batch-32 MLPs of the sweep (seed ``seed``). Returns fractions: ``bn_clean``,
    ``bn_shift`` (eval mode, running statistics from the clean training data),
    ``bn_recalibrated`` (running statistics re-estimated on the shifted test inputs, "AdaBN" of
    Li et al. 2016/2018), ``ln_clean`` and ``ln_shift``; and ``recal_logit_diff``: the largest
    |logit difference| between the BN model recalibrated on the shifted inputs, applied to
    them, and the BN model recalibrated on the clean test inputs, applied to those;
    ``bn_recal_clean``: the accuracy of that clean-recalibrated model on the clean inputs (it
    uses the test set's own statistics: not the trained model of ``bn_clean``); and
    ``ln_std_ratio``: ``[min, median, max]`` over the test digits of the per-sample standard
    deviation (over features) of LayerNorm's first-layer pre-activations, shifted over clean.

    Why that difference is rounding only: the first layer is linear, so the shift turns every
    first-layer pre-activation h into ``contrast * h + o`` with one offset ``o`` per feature;
    BatchNorm's per-feature statistics, re-estimated, subtract ``o`` and divide out
    ``contrast`` exactly (up to eps). LayerNorm's per-sample statistics subtract only the mean
    of ``o`` over the features, and their standard deviation is that of ``contrast * h + o``,
    which the per-feature offsets dominate: it is not ``contrast`` times the clean one.
    """
    size = choose(SIZES)
    data = digits().to(pick_device())
    x_shift = contrast * data.x_test + brightness
    res = {}
    # Train (or fetch from the cache) outside no_grad: training needs autograd.
    models = {
        n: train_mlp(n, 32, size.epochs, seed, size.depth, size.width)
        for n in ("batchnorm", "layernorm")
    }
    with torch.no_grad():
        for norm, key in (("batchnorm", "bn"), ("layernorm", "ln")):
            model, err = models[norm]
            res[f"{key}_clean"] = 1 - err
            res[f"{key}_shift"] = float((model(x_shift).argmax(1) == data.y_test).float().mean())
        on_shift = recalibrate(models["batchnorm"][0], x_shift)(x_shift)
        on_clean = recalibrate(models["batchnorm"][0], data.x_test)(data.x_test)
        res["bn_recalibrated"] = float((on_shift.argmax(1) == data.y_test).float().mean())
        res["recal_logit_diff"] = float((on_shift - on_clean).abs().max())
        res["bn_recal_clean"] = float((on_clean.argmax(1) == data.y_test).float().mean())
        first = models["layernorm"][0][0]  # the first Linear, before the first LayerNorm
        ratio = first(x_shift).std(dim=1) / first(data.x_test).std(dim=1)
        res["ln_std_ratio"] = [float(ratio.min()), float(ratio.median()), float(ratio.max())]
    return res


def recalibrate(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """A copy of ``model`` whose BatchNorm running statistics are re-estimated on ``x``.

    The weights stay; every :class:`normedu.nn.BatchNorm1d` gets momentum 1.0 for one
    training-mode forward pass over all of ``x`` (N, features), so its running mean and
    (unbiased) variance become exactly the statistics of ``x`` under the final weights.
    This is "precise BN" / calibration (Wu & Johnson 2021); on data from a new domain it is
    AdaBN (Li et al. 2016). Returns the copy in eval mode; ``model`` is not changed.
    """
    new = _clone(model)
    for m in new.modules():
        if isinstance(m, BatchNorm1d):
            m.momentum = 1.0
    new.train()
    with torch.no_grad():
        new(x)
    return new.eval()


@lru_cache(maxsize=4)
def calibration_demo(
    momenta: tuple[float, ...] = (0.1, 0.9), batch: int = 4, seed: int = 0
) -> list[dict]:
    """Test error of BN MLPs trained with several BN momenta, before and after calibration.

    Each run trains the sweep's MLP (3 hidden layers of 64, ReLU, one epoch of SGD with
    momentum 0.9 at ``batch``) with every BatchNorm's running-average momentum (PyTorch's
    convention: the weight of the new batch) set to one of ``momenta``. A high momentum makes
    the running statistics follow the last few small batches. Returns rows ``{"momentum",
    "error_running", "error_calibrated"}``: test error (fraction) in eval mode with the
    running statistics from training, and after :func:`recalibrate` on the training set.
    """
    dev = pick_device()
    data = digits().to(dev)
    rows = []
    for mom in momenta:
        if mom == DEFAULT_MOMENTUM:
            # Exactly train_mlp's run (same seed, order, rate, one epoch): take it from the
            # cache the batch-size sweep filled instead of training it a second time.
            # recalibrate() below works on a copy, so the cached model is not changed.
            model = train_mlp("batchnorm", batch, 1, seed, 3, 64)[0]
        else:
            seeding.manual_seed(seed)
            model = deep_mlp(64, 64, 10, 3, norm="batchnorm", act="relu", seed=seed).to(dev)
            for m in model.modules():
                if isinstance(m, BatchNorm1d):
                    m.momentum = mom
            opt = torch.optim.SGD(model.parameters(), lr=BASE_LR * batch / 32, momentum=0.9)
            gen = seeding.generator(seed + 1)
            train_epoch(model, opt, data.x_train, data.y_train, batch, gen, drop_last=True)
            model.eval()
        cal = recalibrate(model, data.x_train)
        with torch.no_grad():
            rows.append(
                {
                    "momentum": float(mom),
                    "error_running": 1.0 - accuracy(model(data.x_test), data.y_test),
                    "error_calibrated": 1.0 - accuracy(cal(data.x_test), data.y_test),
                }
            )
    return rows


def _clone(model: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(model)


@lru_cache(maxsize=2)
def syncbn_simulation(
    per_device: tuple[int, ...] = (2, 4, 8, 16, 32, 64),
    devices: int = 8,
    channels: int = 64,
    trials: int = 200,
    seed: int = 0,
) -> dict:
    """Local BatchNorm vs SyncBN statistics, simulated on one machine.

    Each trial draws a global batch of ``devices * m`` values per channel from N(mu_c, s_c^2)
    (known population) and splits it into ``devices`` shards of ``m``.

    - Local BN: each shard uses its own mean and biased variance.
    - SyncBN: the two forward all-reduces of :class:`normedu.distributed.SyncBatchNorm`: the
      shards sum ``(count, sum)``, which gives the global mean, then the squared deviations
      from that mean, which give the global biased variance (two passes: no cancellation of
      a sum of squares against the squared mean). We compute them that way and compare with
      the direct statistics of the concatenated batch (``sync_max_diff``, float64 rounding).

    Returns per ``m``: ``local_var_ratio`` (mean of local variance / population variance;
    theory (m-1)/m), ``sync_var_ratio`` (theory (Dm-1)/(Dm)), ``local_mean_err`` and
    ``sync_mean_err`` (RMS error of the mean estimate in population stds; theory 1/sqrt(m) and
    1/sqrt(Dm)), plus ``sync_max_diff`` and ``allreduce_floats`` (the forward's floats per
    layer: count and C sums, then C squared deviations, 2 * channels + 1).
    """
    gen = seeding.generator(seed)
    mu = torch.randn(channels, generator=gen, dtype=torch.float64) * 2
    sd = torch.rand(channels, generator=gen, dtype=torch.float64) * 2 + 0.5
    res: dict = {
        "per_device": list(per_device),
        "devices": devices,
        "local_var_ratio": [],
        "sync_var_ratio": [],
        "local_mean_err": [],
        "sync_mean_err": [],
    }
    worst = 0.0
    for m in per_device:
        x = mu + sd * torch.randn(trials, devices, m, channels, generator=gen, dtype=torch.float64)
        local_mean = x.mean(2)
        local_var = x.var(2, unbiased=False)
        # SyncBN's forward: all-reduce 1 sums each device's count and sum (the global mean),
        # all-reduce 2 each device's squared deviations from that global mean.
        cnt = devices * m
        sync_mean = x.sum(2).sum(1) / cnt
        sync_var = ((x - sync_mean[:, None, None]) ** 2).sum(2).sum(1) / cnt
        direct = x.reshape(trials, cnt, channels)
        worst = max(
            worst,
            float((sync_mean - direct.mean(1)).abs().max()),
            float((sync_var - direct.var(1, unbiased=False)).abs().max()),
        )
        res["local_var_ratio"].append(float((local_var / sd**2).mean()))
        res["sync_var_ratio"].append(float((sync_var / sd**2).mean()))
        res["local_mean_err"].append(float((((local_mean - mu) / sd) ** 2).mean().sqrt()))
        res["sync_mean_err"].append(float((((sync_mean - mu) / sd) ** 2).mean().sqrt()))
    res["sync_max_diff"] = worst
    res["allreduce_floats"] = 2 * channels + 1
    return res


def expected_local_var_ratio(m: int) -> float:
    """E[biased variance of m draws] / population variance = (m - 1) / m: the course's one copy.

    The biased variance (divide by m) of m independent draws underestimates the population
    variance by this factor on average (Bessel's correction, ``m / (m - 1)``, undoes it). It is
    the theory line of :func:`syncbn_simulation` for a per-device batch m (local BN) and for
    D * m (SyncBN over D devices), and of its plot.
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    return (m - 1) / m


def rms_mean_error(m: int) -> float:
    """RMS error of the mean of m draws, in population standard deviations: 1 / sqrt(m)."""
    return 1 / math.sqrt(m)


def running_average_trace(
    momentum: float = DEFAULT_MOMENTUM, steps: int = 60, batch: int = 16, feature: int = 36
) -> dict:
    """Feed batches of digits through :class:`normedu.nn.BatchNorm1d` and trace one feature.

    Returns ``batch_mean`` and ``running_mean`` ((steps,) arrays for pixel ``feature``),
    ``true_mean`` (its mean over the training set), ``momentum``, and ``torch_max_diff``: the
    largest difference between our running buffers and ``torch.nn.BatchNorm1d``'s after the
    same batches (both mean and variance buffers).
    """
    data = digits()
    gen = seeding.generator(0)
    ours, ref = BatchNorm1d(64, momentum=momentum), nn.BatchNorm1d(64, momentum=momentum)
    bm, rm = [], []
    with torch.no_grad():
        for _ in range(steps):
            idx = torch.randint(0, len(data.x_train), (batch,), generator=gen)
            xb = data.x_train[idx]
            ours(xb)
            ref(xb)
            bm.append(float(xb[:, feature].mean()))
            rm.append(float(ours.running_mean[feature]))
    diff = max(
        float((ours.running_mean - ref.running_mean).abs().max()),
        float((ours.running_var - ref.running_var).abs().max()),
    )
    return {
        "batch_mean": np.array(bm),
        "running_mean": np.array(rm),
        "true_mean": float(data.x_train[:, feature].mean()),
        "momentum": momentum,
        "torch_max_diff": diff,
    }


#: Name of the stored full-size sweep (``results/gpu/<name>.json``, see :mod:`normedu.results`).
STORED_SWEEP = "bn_batch_size_sweep"


@scale_experiment(STORED_SWEEP)
def sweep_for_store(preset: str) -> dict:
    """The batch-size sweep at ``preset`` ("cpu"/"cuda") as JSON-serialisable data.

    ``python -m normedu.experiments --store --only bn_batch_size_sweep`` on a CUDA machine
    writes ``results/gpu/bn_batch_size_sweep.json``, which the chapter shows beside its CPU run.
    """
    if preset not in SIZES:
        raise ValueError(f"preset must be one of {sorted(SIZES)}, got {preset!r}")
    return {**batch_size_sweep(preset=preset), "preset": preset}


def stored_sweep() -> dict | None:
    """The stored full-size sweep ``{"provenance", "data"}``, or None if never measured."""
    from ..results import load_stored

    return load_stored(STORED_SWEEP)
