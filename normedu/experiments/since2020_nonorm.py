"""Training without normalization: ReZero, Dynamic Tanh and no norm at all, against LayerNorm.

Three measurements on :class:`normedu.transformer.TinyGPT` and the synthetic tasks of
:mod:`normedu.sequence_tasks`:

- :func:`rezero_identity`: a ReZero stack at initialization passes the residual stream through
  unchanged (forward), and hands every block the same gradient (backward).
- :func:`compare`: the same Pre-Norm stack with each of :data:`VARIANTS` (LayerNorm, RMSNorm,
  DyT, DyT with the scalar after the embedding, ReZero, no norm) trained in lockstep on the
  same batches, from one ``seed``: loss curves and per-block gradient profiles at
  initialization and after training. The variants of ``long_variants`` then go on, on the
  following batches of the same stream, to ``long_steps`` steps: whether a slow start is a
  failure or only slowness. Its multi-seed record and the speed of a step, timed alone, are
  :mod:`.since2020_nonorm_seeds`.
- :func:`init_scales`: what the branches of a freshly built stack read (the RMS of every
  norm's output), and the RMS of its logits.
- :func:`ln_curve` (run inside :func:`compare` on the trained LayerNorm model): every
  LayerNorm's input against its normalized output, element by element, and the best fit of
  ``c * tanh(alpha * x)`` to that cloud (against the best straight line). It and the other
  curve helpers live in :mod:`.since2020_nonorm_curve` and are re-exported here, as are the
  sizes and variants (:mod:`.since2020_nonorm_setup`) and the measurements at initialization,
  :func:`stream_rms` and :func:`init_scales` (:mod:`.since2020_nonorm_init`).

Cached per preset, seed and size overrides, so the chapter and its records share one run.
``SIZES["cpu"]`` takes about 20 CPU-seconds at one seed;
``SIZES["cuda"]`` is a larger setting for a GPU (no stored run yet).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ..device import pick_device, preset_name
from .scale import threads
from .since2020_nonorm_curve import (
    ALPHA_GRID,
    LNCurve,
    TanhFit,
    TokenScaleDemo,
    fit_line,
    fit_tanh,
    ln_curve,
    token_scale_demo,
)
from .since2020_nonorm_init import InitScales, branch_gains, init_scales, stream_rms
from .since2020_nonorm_setup import (
    LABELS,
    SIZES,
    VARIANTS,
    NoNormSize,
    _batch,
    held_seed,
    stream_seed,
    variant_config,
)

__all__ = [
    "NoNormSize",
    "SIZES",
    "VARIANTS",
    "LABELS",
    "variant_config",
    "rezero_identity",
    "RezeroIdentity",
    "stream_rms",
    "InitScales",
    "init_scales",
    "branch_gains",
    "ALPHA_GRID",
    "TanhFit",
    "fit_tanh",
    "fit_line",
    "LNCurve",
    "ln_curve",
    "TokenScaleDemo",
    "token_scale_demo",
    "Run",
    "Comparison",
    "build",
    "train_step",
    "tail_mean",
    "stream_seed",
    "held_seed",
    "compare",
]


# --------------------------------------------------------------------------- ReZero at init


@dataclass(frozen=True)
class RezeroIdentity:
    """A freshly built ReZero stack on one batch.

    - max_stream_change: max |residual stream after the last block - stream entering block 0|.
    - block_grads: ||dL/d(output of block l)|| for every block, input side first.
    - max_grad_change: max |dL/d(output of block l) - dL/d(output of the last block)| over l.
    - gate_grads: dL/d(gate) of every gate (two per block), input side first.
    - lr, gates_after_step: Adam's learning rate (the comparison's) and every gate after one
      Adam step from zero, in the same order.
    """

    depth: int
    max_stream_change: float
    block_grads: list[float]
    max_grad_change: float
    gate_grads: list[float] = field(default_factory=list)
    lr: float = 0.0
    gates_after_step: list[float] = field(default_factory=list)


def rezero_identity(depth: int = 8, d_model: int = 32, seed: int = 0) -> RezeroIdentity:
    """Build a ReZero TinyGPT and check the identity at init, forward and backward; then take
    one Adam step (the comparison's learning rate and betas) and record where the gates land."""
    import torch

    from ..sequence_tasks import lm_loss
    from ..training import adam
    from ..transformer import TinyGPT

    size = SIZES["cpu"]
    cfg = variant_config("rezero", size, seed).with_(n_layers=depth, d_model=d_model)
    model = TinyGPT(cfg)
    b = _batch(size, 8, seed, None)
    grads: list[torch.Tensor] = []
    x = model.embed(b.x)
    x0 = x
    outs = []
    for block in model.blocks:
        x = block(x)
        x.retain_grad()
        outs.append(x)
    lm_loss(model.head(model.final(x)), b).backward()
    grads = [o.grad for o in outs]
    change = float((x - x0).detach().abs().max())
    grad_change = max(float((g - grads[-1]).abs().max()) for g in grads)
    gates = [g for blk in model.blocks for g in (blk.gate1, blk.gate2)]
    gate_grads = [float(g.grad) for g in gates]
    adam(model.parameters(), lr=size.lr, betas=(0.9, 0.98)).step()
    after = [float(g.detach()) for g in gates]
    return RezeroIdentity(
        depth, change, [float(g.norm()) for g in grads], grad_change, gate_grads, size.lr, after
    )


# --------------------------------------------------------------------------- the comparison


@dataclass
class Run:
    """One variant's training run.

    - losses: training loss per step (NaN from the step it diverged on).
    - final_loss: mean loss over the last tenth of the steps (NaN if it diverged).
    - trained: final_loss below half of chance, ln(V - 2).
    - grad_init, grad_end: ||dL/d(block output)|| per block at initialization and after
      training, on a held-out batch, input side first.
    - scalars: DyT's alphas (one per DyT, input side first, the final one last) or ReZero's
      gates (two per block) after training; [] for the others.
    - long_losses, final_loss_long, trained_long: for the variants that go on to
      ``long_steps``, the losses of the steps after ``steps``, and the final loss and verdict
      at ``long_steps`` (same definitions); [] and None for the others.

    Everything but the ``long`` fields (gradients and scalars included) is measured at
    ``steps``, so that every variant is compared after the same training. Speeds are not
    measured here: a training run shares the machine with whatever else runs, so the page
    reads them from a record timed alone (:func:`.since2020_nonorm_seeds.step_speed`).
    """

    name: str
    losses: list[float]
    final_loss: float
    trained: bool
    diverged: bool
    grad_init: list[float]
    grad_end: list[float]
    scalars: list[float] = field(default_factory=list)
    long_losses: list[float] = field(default_factory=list)
    final_loss_long: float | None = None
    trained_long: bool | None = None

    @property
    def label(self) -> str:
        return LABELS[self.name]


def tail_mean(losses) -> float:
    """A run's final loss: the mean over the last tenth of its steps (at least one)."""
    return float(np.mean(losses[-max(1, len(losses) // 10) :]))


@dataclass
class Comparison:
    """Every variant's :class:`Run`, the size, chance-level loss, the LayerNorm curve, and the
    seed of the models and batches (before the offset of :mod:`normedu.seeding`)."""

    runs: list[Run]
    size: dict[str, Any]
    chance_loss: float
    curve: LNCurve
    seed: int = 0

    def run(self, name: str) -> Run:
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"no run {name!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Comparison:
        data = dict(data)
        data["runs"] = [Run(**r) for r in data["runs"]]
        data["curve"] = LNCurve(**data["curve"])
        return cls(**data)


def _block_grads(model, batch) -> list[float]:
    from ..gradflow import gradient_profile
    from ..sequence_tasks import lm_loss

    prof = gradient_profile(model, model.layers(), lambda m: lm_loss(m(batch.x), batch), "output")
    return prof.norms.tolist()


def _scalars(model) -> list[float]:
    from ..nn import DyT

    alphas = [float(m.alpha.detach()) for m in model.modules() if isinstance(m, DyT)]
    gates = [
        float(g.detach()) for b in model.blocks if b.gate1 is not None for g in (b.gate1, b.gate2)
    ]
    return alphas + gates


def build(name: str, size: NoNormSize, seed: int = 0, alpha0: float | None = None):
    """Variant ``name``'s TinyGPT at ``size`` from ``seed``, with its Adam (the comparison's
    learning rate and betas); ``alpha0`` sets every DyT's starting alpha (None: DyT's 0.5)."""
    from ..nn import DyT
    from ..training import adam
    from ..transformer import TinyGPT

    model = TinyGPT(variant_config(name, size, seed))
    if alpha0 is not None:
        for m in model.modules():
            if isinstance(m, DyT):
                m.alpha.data.fill_(alpha0)
    return model, adam(model.parameters(), lr=size.lr, betas=(0.9, 0.98))


def train_step(model, opt, batch) -> float:
    """One Adam step on ``batch``; returns the loss before the step."""
    from ..sequence_tasks import lm_loss

    loss = lm_loss(model(batch.x), batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def compare(
    preset: str | None = None, progress: bool = False, seed: int = 0, **changes
) -> Comparison:
    """Train every variant of :data:`VARIANTS` on the same batches, in lockstep; see the module
    docstring. ``seed`` picks the models' initialization and the stream of batches (0: the
    page's run); ``changes`` replace fields of the preset's :class:`NoNormSize` (``depth=4``).
    Cached per preset (None: the device's), seed and changes; ``progress`` shows a text bar on
    stderr and is not part of the key."""
    preset = preset or preset_name()
    key = (preset, seed, *sorted(changes.items()))
    if key not in _COMPARISONS:
        size = replace(SIZES[preset], **changes)
        _COMPARISONS[key] = _compare(size, preset, progress, seed)
    return _COMPARISONS[key]


_COMPARISONS: dict[tuple, Comparison] = {}


def _compare(size: NoNormSize, preset: str, progress: bool, seed: int) -> Comparison:
    from ..sequence_tasks import chance_loss

    device = pick_device("cuda" if preset == "cuda" else "cpu")
    names = list(VARIANTS)
    bar = None
    if progress:
        import sys

        from tqdm.std import tqdm  # a text bar on stderr, which the book removes

        bar = tqdm(total=size.steps, desc="training the stacks", leave=False, file=sys.stderr)
    with threads(size.threads):
        built = {n: build(n, size, seed) for n in names}
        models = {n: m.to(device) for n, (m, _) in built.items()}
        opts = {n: o for n, (_, o) in built.items()}
        held = _batch(size, 64, held_seed(seed, 1), device)
        grad_init = {n: _block_grads(m, held) for n, m in models.items()}
        losses: dict[str, list[float]] = {n: [] for n in names}
        diverged = dict.fromkeys(names, False)
        for step in range(size.steps):
            b = _batch(size, size.batch, stream_seed(seed, step), device)  # the same for all
            for n in names:
                if diverged[n]:
                    continue
                value = train_step(models[n], opts[n], b)
                if not np.isfinite(value):
                    diverged[n] = True
                    losses[n] += [float("nan")] * (size.steps - step)
                    continue
                losses[n].append(value)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        chance = chance_loss(size.vocab, size.task)
        runs = []
        for n in names:
            final = float("nan") if diverged[n] else tail_mean(losses[n])
            runs.append(
                Run(
                    n,
                    losses[n],
                    final,
                    (not diverged[n]) and final < 0.5 * chance,
                    diverged[n],
                    grad_init[n],
                    [] if diverged[n] else _block_grads(models[n], held),
                    _scalars(models[n]),
                )
            )
        # The longer runs: the same models and optimizers, on the next batches of the stream,
        # so their first ``steps`` steps are the ones above.
        for r in runs:
            if r.name not in size.long_variants or r.diverged or size.long_steps <= size.steps:
                continue
            more = []
            for step in range(size.steps, size.long_steps):
                b = _batch(size, size.batch, stream_seed(seed, step), device)
                more.append(train_step(models[r.name], opts[r.name], b))
                if not np.isfinite(more[-1]):
                    more += [float("nan")] * (size.long_steps - step - 1)
                    break
            r.long_losses = more
            whole = r.losses + more
            r.final_loss_long = tail_mean(whole) if np.all(np.isfinite(whole)) else float("nan")
            r.trained_long = bool(r.final_loss_long < 0.5 * chance)
        ln_model = models["layernorm"].cpu()
        curve = ln_curve(
            ln_model, _batch(size, size.curve_batch, held_seed(seed, 2), None), size.curve_points
        )
    return Comparison(runs, asdict(size), chance, curve, seed)


compare.cache_clear = _COMPARISONS.clear  # type: ignore[attr-defined]
