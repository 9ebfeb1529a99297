"""Pre-Norm vs Post-Norm: gradient norms at initialization and training stability at depth.

Two experiments on :class:`normedu.transformer.TinyGPT` stacks and the synthetic tasks of
:mod:`normedu.sequence_tasks`:

- :func:`init_grad_norms`: for each depth and placement, the gradient norm of every block's
  second FFN matrix (``mlp.fc2``, the W2 of Xiong et al., 2020, Fig. 3) at initialization,
  averaged over a few seeds.
- :func:`train_stability`: Post-LN and Pre-LN stacks trained with Adam at a high learning
  rate, with and without linear learning-rate warm-up; which ones train and which stall.

A third, the paper-width gradient check at init (:func:`wide_check`, reference stack against
TinyGPT at Xiong et al.'s width), lives in :mod:`.prepost_width`; its names are re-exported
here.

All are cached per preset (or size), so the chapter and its claim checks share one run.
``SIZES["cpu"]`` finishes in seconds; ``SIZES["cuda"]`` is the full size that ``python -m
normedu.experiments --store`` runs on a GPU.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..device import choose, pick_device, preset_name
from .prepost_width import (
    SWITCHES,
    WIDE,
    WideCheck,
    WideProfile,
    WideSize,
    encoder_grad_profile,
    tinygpt_grad_profile,
    wide_profiles,
)
from .scale import scale_experiment, threads

__all__ = [
    "PrePostSize",
    "SIZES",
    "InitGradNorms",
    "TrainRun",
    "StabilityResult",
    "init_grad_norms",
    "train_stability",
    "lr_at",
    "wide_check",
    # from prepost_width, where the paper-width check lives:
    "WideSize",
    "WIDE",
    "SWITCHES",
    "WideProfile",
    "WideCheck",
    "encoder_grad_profile",
    "tinygpt_grad_profile",
    "wide_profiles",
]


@dataclass(frozen=True)
class PrePostSize:
    """Sizes of both experiments.

    Gradient norms at init: ``depths`` (layers), ``d_model``, ``n_heads``, ``vocab``,
    ``n_items`` (prompt length), ``batch``, ``seeds`` (averaged).
    Training: ``train_depth``, ``train_d_model``, ``train_heads``, ``train_batch``, ``steps``,
    ``lr`` (Adam peak), ``warmup`` (steps of linear warm-up in the warm-up runs), ``task``.
    ``threads``: torch threads while running (None: leave as is).
    ``wide``: the setting of the paper-width check (:func:`wide_check`), the same on every
    device because it is one forward and backward pass per model.
    """

    depths: tuple[int, ...]
    d_model: int
    n_heads: int
    vocab: int
    n_items: int
    batch: int
    seeds: int
    train_depth: int
    train_d_model: int
    train_heads: int
    train_batch: int
    steps: int
    lr: float
    warmup: int
    task: str = "reverse"
    threads: int | None = None
    wide: WideSize = WIDE


SIZES: dict[str, PrePostSize] = {
    "cpu": PrePostSize(
        depths=(6, 12, 24, 48),
        d_model=64,
        n_heads=4,
        vocab=16,
        n_items=6,
        batch=16,
        seeds=2,
        train_depth=8,
        train_d_model=32,
        train_heads=4,
        train_batch=16,
        steps=120,
        lr=5e-3,
        warmup=30,
        threads=1,
    ),
    "cuda": PrePostSize(
        depths=(6, 12, 24, 48),
        d_model=512,
        n_heads=8,
        vocab=64,
        n_items=16,
        batch=64,
        seeds=2,
        train_depth=24,
        train_d_model=512,
        train_heads=8,
        train_batch=64,
        # 4 runs of 1200 steps: about two minutes on one GPU, sized to fit a short lease.
        steps=1200,
        lr=1e-3,
        warmup=240,
    ),
}


# --------------------------------------------------------------------------- gradients at init


@dataclass
class InitGradNorms:
    """Per-layer gradient norms at initialization.

    ``norms[placement][str(depth)]`` is a list of L floats (block 0 first): the L2 norm of
    the gradient of that block's ``mlp.fc2`` weight and bias, averaged over ``seeds``.
    """

    depths: list[int]
    norms: dict[str, dict[str, list[float]]]
    d_model: int
    seeds: int
    norm: str = "layernorm"

    def profile(self, placement: str, depth: int) -> np.ndarray:
        return np.asarray(self.norms[placement][str(depth)])

    def spread(self, placement: str, depth: int) -> float:
        """max / min over layers."""
        p = self.profile(placement, depth)
        return float(p.max() / p.min())

    def last_over_first(self, placement: str, depth: int) -> float:
        p = self.profile(placement, depth)
        return float(p[-1] / p[0])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InitGradNorms:
        return cls(**data)


def _task_batch(size_vocab: int, task: str, batch: int, n_items: int, seed: int, device):
    from ..sequence_tasks import make_batch

    return make_batch(task, batch, n_items, size_vocab, seed=seed, device=device)


def _fc2_layers(model) -> dict:
    return {f"block{i}": blk.mlp.fc2 for i, blk in enumerate(model.blocks)}


def init_grad_norms(preset: str | None = None, norm: str = "layernorm") -> InitGradNorms:
    """Gradient norm of each block's FFN W2 at init, per depth and placement.

    Cached per (preset, norm); ``preset=None`` means the device's preset, so a chapter calling
    ``init_grad_norms()`` and its claim checks calling ``init_grad_norms("cpu")`` share a run.
    """
    return _init_grad_norms(preset or preset_name(), norm)


@functools.lru_cache(maxsize=8)
def _init_grad_norms(preset: str, norm: str) -> InitGradNorms:
    from ..gradflow import gradient_profile
    from ..sequence_tasks import lm_loss, seq_len
    from ..transformer import GPTConfig, TinyGPT

    size = SIZES[preset]
    device = pick_device("cuda" if preset == "cuda" else "cpu")
    norms: dict[str, dict[str, list[float]]] = {"post": {}, "pre": {}}
    t = seq_len(size.task, size.n_items)
    with threads(size.threads):
        for depth in size.depths:
            for placement in ("post", "pre"):
                acc = np.zeros(depth)
                for seed in range(size.seeds):
                    cfg = GPTConfig(
                        vocab=size.vocab,
                        d_model=size.d_model,
                        n_heads=size.n_heads,
                        n_layers=depth,
                        max_len=t,
                        placement=placement,
                        norm=norm,
                        seed=seed,
                    )
                    model = TinyGPT(cfg).to(device)
                    b = _task_batch(size.vocab, size.task, size.batch, size.n_items, seed, device)
                    prof = gradient_profile(
                        model, _fc2_layers(model), lambda m, b=b: lm_loss(m(b.x), b)
                    )
                    acc += prof.norms
                norms[placement][str(depth)] = (acc / size.seeds).tolist()
    return InitGradNorms(list(size.depths), norms, size.d_model, size.seeds, norm)


# --------------------------------------------------------------------------- training

#: torch.set_float32_matmul_precision while training on CUDA ("high" = TF32 products).
CUDA_MATMUL_PRECISION = "high"


def lr_at(step: int, peak: float, warmup: int) -> float:
    """Learning rate at ``step`` (0-based): linear warm-up over ``warmup`` steps, then ``peak``."""
    if warmup < 0 or peak < 0:
        raise ValueError(f"warmup and peak must be >= 0, got warmup={warmup}, peak={peak}")
    return peak * min(1.0, (step + 1) / warmup) if warmup > 0 else peak


@dataclass
class TrainRun:
    """One training run: its switches, the loss per step, and the outcome.

    - losses: training loss per step (NaN once it diverged).
    - final_loss: mean loss over the last tenth of the steps.
    - accuracy: answer-token accuracy on a held-out batch after training.
    - diverged: a loss became NaN or infinite.
    - trained: final_loss below half of the chance-level loss ln(V - 2)
      (:func:`normedu.sequence_tasks.chance_loss`).
    - grad_norms_end: per-block FFN-W2 gradient norm after training (block 0 first).
    """

    placement: str
    warmup: int
    losses: list[float]
    final_loss: float
    accuracy: float
    diverged: bool
    trained: bool
    grad_norms_end: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        w = f"warm-up {self.warmup}" if self.warmup else "no warm-up"
        return f"{self.placement.capitalize()}-LN, {w}"


@dataclass
class StabilityResult:
    """All runs of :func:`train_stability` plus the size they used."""

    runs: list[TrainRun]
    depth: int
    d_model: int
    steps: int
    lr: float
    task: str
    chance_loss: float

    def run(self, placement: str, warmup: bool) -> TrainRun:
        for r in self.runs:
            if r.placement == placement and bool(r.warmup) == warmup:
                return r
        raise KeyError(f"no run with placement={placement!r}, warmup={warmup}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StabilityResult:
        data = dict(data)
        data["runs"] = [TrainRun(**r) for r in data["runs"]]
        return cls(**data)


def _train_one(size: PrePostSize, placement: str, warmup: int, device, progress=None) -> TrainRun:
    import torch

    from ..gradflow import gradient_profile
    from ..sequence_tasks import accuracy, chance_loss, lm_loss, seq_len
    from ..training import adam
    from ..transformer import GPTConfig, TinyGPT

    t = seq_len(size.task, size.n_items)
    cfg = GPTConfig(
        vocab=size.vocab,
        d_model=size.train_d_model,
        n_heads=size.train_heads,
        n_layers=size.train_depth,
        max_len=t,
        placement=placement,
        seed=0,
    )
    model = TinyGPT(cfg).to(device)
    opt = adam(model.parameters(), lr=size.lr, betas=(0.9, 0.98))
    losses: list[float] = []
    diverged = False
    for step in range(size.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, size.lr, warmup)
        # A fresh batch every step (seeded by the step): the same data for every run.
        b = _task_batch(
            size.vocab, size.task, size.train_batch, size.n_items, 10_000 + step, device
        )
        loss = lm_loss(model(b.x), b)
        if not torch.isfinite(loss):
            diverged = True
            losses.extend([float("nan")] * (size.steps - step))
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress.update(1)
    tail = losses[-max(1, size.steps // 10) :]
    final = float(np.mean(tail)) if not diverged else float("nan")
    held = _task_batch(size.vocab, size.task, 256, size.n_items, 1, device)
    with torch.no_grad():
        acc = accuracy(model(held.x), held) if not diverged else 0.0
    grads: list[float] = []
    if not diverged:
        prof = gradient_profile(model, _fc2_layers(model), lambda m: lm_loss(m(held.x), held))
        grads = prof.norms.tolist()
    trained = (not diverged) and final < 0.5 * chance_loss(size.vocab, size.task)
    return TrainRun(placement, warmup, losses, final, acc, diverged, trained, grads)


_STABILITY: dict[str, StabilityResult] = {}


def train_stability(preset: str | None = None, progress: bool = False) -> StabilityResult:
    """Train Post-LN and Pre-LN stacks, each without and with warm-up.

    Returns a :class:`StabilityResult` with four runs. ``progress=True`` shows a tqdm bar on
    stderr. Cached per preset (``None`` = the device's preset; ``progress`` is not part of the
    key), so the chapter and its claim checks share one run; ``train_stability.cache_clear()``
    empties the cache.
    """
    preset = preset or preset_name()
    if preset not in _STABILITY:
        _STABILITY[preset] = _train_stability(preset, progress)
    return _STABILITY[preset]


def _train_stability(preset: str, progress: bool) -> StabilityResult:
    from ..sequence_tasks import chance_loss

    size = SIZES[preset]
    device = pick_device("cuda" if preset == "cuda" else "cpu")
    bar = None
    if progress:
        import sys

        # tqdm.std, not tqdm.auto: in a notebook tqdm.auto draws an ipywidget, which a static
        # page shows as raw JSON; the text bar goes to stderr, which the book removes.
        from tqdm.std import tqdm

        bar = tqdm(
            total=4 * size.steps, desc="training Post-LN / Pre-LN", leave=False, file=sys.stderr
        )
    import torch

    runs = []
    precision = torch.get_float32_matmul_precision()
    if device.type == "cuda":
        # TF32 matrix products: several times faster on a GPU, and a question about
        # stability at depth does not hinge on the last mantissa bits of the products.
        torch.set_float32_matmul_precision(CUDA_MATMUL_PRECISION)
    try:
        with threads(size.threads):
            for placement in ("post", "pre"):
                for warmup in (0, size.warmup):
                    runs.append(_train_one(size, placement, warmup, device, bar))
    finally:
        torch.set_float32_matmul_precision(precision)
    if bar is not None:
        bar.close()
    return StabilityResult(
        runs,
        size.train_depth,
        size.train_d_model,
        size.steps,
        size.lr,
        size.task,
        chance_loss(size.vocab, size.task),
    )


init_grad_norms.cache_clear = _init_grad_norms.cache_clear  # type: ignore[attr-defined]
train_stability.cache_clear = _STABILITY.clear  # type: ignore[attr-defined]


@scale_experiment("prepost")
def stored_run(preset: str) -> dict[str, Any]:
    """The data stored in ``results/gpu/prepost.json``: both experiments at ``preset``."""
    return {
        "preset": preset,
        "size": asdict(SIZES[preset]),
        "init": init_grad_norms(preset).to_json(),
        "training": train_stability(preset, progress=True).to_json(),
        "matmul_precision": CUDA_MATMUL_PRECISION if preset == "cuda" else "highest",
    }


# --------------------------------------------------------------------------- paper-width check


def wide_check(preset: str | None = None) -> WideCheck:
    """:func:`wide_profiles` at the ``wide`` size of ``preset`` (None: the device's)."""
    return wide_profiles((SIZES[preset] if preset else choose(SIZES)).wide)
