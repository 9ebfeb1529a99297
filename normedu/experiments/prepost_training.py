"""Pre-Norm vs Post-Norm: training at a high learning rate, over a learning-rate x warm-up grid.

:func:`run_sweep` trains one :class:`normedu.transformer.TinyGPT` stack per placement, peak
learning rate and warm-up length (Adam, linear warm-up then constant) on the same stream of
synthetic batches, the cells of one placement side by side (:func:`train_cells`, stacked by
:mod:`.prepost_stacked`), and returns a :class:`WarmupSweep`: the final loss of every cell, the heat
map of the chapter, each cell trained on several seeds (its own initialization and batch stream
each). :meth:`WarmupSweep.stability` picks the runs at the headline learning rate (no warm-up
and the headline warm-up, both placements, every seed), the :class:`StabilityResult` that the
claims read. :mod:`normedu.experiments.prepost` holds the sizes
and re-exports these names; the chapter finds them there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CUDA_MATMUL_PRECISION",
    "lr_at",
    "TrainRun",
    "StabilityResult",
    "WarmupSweep",
    "train_cells",
    "run_sweep",
]

#: Sequences in the held-out batch that scores a trained run (accuracy, gradients after).
HELD_OUT = 64

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
    - final_loss: mean loss over the last tenth of the steps (NaN if it diverged).
    - accuracy: answer-token accuracy on a held-out batch after training.
    - diverged: a loss became NaN or infinite.
    - trained: final_loss below half of the chance-level loss ln(V - 2)
      (:func:`normedu.sequence_tasks.chance_loss`).
    - grad_norms_end: per-block FFN-W2 gradient norm after training (block 0 first); measured
      for the runs at the headline learning rate only (empty otherwise).
    - lr: the peak learning rate (None in results stored before the sweep existed).
    - seed: the seed of its initialization and batch stream (0 in results stored before the
      sweep had several).
    """

    placement: str
    warmup: int
    losses: list[float]
    final_loss: float
    accuracy: float
    diverged: bool
    trained: bool
    grad_norms_end: list[float] = field(default_factory=list)
    lr: float | None = None
    seed: int = 0

    @property
    def label(self) -> str:
        w = f"warm-up {self.warmup}" if self.warmup else "no warm-up"
        return f"{self.placement.capitalize()}-LN, {w}"

    @property
    def outcome(self) -> str:
        return "diverged" if self.diverged else ("trained" if self.trained else "stalled")


@dataclass
class StabilityResult:
    """Four runs per seed at one learning rate (both placements, without and with warm-up)."""

    runs: list[TrainRun]
    depth: int
    d_model: int
    steps: int
    lr: float
    task: str
    chance_loss: float

    def run(self, placement: str, warmup: bool, seed: int = 0) -> TrainRun:
        for r in self.runs:
            if r.placement == placement and bool(r.warmup) == warmup and r.seed == seed:
                return r
        raise KeyError(f"no run with placement={placement!r}, warmup={warmup}, seed={seed}")

    def seed_runs(self, placement: str, warmup: bool) -> list[TrainRun]:
        """The runs of every seed at (``placement``, ``warmup``), in seed order."""
        runs = [r for r in self.runs if r.placement == placement and bool(r.warmup) == warmup]
        return sorted(runs, key=lambda r: r.seed)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StabilityResult:
        data = dict(data)
        data["runs"] = [TrainRun(**r) for r in data["runs"]]
        return cls(**data)


@dataclass
class WarmupSweep:
    """Every run of :func:`run_sweep`: placements x ``lrs`` x ``warmups`` x ``seeds``.

    ``lr`` and ``warmup`` are the headline cell (a member of ``lrs`` and of ``warmups``), the
    one :meth:`stability` reads. ``seeds``: runs per cell, seeds 0 .. seeds-1 (each its own
    initialization and batch stream).
    """

    runs: list[TrainRun]
    lrs: list[float]
    warmups: list[int]
    lr: float
    warmup: int
    depth: int
    d_model: int
    steps: int
    task: str
    chance_loss: float
    seeds: int = 1

    def cell(self, placement: str, lr: float, warmup: int, seed: int = 0) -> TrainRun:
        for r in self.runs:
            if (r.placement, r.lr, r.warmup, r.seed) == (placement, lr, warmup, seed):
                return r
        raise KeyError(
            f"no run with placement={placement!r}, lr={lr}, warmup={warmup}, seed={seed}"
        )

    def seed_runs(self, placement: str, lr: float, warmup: int) -> list[TrainRun]:
        """The cell's runs, one per seed, in seed order."""
        return [self.cell(placement, lr, warmup, s) for s in range(self.seeds)]

    def seed_losses(self, placement: str, lr: float, warmup: int) -> np.ndarray:
        """(seeds,) final losses of the cell, in seed order (NaN: diverged)."""
        return np.array([r.final_loss for r in self.seed_runs(placement, lr, warmup)])

    def final_losses(self, placement: str) -> np.ndarray:
        """(len(lrs), len(warmups)) median final loss over the seeds, rows by learning rate
        (NaN where a seed diverged)."""
        return np.array(
            [
                [float(np.median(self.seed_losses(placement, lr, w))) for w in self.warmups]
                for lr in self.lrs
            ]
        )

    def trained_counts(self, placement: str) -> np.ndarray:
        """(len(lrs), len(warmups)) int: in how many of the ``seeds`` runs each cell trained."""
        return np.array(
            [
                [sum(r.trained for r in self.seed_runs(placement, lr, w)) for w in self.warmups]
                for lr in self.lrs
            ]
        )

    def trained(self, placement: str) -> np.ndarray:
        """(len(lrs), len(warmups)) bool: the cells that trained on every seed."""
        return self.trained_counts(placement) == self.seeds

    def stability(self) -> StabilityResult:
        """The runs at the headline ``lr``: each placement without and with ``warmup``, every
        seed."""
        runs = [
            self.cell(p, self.lr, w, s)
            for p in ("post", "pre")
            for w in (0, self.warmup)
            for s in range(self.seeds)
        ]
        return StabilityResult(
            runs, self.depth, self.d_model, self.steps, self.lr, self.task, self.chance_loss
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WarmupSweep:
        data = dict(data)
        data["runs"] = [TrainRun(**r) for r in data["runs"]]
        return cls(**data)


def _fc2_layers(model) -> dict:
    return {f"block{i}": blk.mlp.fc2 for i, blk in enumerate(model.blocks)}


#: Batch seeds of training seed s: BATCH_SEED + BATCH_STRIDE * s + step (seed 0 keeps the
#: stream it always had); BATCH_STRIDE is above any preset's steps, so no two seeds share one.
BATCH_SEED, BATCH_STRIDE = 10_000, 1_000


def train_cells(
    size,
    placement: str,
    cells,
    device,
    progress=None,
    grads_at: float | None = None,
    seed: int = 0,
) -> list[TrainRun]:
    """Train one stack of ``size`` (a :class:`~normedu.experiments.prepost.PrePostSize`) per cell.

    ``cells``: (peak lr, warm-up steps) pairs. Every cell starts from the same initialization
    (``seed``) and sees the same batches (fresh ones seeded by ``seed`` and the step), with
    Adam (betas 0.9, 0.98) at its peak lr and ``warmup`` steps of linear warm-up, for
    ``size.steps`` steps. The cells train side by side, stacked (:mod:`.prepost_stacked`):
    each is the run it would be alone, up to float rounding. ``grads_at``: the cells at this
    peak lr also measure their per-block FFN-W2 gradient after training. Returns one
    :class:`TrainRun` per cell, in order.
    """
    import torch
    import torch.nn.functional as F

    from ..gradflow import gradient_profile
    from ..sequence_tasks import IGNORE, accuracy, chance_loss, lm_loss, make_batch, seq_len
    from ..transformer import GPTConfig, TinyGPT
    from .prepost_stacked import StackedAdam, check_stackable, stack_params, stacked_logits, unstack

    items = size.train_items or size.n_items
    cfg = GPTConfig(
        vocab=size.vocab,
        d_model=size.train_d_model,
        n_heads=size.train_heads,
        n_layers=size.train_depth,
        max_len=seq_len(size.task, items),
        placement=placement,
        seed=seed,
    )
    if size.steps > BATCH_STRIDE:
        raise ValueError(f"at most {BATCH_STRIDE} steps per seed's batch stream, got {size.steps}")
    check_stackable(cfg)
    n = len(cells)
    model = TinyGPT(cfg).to(device)
    params = stack_params(model, n)
    opt = StackedAdam(params, betas=(0.9, 0.98))
    losses = torch.full((size.steps, n), float("nan"), dtype=torch.float64)
    diverged = torch.zeros(n, dtype=torch.bool)
    for step in range(size.steps):
        batch_seed = BATCH_SEED + BATCH_STRIDE * seed + step
        b = make_batch(size.task, size.train_batch, items, size.vocab, batch_seed, device)
        logits = stacked_logits(cfg, params, b.x)
        # each copy's lm_loss: mean cross-entropy over the scored positions
        ce = F.cross_entropy(
            logits.reshape(-1, size.vocab),
            b.y.repeat(n, 1).reshape(-1),
            ignore_index=IGNORE,
            reduction="none",
        ).view(n, -1)
        loss = ce.sum(1) / (b.y != IGNORE).sum()
        step_loss = loss.detach().double().cpu()
        diverged |= ~torch.isfinite(step_loss)  # a diverged copy keeps NaN from here on
        losses[step] = step_loss.masked_fill(diverged, float("nan"))
        if diverged.all():
            break
        for p in params.values():
            p.grad = None
        # the copies share nothing: the gradient of the sum is each copy's own
        loss.sum().backward()
        opt.step(torch.tensor([lr_at(step, lr, w) for lr, w in cells], device=device))
        if progress is not None:
            progress.update(n)
    held = make_batch(size.task, HELD_OUT, items, size.vocab, 1, device)
    chance = chance_loss(size.vocab, size.task)
    runs = []
    for i, (lr, warmup) in enumerate(cells):
        run_losses = losses[:, i].tolist()
        gone = bool(diverged[i])
        tail = run_losses[-max(1, size.steps // 10) :]
        final = float("nan") if gone else float(np.mean(tail))
        acc, ends = 0.0, []
        if not gone:
            model.load_state_dict(unstack(params, i))
            with torch.no_grad():
                acc = accuracy(model(held.x), held)
            if grads_at is not None and lr == grads_at:
                prof = gradient_profile(
                    model, _fc2_layers(model), lambda m: lm_loss(m(held.x), held)
                )
                ends = prof.norms.tolist()
        trained = (not gone) and final < 0.5 * chance
        runs.append(
            TrainRun(placement, warmup, run_losses, final, acc, gone, trained, ends, lr, seed)
        )
    return runs


def sweep_grid(size) -> tuple[list[float], list[int]]:
    """The learning rates and warm-ups of ``size`` (by default its headline lr, 0 and warmup)."""
    lrs = list(size.lrs) or [size.lr]
    warmups = list(size.warmups) or [0, size.warmup]
    if size.lr not in lrs or 0 not in warmups or size.warmup not in warmups:
        raise ValueError("the grid must hold the headline lr, no warm-up and the headline warm-up")
    return lrs, warmups


def run_sweep(size, device, progress: bool = False) -> WarmupSweep:
    """Train every cell of the grid of ``size``, Post-LN then Pre-LN. See :class:`WarmupSweep`."""
    import torch

    from ..sequence_tasks import chance_loss
    from .scale import threads

    lrs, warmups = sweep_grid(size)
    bar = None
    if progress:
        import sys

        # tqdm.std, not tqdm.auto: in a notebook tqdm.auto draws an ipywidget, which a static
        # page shows as raw JSON; the text bar goes to stderr, which the book removes.
        from tqdm.std import tqdm

        total = 2 * len(lrs) * len(warmups) * size.steps * size.train_seeds
        bar = tqdm(total=total, desc="lr x warm-up sweep", leave=False, file=sys.stderr)
    runs = []
    precision = torch.get_float32_matmul_precision()
    if device.type == "cuda":
        # TF32 matrix products: several times faster on a GPU, and a question about
        # stability at depth does not hinge on the last mantissa bits of the products.
        torch.set_float32_matmul_precision(CUDA_MATMUL_PRECISION)
    try:
        with threads(size.threads):
            cells = [(lr, warmup) for lr in lrs for warmup in warmups]
            for seed in range(size.train_seeds):
                for placement in ("post", "pre"):
                    # the headline runs (lr size.lr) also measure their gradients after training
                    runs += train_cells(
                        size, placement, cells, device, bar, grads_at=size.lr, seed=seed
                    )
    finally:
        torch.set_float32_matmul_precision(precision)
    if bar is not None:
        bar.close()
    return WarmupSweep(
        runs,
        lrs,
        warmups,
        size.lr,
        size.warmup,
        size.train_depth,
        size.train_d_model,
        size.steps,
        size.task,
        chance_loss(size.vocab, size.task),
        size.train_seeds,
    )
