"""Where the norm goes in today's large models: placements at depth, QK-norm, half precision.

Experiments of the chapter "Where the norm goes in today's large models" on
:class:`normedu.transformer.TinyGPT` stacks (placements of :mod:`normedu.placements`) and the
synthetic tasks of :mod:`normedu.sequence_tasks`:

- :func:`init_profiles`: at initialization, for each placement, the RMS of the residual
  stream after every block and the gradient norm of every block's second FFN matrix.
- :func:`update_sizes`: the size of the change of the stack's output after one SGD step at
  initialization, per depth, for Post-LN, Pre-LN and DeepNorm (the quantity DeepNorm bounds),
  with all parameters moved and with each group of :data:`UPDATE_GROUPS` moved alone.
- :func:`train_depth`: each placement trained at a depth and learning rate where Post-LN
  is expected to fail.
- :func:`logit_sweep`: a learning-rate sweep of a Pre-LN stack with and without QK-norm:
  the largest attention logit over training and the final loss.
- :func:`precision_errors` (from :mod:`normedu.halfprec`): the variance of one row computed
  several ways in float16, bfloat16 and float32, against float64.

Each is cached per preset, so the chapter and its claim checks share one run.
``SIZES["cpu"]`` runs in seconds; ``SIZES["cuda"]`` is the larger size that ``python -m
normedu.experiments --store`` runs on a GPU.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..device import pick_device, preset_name

# The half-precision experiment lives with its algorithms; re-exported for the chapter.
from ..halfprec import LARGE_MEAN, PrecisionResult, precision_errors
from .scale import scale_experiment, threads
from .since2020_init import InitProfiles, measure_init

# The one-step update measurement lives in its own module; re-exported for the chapter.
from .since2020_update import UPDATE_GROUPS, UpdateSizes, one_step_changes

__all__ = [
    "PLACEMENTS",
    "LABELS",
    "Size",
    "SIZES",
    "InitProfiles",
    "UpdateSizes",
    "UPDATE_GROUPS",
    "Run",
    "TrainResult",
    "SweepResult",
    "PrecisionResult",
    "init_profiles",
    "update_sizes",
    "train_depth",
    "logit_sweep",
    "run_sweep",
    "precision_errors",
    "LARGE_MEAN",
]

#: The placements the experiments compare ("peri" computes the same block as "sandwich").
PLACEMENTS = ("post", "pre", "sandwich", "olmo2", "deepnorm")
#: How the page names them.
LABELS = {
    "post": "Post-LN",
    "pre": "Pre-LN",
    "sandwich": "Sandwich / Peri-LN",
    "olmo2": "OLMo 2 (norm on the output)",
    "deepnorm": "DeepNorm",
}


@dataclass(frozen=True)
class Size:
    """Sizes of the experiments.

    Common: ``vocab``, ``n_items`` (prompt length of the reverse task), ``batch``,
    ``d_model``, ``n_heads``, ``threads`` (torch threads; None leaves them).
    At init: ``init_depth``, ``init_seeds``; update sizes: ``update_depths``, ``update_lr``
    (the SGD step). Training: ``train_depth``, ``train_lr`` (Adam, no warm-up),
    ``train_steps``. Logit sweep: ``sweep_depth``, ``sweep_d_model``, ``sweep_heads``,
    ``sweep_lrs``, ``sweep_steps``.
    """

    vocab: int
    n_items: int
    batch: int
    d_model: int
    n_heads: int
    init_depth: int
    init_seeds: int
    update_depths: tuple[int, ...]
    update_lr: float
    train_depth: int
    train_lr: float
    train_steps: int
    sweep_depth: int
    sweep_d_model: int
    sweep_heads: int
    sweep_lrs: tuple[float, ...]
    sweep_steps: int
    threads: int | None = None


SIZES: dict[str, Size] = {
    "cpu": Size(
        vocab=16,
        n_items=6,
        batch=16,
        d_model=32,
        n_heads=4,
        init_depth=32,
        init_seeds=5,
        # 4 to 32 layers: DeepNorm's block-matrix change stays flat (×0.80) and its total
        # still grows (×3.4) over this range as over 4 to 64, at two fifths less work.
        update_depths=(4, 16, 32),
        update_lr=1e-2,
        train_depth=8,
        train_lr=5e-3,
        train_steps=90,
        sweep_depth=2,
        sweep_d_model=64,
        sweep_heads=2,
        # At 0.1 the QK-norm stack escapes its plateau only in the last tens of 150 steps,
        # and at init seeds 1 and 2 not at all; at 0.05 it learns within 120 steps at seeds
        # 0, 1 and 2 while the plain stack fails at all three: a cheaper and steadier contrast.
        sweep_lrs=(1e-3, 5e-2),
        sweep_steps=120,
        threads=1,
    ),
    "cuda": Size(
        vocab=64,
        n_items=16,
        batch=64,
        d_model=256,
        n_heads=8,
        init_depth=96,
        init_seeds=2,
        update_depths=(6, 24, 96, 384),
        update_lr=1e-2,
        train_depth=48,
        train_lr=2e-3,
        train_steps=600,
        sweep_depth=4,
        sweep_d_model=512,
        sweep_heads=4,
        sweep_lrs=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1),
        sweep_steps=600,
    ),
}

TASK = "reverse"


def _device(preset: str):
    return pick_device("cuda" if preset == "cuda" else "cpu")


def _config(size: Size, placement: str, depth: int, seed: int = 0, **kw):
    from ..sequence_tasks import seq_len
    from ..transformer import GPTConfig

    fields = dict(d_model=size.d_model, n_heads=size.n_heads) | kw
    return GPTConfig(
        vocab=size.vocab,
        n_layers=depth,
        max_len=seq_len(TASK, size.n_items),
        placement=placement,
        seed=seed,
        **fields,
    )


def _batch(size: Size, seed: int, device, batch: int | None = None):
    from ..sequence_tasks import make_batch

    return make_batch(TASK, batch or size.batch, size.n_items, size.vocab, seed=seed, device=device)


# --------------------------------------------------------------------------- at initialization


def init_profiles(preset: str | None = None) -> InitProfiles:
    """Per-seed stream RMS, fc2 weight and bias gradient norms and fc2 input RMS per block, at
    init, over ``init_seeds`` seeds (cached per preset)."""
    return _init_profiles(preset or preset_name())


@functools.lru_cache(maxsize=4)
def _init_profiles(preset: str) -> InitProfiles:
    from ..sequence_tasks import lm_loss
    from ..transformer import TinyGPT

    size, device = SIZES[preset], _device(preset)
    with threads(size.threads):
        m = measure_init(
            lambda p, s: TinyGPT(_config(size, p, size.init_depth, s)).to(device),
            lambda s: _batch(size, s, device),
            PLACEMENTS,
            range(size.init_seeds),
            lambda model, b: lm_loss(model(b.x), b),
        )
    return InitProfiles(
        size.init_depth,
        size.d_model,
        size.init_seeds,
        m["stream"],
        m["weight"],
        m["bias"],
        m["input"],
        m["outgrad"],
    )


def update_sizes(preset: str | None = None, seed: int = 0) -> UpdateSizes:
    """The output change after one SGD step at init, per depth, for Post-LN, Pre-LN and
    DeepNorm, split by parameter group for Post-LN and DeepNorm; models and batch from
    ``seed`` (cached per preset and seed)."""
    return _update_sizes(preset or preset_name(), seed)


@functools.lru_cache(maxsize=8)
def _update_sizes(preset: str, seed: int) -> UpdateSizes:
    from ..transformer import TinyGPT

    size, device = SIZES[preset], _device(preset)
    change: dict[str, list[float]] = {p: [] for p in ("post", "pre", "deepnorm")}
    # the split for the two placements whose stream is normalized (Pre-LN's is not)
    groups = {p: {g: [] for g in UPDATE_GROUPS} for p in ("post", "deepnorm")}
    with threads(size.threads):
        for placement in change:
            for depth in size.update_depths:
                model = TinyGPT(_config(size, placement, depth, seed)).to(device)
                batch = _batch(size, seed, device)
                c = one_step_changes(model, batch, size.update_lr, placement in groups)
                change[placement].append(c["all"])
                for g, values in groups.get(placement, {}).items():
                    values.append(c[g])
    return UpdateSizes(list(size.update_depths), size.update_lr, change, groups)


# --------------------------------------------------------------------------- training


@dataclass
class Run:
    """One training run: ``losses`` per step (NaN after divergence), ``final_loss`` (mean of
    the last tenth), ``diverged``, ``trained`` (final loss below half the chance loss), and
    ``max_logits`` (largest |attention logit| over the blocks, per step; empty unless
    recorded) and, with QK-norm, ``logit_bounds`` (the largest bound
    :func:`normedu.placements.qk_logit_bound` over the blocks at that step)."""

    label: str
    lr: float
    losses: list[float]
    final_loss: float
    diverged: bool
    trained: bool
    max_logits: list[float]
    logit_bounds: list[float] = field(default_factory=list)

    @property
    def peak_logit(self) -> float:
        finite = [v for v in self.max_logits if np.isfinite(v)]
        return max(finite) if finite else float("nan")


def _train(
    cfg, size: Size, lr: float, steps: int, device, label: str, record=False, seed: int = 0
) -> Run:
    """Train a TinyGPT of ``cfg`` (its init from ``cfg.seed``) with Adam on the batches of
    ``seed``: batch seeds ``10_000 + 1000 seed + step``, the same for every model of one seed
    (seed 0's are the page's)."""
    import torch

    from ..sequence_tasks import chance_loss, lm_loss
    from ..training import adam
    from ..transformer import TinyGPT

    model = TinyGPT(cfg).to(device)
    model.record_logits(record)
    opt = adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    losses: list[float] = []
    logits: list[float] = []
    bounds: list[float] = []
    diverged = False
    for step in range(steps):
        b = _batch(size, 10_000 + 1000 * seed + step, device)  # the same for every model
        loss = lm_loss(model(b.x), b)
        if record:
            logits.append(max(model.max_logits()))
            if cfg.qk_norm:
                bounds.append(_qk_bound(model))
        if not torch.isfinite(loss):
            diverged = True
            losses.extend([float("nan")] * (steps - step))
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    tail = losses[-max(1, steps // 10) :]
    final = float("nan") if diverged else float(np.mean(tail))
    trained = not diverged and final < 0.5 * chance_loss(size.vocab, TASK)
    return Run(label, lr, losses, final, diverged, trained, logits, bounds)


def _qk_bound(model) -> float:
    from ..placements import qk_logit_bound

    return max(
        qk_logit_bound(a.qk_norm.head_dim, a.qk_norm.q_weight, a.qk_norm.k_weight)
        for a in (blk.attn for blk in model.blocks)
    )


@dataclass
class TrainResult:
    """:func:`train_depth`'s runs, one per placement, and their setting."""

    runs: list[Run]
    depth: int
    d_model: int
    lr: float
    steps: int
    chance_loss: float

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainResult:
        return cls(**{**data, "runs": [Run(**r) for r in data["runs"]]})

    def run(self, placement: str) -> Run:
        for r in self.runs:
            if r.label == placement:
                return r
        raise KeyError(placement)


def train_depth(preset: str | None = None, seed: int = 0) -> TrainResult:
    """Every placement of :data:`PLACEMENTS` trained with Adam at ``train_lr`` from step 1 (no
    warm-up) at ``train_depth`` layers, init and batches from ``seed`` (cached per preset and
    seed)."""
    return _train_depth(preset or preset_name(), seed)


@functools.lru_cache(maxsize=8)
def _train_depth(preset: str, seed: int) -> TrainResult:
    from ..sequence_tasks import chance_loss

    size, device = SIZES[preset], _device(preset)
    with threads(size.threads):
        runs = [
            _train(
                _config(size, p, size.train_depth, seed),
                size,
                size.train_lr,
                size.train_steps,
                device,
                p,
                seed=seed,
            )
            for p in PLACEMENTS
        ]
    return TrainResult(
        runs,
        size.train_depth,
        size.d_model,
        size.train_lr,
        size.train_steps,
        chance_loss(size.vocab, TASK),
    )


@dataclass
class SweepResult:
    """:func:`logit_sweep`'s runs, labelled ``"qk_norm"`` or ``"plain"``, one per learning
    rate each; ``head_dim`` is Dh of the stack."""

    runs: list[Run]
    lrs: list[float]
    depth: int
    d_model: int
    head_dim: int
    steps: int
    chance_loss: float

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepResult:
        return cls(**{**data, "runs": [Run(**r) for r in data["runs"]]})

    def get(self, qk_norm: bool, lr: float) -> Run:
        label = "qk_norm" if qk_norm else "plain"
        for r in self.runs:
            if r.label == label and r.lr == lr:
                return r
        raise KeyError((label, lr))


def logit_sweep(preset: str | None = None, seed: int = 0) -> SweepResult:
    """A Pre-LN stack trained at each of ``sweep_lrs``, without and with QK-norm, recording
    the largest attention logit at every step; init and batches from ``seed`` (cached per
    preset and seed)."""
    return _logit_sweep(preset or preset_name(), seed)


@functools.lru_cache(maxsize=8)
def _logit_sweep(preset: str, seed: int) -> SweepResult:
    return run_sweep(SIZES[preset], _device(preset), seed=seed)


def run_sweep(
    size: Size | None = None,
    device=None,
    *,
    depth: int | None = None,
    lrs: tuple[float, ...] | None = None,
    seed: int = 0,
) -> SweepResult:
    """:func:`logit_sweep` at any ``size`` (default ``SIZES["cpu"]``; not cached), on
    ``device`` (default: CPU), with its ``depth`` and learning rates ``lrs`` replaced if
    given, e.g. ``run_sweep(depth=1, lrs=(0.1,))``."""
    from dataclasses import replace

    from ..sequence_tasks import chance_loss

    size = size or SIZES["cpu"]
    if depth is not None:
        size = replace(size, sweep_depth=depth)
    if lrs is not None:
        size = replace(size, sweep_lrs=tuple(lrs))
    device = device if device is not None else pick_device("cpu")
    runs = []
    with threads(size.threads):
        for qk in (False, True):
            for lr in size.sweep_lrs:
                cfg = _config(
                    size,
                    "pre",
                    size.sweep_depth,
                    d_model=size.sweep_d_model,
                    n_heads=size.sweep_heads,
                    qk_norm=qk,
                    seed=seed,
                )
                label = "qk_norm" if qk else "plain"
                runs.append(
                    _train(cfg, size, lr, size.sweep_steps, device, label, record=True, seed=seed)
                )
    return SweepResult(
        runs,
        list(size.sweep_lrs),
        size.sweep_depth,
        size.sweep_d_model,
        size.sweep_d_model // size.sweep_heads,
        size.sweep_steps,
        chance_loss(size.vocab, TASK),
    )


def _clear() -> None:
    for f in (_init_profiles, _update_sizes, _train_depth, _logit_sweep, precision_errors):
        f.cache_clear()


@scale_experiment("since2020_placement")
def stored_run(preset: str) -> dict[str, Any]:
    """The data stored in ``results/gpu/since2020_placement.json``: every experiment."""
    return {
        "preset": preset,
        "size": asdict(SIZES[preset]),
        "init": asdict(init_profiles(preset)),
        "updates": asdict(update_sizes(preset)),
        "training": asdict(train_depth(preset)),
        "sweep": asdict(logit_sweep(preset)),
    }
