"""Chapter 1 experiments: activation drift and what normalization does about it.

Every runner is deterministic (fixed seeds) and cached with :func:`functools.lru_cache`, so a
chapter and its claim checks can call it twice at the cost of once. Results are plain
dataclasses and dicts; :mod:`normedu.plots.drift` draws them.

Size presets (:data:`SIZES`): the reduced "cpu" preset finishes the whole chapter in seconds
on a laptop; the "cuda" preset trains deeper, wider nets for longer.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import seeding
from ..data import digits
from ..device import choose, pick_device
from ..mlp import deep_mlp, hidden_linears, norm_layers
from ..stats import StatsRecorder
from ..training import accuracy

__all__ = [
    "SIZES",
    "DriftSize",
    "compounding",
    "linear_scale_vs_depth",
    "init_stats",
    "init_gain_sweep",
    "norm_output_stats",
    "TrainRun",
    "train_digits",
    "convergence",
    "fragility",
    "relu_second_moment",
    "tanh_second_moment",
    "preactivation_std_profile",
    "initial_loss",
]


@dataclass(frozen=True)
class DriftSize:
    """Sizes of the chapter-1 experiments.

    - depth, width: the deep MLP at initialization (Karpathy-style histograms).
    - train_depth, train_width, steps, batch: the nets trained on digits.
    - probe_every: steps between loss-landscape probes (Santurkar et al. 2018).
    - lin_width, lin_batch, lin_depth: the linear net of the compounding plot.
    """

    depth: int
    width: int
    train_depth: int
    train_width: int
    steps: int
    batch: int
    probe_every: int
    lin_width: int
    lin_batch: int
    lin_depth: int


SIZES = {
    "cpu": DriftSize(50, 100, 20, 64, 120, 64, 20, 256, 256, 100),
    "cuda": DriftSize(50, 512, 50, 256, 2000, 128, 100, 4096, 1024, 100),
}


def compounding(gains=(0.95, 1.05), depths=(50, 100)) -> dict[tuple[float, int], float]:
    """``{(g, L): g**L}``: the scale after L layers that each multiply it by g (exact float)."""
    return {(float(g), int(L)): float(g) ** int(L) for g in gains for L in depths}


@lru_cache(maxsize=8)
def linear_scale_vs_depth(
    gains: tuple[float, ...] = (0.9, 0.95, 1.0, 1.05, 1.1), seed: int = 0
) -> dict[str, np.ndarray]:
    """Measured activation std per layer of a deep *linear* net with weights N(0, g^2/width).

    For a wide layer, ``std(W x) ~= g * std(x)``, so the std after L layers is about ``g**L``.
    Returns ``{"depth": (L+1,) 0..L, "g=<g>": (L+1,) std / std of the input, ...}``.
    """
    size = choose(SIZES)
    gen = seeding.generator(seed)
    d, n, depth = size.lin_width, size.lin_batch, size.lin_depth
    x0 = torch.randn(n, d, generator=gen)
    out: dict[str, np.ndarray] = {"depth": np.arange(depth + 1)}
    for g in gains:
        x = x0.clone()
        stds = [1.0]
        s0 = float(x0.std())
        for _ in range(depth):
            w = torch.randn(d, d, generator=gen) * (g / math.sqrt(d))
            x = x @ w.T
            stds.append(float(x.std()) / s0)
        out[f"g={g:g}"] = np.array(stds)
    return out


@lru_cache(maxsize=64)
def init_stats(norm: str = "none", act: str = "tanh", gain: float | None = None, seed: int = 0):
    """Per-layer activation and gradient statistics of a deep MLP at initialization.

    A batch of 512 digits goes forward, the cross-entropy with the true labels goes backward,
    and a :class:`normedu.stats.StatsRecorder` records every activation layer.
    Returns the list of :class:`normedu.stats.LayerStats` (one per hidden layer).
    """
    size = choose(SIZES)
    dev = pick_device()
    data = digits().to(dev)
    model = deep_mlp(64, size.width, 10, size.depth, norm=norm, act=act, gain=gain, seed=seed)
    model.to(dev).train()
    x, y = data.x_train[:512], data.y_train[:512]
    with StatsRecorder(model) as rec:
        F.cross_entropy(model(x), y).backward()
    return rec.records


@lru_cache(maxsize=4)
def init_gain_sweep(
    gains: tuple[float, ...] = (0.5, 1.0, 5 / 3, 3.0),
    norms: tuple[str, ...] = ("none", "batchnorm"),
) -> list[dict]:
    """Last-hidden-layer std and saturation of a deep tanh MLP for several init gains.

    Returns rows ``{"norm", "gain", "last_std", "last_saturation", "first_grad_norm",
    "last_grad_norm"}``: without a norm the result hinges on the gain; with one it does not.
    """
    rows = []
    for norm in norms:
        for g in gains:
            rec = init_stats(norm, "tanh", float(g))
            rows.append(
                {
                    "norm": norm,
                    "gain": float(g),
                    "last_std": rec[-1].act_std,
                    "last_saturation": rec[-1].saturation,
                    "first_grad_norm": rec[0].grad_norm,
                    "last_grad_norm": rec[-1].grad_norm,
                }
            )
    return rows


@lru_cache(maxsize=8)
def norm_output_stats(norm: str = "batchnorm", gain: float = 3.0, seed: int = 0):
    """Per-layer statistics of the *norm layers'* outputs of the deep tanh MLP at init.

    The network and batch of :func:`init_stats` (forward only); a
    :class:`normedu.stats.StatsRecorder` records every module of
    :func:`normedu.mlp.norm_layers` instead of the activations. Returns the list of
    :class:`normedu.stats.LayerStats` (one per norm layer, first block first).
    """
    size = choose(SIZES)
    dev = pick_device()
    data = digits().to(dev)
    model = deep_mlp(64, size.width, 10, size.depth, norm=norm, act="tanh", gain=gain, seed=seed)
    model.to(dev).train()
    norms = set(map(id, norm_layers(model)))
    with torch.no_grad(), StatsRecorder(model, select=lambda n, m: id(m) in norms) as rec:
        model(data.x_train[:512])
    return rec.records


@dataclass
class TrainRun:
    """One training run on digits.

    - config: the arguments of :func:`train_digits`.
    - loss: (steps,) training loss per step (NaN/inf once it diverged).
    - test_acc: accuracy on the 450 held-out digits in eval mode (NaN if diverged).
    - diverged: True if the loss became non-finite.
    - update_ratios: (steps, hidden layers) ``log10(std(lr * grad) / std(w))`` of every hidden
      Linear's weight at each step, before the update (Karpathy's update-to-data ratio;
      NaN after a divergence). With plain SGD the update is exactly ``-lr * grad``.
    - probes: loss-landscape probes, one dict per probe step with ``step``,
      ``loss_range`` (max - min loss along the gradient direction over the probed step
      sizes) and ``grad_lipschitz`` (max over step sizes of
      ||grad(w - eta*g) - grad(w)|| / ||eta*g||: the "effective beta-smoothness").
    """

    config: dict
    loss: np.ndarray
    test_acc: float
    diverged: bool
    probes: list[dict] = field(default_factory=list)
    update_ratios: np.ndarray | None = None


def _flat_grad(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _probe(model: nn.Module, x, y, lr: float, etas=(0.25, 0.5, 1.0, 2.0, 4.0)) -> dict:
    """Santurkar et al. (2018)-style probe along the current gradient direction on batch (x, y).

    Moves the weights to ``w - eta*lr*g`` for each multiplier in ``etas``, records the loss
    and gradient there, and restores the weights. Runs in the model's current mode.
    """
    params = list(model.parameters())
    saved = [p.detach().clone() for p in params]
    # BatchNorm's running buffers must not be touched by the probe.
    buffers = [b.detach().clone() for b in model.buffers()]
    model.zero_grad()
    loss0 = F.cross_entropy(model(x), y)
    loss0.backward()
    g0 = _flat_grad(model).clone()
    grads = [p.grad.detach().clone() for p in params]
    losses, ratios = [loss0.item()], []
    for eta in etas:
        with torch.no_grad():
            for p, w, g in zip(params, saved, grads, strict=False):
                p.copy_(w - eta * lr * g)
        model.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        g1 = _flat_grad(model)
        losses.append(loss.item())
        step = eta * lr * float(g0.norm())
        ratios.append(float((g1 - g0).norm()) / step if step > 0 else float("nan"))
    with torch.no_grad():
        for p, w in zip(params, saved, strict=False):
            p.copy_(w)
        for b, v in zip(model.buffers(), buffers, strict=False):
            b.copy_(v)
    model.zero_grad()
    finite = [v for v in losses if math.isfinite(v)]
    return {
        "loss_range": (max(finite) - min(finite)) if finite else float("nan"),
        "grad_lipschitz": max(ratios) if ratios else float("nan"),
    }


@lru_cache(maxsize=64)
def train_digits(
    norm: str = "none",
    act: str = "relu",
    lr: float = 0.1,
    gain: float | None = None,
    clip: float | None = None,
    probe: bool = False,
    seed: int = 0,
) -> TrainRun:
    """Train a deep MLP on the digits with plain SGD (sizes from :data:`SIZES`).

    Inputs: ``norm`` and ``act`` as in :func:`normedu.mlp.deep_mlp`; ``lr`` the SGD learning
    rate; ``gain`` the init gain (None: the activation's standard gain); ``clip`` a maximum
    global gradient norm (``torch.nn.utils.clip_grad_norm_``) or None; ``probe`` whether to run
    the loss-landscape probe every ``probe_every`` steps; ``seed`` for init and batches.
    Training stops early (loss padded with NaN) once the loss is non-finite.
    """
    size = choose(SIZES)
    dev = pick_device()
    data = digits().to(dev)
    seeding.manual_seed(seed)
    model = deep_mlp(
        64, size.train_width, 10, size.train_depth, norm=norm, act=act, gain=gain, seed=seed
    )
    model.to(dev)
    # Plain SGD written out: one fused call per step, the same arithmetic as torch.optim.SGD
    # without momentum (p += -lr * grad), without the optimizer's per-step bookkeeping.
    params = list(model.parameters())
    gen = seeding.generator(seed + 1)
    losses = np.full(size.steps, np.nan)
    weights = [m.weight for m in hidden_linears(model)]
    # Layers grouped by weight shape: one stacked std per group and step, instead of four
    # small tensor ops and two conversions per layer (the per-op overhead dominated).
    by_shape: dict[tuple, list[int]] = {}
    for i, w in enumerate(weights):
        by_shape.setdefault(tuple(w.shape), []).append(i)
    ratios = torch.full((size.steps, len(weights)), float("nan"), dtype=torch.float64)
    probes = []
    diverged = False
    for step in range(size.steps):
        idx = torch.randint(0, len(data.x_train), (size.batch,), generator=gen)
        x, y = data.x_train[idx], data.y_train[idx]
        if probe and step % size.probe_every == 0:
            probes.append({"step": step, **_probe(model, x, y, lr)})
        loss = F.cross_entropy(model(x), y)
        losses[step] = loss.item()
        if not math.isfinite(losses[step]):
            diverged = True
            break
        for p in params:
            p.grad = None
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        with torch.no_grad():
            for idx in by_shape.values():
                g = torch.stack([weights[i].grad for i in idx]).flatten(1).std(dim=1)
                w = torch.stack([weights[i] for i in idx]).flatten(1).std(dim=1)
                ratios[step, idx] = (lr * g / w).double()
        with torch.no_grad():
            torch._foreach_add_(params, [p.grad for p in params], alpha=-lr)
    acc = float("nan")
    if not diverged:
        model.eval()
        with torch.no_grad():
            acc = accuracy(model(data.x_test), data.y_test)
    config = {"norm": norm, "act": act, "lr": lr, "gain": gain, "clip": clip, "seed": seed}
    return TrainRun(
        config=config,
        loss=losses,
        test_acc=acc,
        diverged=diverged,
        probes=probes,
        update_ratios=np.log10(ratios.numpy()),
    )


def convergence(
    norms: tuple[str, ...] = ("none", "batchnorm", "layernorm"),
    acts: tuple[str, ...] = ("tanh", "relu"),
    lr: float = 0.1,
) -> dict[tuple[str, str], TrainRun]:
    """``{(act, norm): TrainRun}`` at one shared learning rate, with landscape probes."""
    keys = [(a, n) for a in acts for n in norms]
    return {(a, n): train_digits(n, a, lr, probe=True) for a, n in _progress(keys, "convergence")}


def _progress(items, desc: str):
    """Iterate with a text progress bar on stderr (the book removes stderr from its pages).

    tqdm.std rather than tqdm.auto: in a notebook tqdm.auto draws an ipywidget, which a static
    page shows as raw JSON.
    """
    from tqdm.std import tqdm

    return tqdm(items, desc=desc, leave=False, file=sys.stderr)


#: The fragility demonstrations: (label, train_digits kwargs). Deep ReLU nets without a norm.
#: The Kaiming lr-0.1 row asks for the probes so that it is the cached run of
#: :func:`convergence` (probing restores the weights and buffers, so the training is the same).
FRAGILITY = (
    ("no norm, gain 1 (too small), lr 0.1", dict(norm="none", gain=1.0, lr=0.1)),
    ("no norm, Kaiming gain, lr 0.1", dict(norm="none", lr=0.1, probe=True)),
    ("no norm, Kaiming gain, lr 1.0", dict(norm="none", lr=1.0)),
    ("no norm, Kaiming gain, lr 1.0, clip 1", dict(norm="none", lr=1.0, clip=1.0)),
    ("no norm, Kaiming gain, lr 0.3, clip 1", dict(norm="none", lr=0.3, clip=1.0)),
    ("BatchNorm, gain 1, lr 1.0", dict(norm="batchnorm", gain=1.0, lr=1.0)),
    ("BatchNorm, Kaiming gain, lr 0.3", dict(norm="batchnorm", lr=0.3)),
)


def fragility() -> list[dict]:
    """Rows ``{"setting", "final_loss", "test_acc", "diverged"}`` for :data:`FRAGILITY`.

    ``final_loss`` is the mean of the last 20 recorded losses (inf if diverged).
    """
    rows = []
    for label, kw in _progress(FRAGILITY, "fragility"):
        run = train_digits(act="relu", **kw)
        tail = run.loss[np.isfinite(run.loss)][-20:]
        rows.append(
            {
                "setting": label,
                "final_loss": float("inf") if run.diverged else float(tail.mean()),
                "test_acc": run.test_acc,
                "diverged": run.diverged,
            }
        )
    return rows


# --------------------------------------------------------------------------- init by variance


@lru_cache(maxsize=4)
def _hermegauss(n: int) -> tuple[np.ndarray, np.ndarray]:
    # Computing the nodes is an eigenvalue problem: do it once per n, not once per call.
    return np.polynomial.hermite_e.hermegauss(n)


def _gauss_hermite_mean(fn, n: int = 200) -> float:
    """``E[fn(z)]`` for ``z ~ N(0, 1)`` by Gauss-Hermite quadrature (exact for polynomials)."""
    nodes, weights = _hermegauss(n)
    return float(np.sum(weights * fn(nodes)) / math.sqrt(2 * math.pi))


def relu_second_moment(var: float = 1.0) -> float:
    """``E[relu(z)^2]`` for ``z ~ N(0, var)``, by quadrature (the closed form is ``var / 2``)."""
    s = math.sqrt(var)
    return _gauss_hermite_mean(lambda z: np.maximum(s * z, 0.0) ** 2)


def tanh_second_moment(var: float = 1.0) -> float:
    """``E[tanh(z)^2]`` for ``z ~ N(0, var)``, by quadrature (no closed form; about 0.394)."""
    s = math.sqrt(var)
    return _gauss_hermite_mean(lambda z: np.tanh(s * z) ** 2)


@lru_cache(maxsize=32)
def preactivation_std_profile(
    act: str, gain: float, depth: int = 50, width: int = 256, batch: int = 256, nets: int = 4
) -> np.ndarray:
    """Std of the pre-activation of each layer of a plain deep net at initialization.

    ``z_0 ~ N(0, 1)`` of shape ``(batch, width)``; then ``depth`` bias-free layers
    ``h_{l-1} = act(z_{l-1})``, ``z_l = h_{l-1} W_l^T`` with ``W_l ~ N(0, gain^2 / width)``;
    no normalization. The variance of each ``z_l`` is averaged over ``nets`` independently
    drawn networks (seeds 0..nets-1), because the derivation predicts the *expected* variance;
    one finite-width net wanders around it by a random factor.
    Returns ``(depth + 1,)``: index ``l`` is ``sqrt(mean variance of z_l)`` (index 0 about 1).
    """
    fn = {"relu": torch.relu, "tanh": torch.tanh, "linear": lambda t: t}[act]
    var = np.zeros(depth + 1)
    for seed in range(nets):
        gen = seeding.generator(seed)
        z = torch.randn(batch, width, generator=gen)
        var[0] += float(z.var())
        for layer in range(1, depth + 1):
            w = torch.randn(width, width, generator=gen) * (gain / math.sqrt(width))
            z = fn(z) @ w.T
            var[layer] += float(z.var())
    return np.sqrt(var / nets)


@lru_cache(maxsize=16)
def initial_loss(
    norm: str = "none",
    act: str = "relu",
    gain: float | None = None,
    head_gain: float = 0.1,
    seed: int = 0,
) -> float:
    """Cross-entropy of the untrained digits MLP (training sizes) on 512 training digits.

    ``head_gain`` is the init gain of the output layer. The MLP's default, 0.1, keeps the
    logits small so the first softmax is near uniform and the loss near ``ln(10)``; a larger
    head gain makes confident, random guesses and an initial loss well above it. ``seed``: the
    network's initialization.
    """
    size = choose(SIZES)
    data = digits()
    model = deep_mlp(
        64, size.train_width, 10, size.train_depth, norm=norm, act=act, gain=gain, seed=seed
    )
    with torch.no_grad():
        model[-1].weight.mul_(head_gain / 0.1)
    x, y = data.x_train[:512], data.y_train[:512]
    with torch.no_grad():
        return float(F.cross_entropy(model(x), y))
