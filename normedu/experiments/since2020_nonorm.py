"""Training without normalization: ReZero, Dynamic Tanh and no norm at all, against LayerNorm.

Three measurements on :class:`normedu.transformer.TinyGPT` and the synthetic tasks of
:mod:`normedu.sequence_tasks`:

- :func:`rezero_identity`: a ReZero stack at initialization passes the residual stream through
  unchanged (forward), and hands every block the same gradient (backward).
- :func:`compare`: the same Pre-Norm stack with each of :data:`VARIANTS` (LayerNorm, RMSNorm,
  DyT, ReZero, no norm) trained in lockstep on the same batches: loss curves, per-block
  gradient profiles at initialization and after training, and tokens per second, every step
  of every variant timed with the variants' order rotating from step to step. The variants
  of ``long_variants`` then go on, on the following batches of the same stream, to
  ``long_steps`` steps: whether a slow start is a failure or only slowness.
- :func:`init_scales`: what the branches of a freshly built stack read (the RMS of every
  norm's output), and the RMS of its logits.
- :func:`ln_curve` (run inside :func:`compare` on the trained LayerNorm model): every
  LayerNorm's input against its normalized output, element by element, and the best fit of
  ``c * tanh(alpha * x)`` to that cloud (against the best straight line). It and the other
  curve helpers live in :mod:`.since2020_nonorm_curve` and are re-exported here, as are the
  sizes and variants (:mod:`.since2020_nonorm_setup`) and the measurements at initialization,
  :func:`stream_rms` and :func:`init_scales` (:mod:`.since2020_nonorm_init`).

Cached per preset (and size overrides), so the chapter and its claim checks share one run.
``SIZES["cpu"]`` takes about 15 CPU-seconds (9 for the lockstep part);
``SIZES["cuda"]`` is a larger setting for a GPU (no stored run yet).
"""

from __future__ import annotations

import time
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
from .since2020_nonorm_init import InitScales, init_scales, stream_rms
from .since2020_nonorm_setup import LABELS, SIZES, VARIANTS, NoNormSize, _batch, variant_config

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
    x = model.tok(b.x) + model.pos(torch.arange(b.x.shape[1]))
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
    - seconds: wall-clock seconds of its timed steps (forward, backward, Adam step).
    - tokens_per_s: tokens it processed per second of those steps.
    - grad_init, grad_end: ||dL/d(block output)|| per block at initialization and after
      training, on a held-out batch, input side first.
    - scalars: DyT's alphas (one per DyT, input side first, the final one last) or ReZero's
      gates (two per block) after training; [] for the others.
    - long_losses, final_loss_long, trained_long: for the variants that go on to
      ``long_steps``, the losses of the steps after ``steps``, and the final loss and verdict
      at ``long_steps`` (same definitions); [] and None for the others.

    Everything but the ``long`` fields (gradients and scalars included) is measured at
    ``steps``, so that every variant is compared after the same training.
    """

    name: str
    losses: list[float]
    final_loss: float
    trained: bool
    diverged: bool
    seconds: float
    tokens_per_s: float
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
    """Every variant's :class:`Run`, the size, chance-level loss and the LayerNorm curve."""

    runs: list[Run]
    size: dict[str, Any]
    chance_loss: float
    curve: LNCurve

    def run(self, name: str) -> Run:
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"no run {name!r}")

    def speed_vs_layernorm(self, name: str) -> float:
        """Tokens per second of ``name`` over LayerNorm's, in this one run."""
        return self.speed_vs(name, "layernorm")

    def speed_vs(self, name: str, reference: str) -> float:
        """Tokens per second of ``name`` over ``reference``'s, in this one run."""
        return self.run(name).tokens_per_s / self.run(reference).tokens_per_s

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


def compare(preset: str | None = None, progress: bool = False, **changes) -> Comparison:
    """Train every variant of :data:`VARIANTS` on the same batches, in lockstep; see the module
    docstring. ``changes`` replace fields of the preset's :class:`NoNormSize` (``depth=4``).
    Cached per preset (None: the device's) and changes; ``progress`` shows a text bar on
    stderr and is not part of the key."""
    preset = preset or preset_name()
    key = (preset, *sorted(changes.items()))
    if key not in _COMPARISONS:
        size = replace(SIZES[preset], **changes)
        _COMPARISONS[key] = _compare(size, preset, progress)
    return _COMPARISONS[key]


_COMPARISONS: dict[tuple, Comparison] = {}


def _compare(size: NoNormSize, preset: str, progress: bool) -> Comparison:
    import torch

    from ..sequence_tasks import chance_loss, lm_loss, seq_len
    from ..training import adam
    from ..transformer import TinyGPT

    device = pick_device("cuda" if preset == "cuda" else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    names = list(VARIANTS)
    bar = None
    if progress:
        import sys

        from tqdm.std import tqdm  # a text bar on stderr, which the book removes

        bar = tqdm(total=size.steps, desc="training five stacks", leave=False, file=sys.stderr)
    with threads(size.threads):
        models = {n: TinyGPT(variant_config(n, size)).to(device) for n in names}
        held = _batch(size, 64, 1, device)
        grad_init = {n: _block_grads(m, held) for n, m in models.items()}
        opts = {n: adam(m.parameters(), lr=size.lr, betas=(0.9, 0.98)) for n, m in models.items()}
        losses: dict[str, list[float]] = {n: [] for n in names}
        seconds = dict.fromkeys(names, 0.0)
        done = dict.fromkeys(names, 0)
        diverged = dict.fromkeys(names, False)
        for step in range(size.steps):
            b = _batch(size, size.batch, 10_000 + step, device)  # the same batch for all
            # Rotate the order every step: a change in the machine's load hits every variant.
            for n in names[step % len(names) :] + names[: step % len(names)]:
                if diverged[n]:
                    continue
                sync()
                t0 = time.perf_counter()
                loss = lm_loss(models[n](b.x), b)
                opts[n].zero_grad(set_to_none=True)
                loss.backward()
                opts[n].step()
                value = loss.item()  # synchronizes, and is part of every variant's step
                seconds[n] += time.perf_counter() - t0
                if not np.isfinite(value):
                    diverged[n] = True
                    losses[n] += [float("nan")] * (size.steps - step)
                    continue
                losses[n].append(value)
                done[n] += 1
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        chance = chance_loss(size.vocab, size.task)
        tokens = size.batch * seq_len(size.task, size.n_items)
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
                    seconds[n],
                    tokens * done[n] / seconds[n] if seconds[n] > 0 else float("nan"),
                    grad_init[n],
                    [] if diverged[n] else _block_grads(models[n], held),
                    _scalars(models[n]),
                )
            )
        # The longer runs: the same models and optimizers, on the next batches of the stream,
        # so their first ``steps`` steps are the ones above. Untimed (the speeds are the
        # lockstep's).
        for r in runs:
            if r.name not in size.long_variants or r.diverged or size.long_steps <= size.steps:
                continue
            more = []
            for step in range(size.steps, size.long_steps):
                b = _batch(size, size.batch, 10_000 + step, device)
                loss = lm_loss(models[r.name](b.x), b)
                opts[r.name].zero_grad(set_to_none=True)
                loss.backward()
                opts[r.name].step()
                more.append(loss.item())
                if not np.isfinite(more[-1]):
                    more += [float("nan")] * (size.long_steps - step - 1)
                    break
            r.long_losses = more
            whole = r.losses + more
            r.final_loss_long = tail_mean(whole) if np.all(np.isfinite(whole)) else float("nan")
            r.trained_long = bool(r.final_loss_long < 0.5 * chance)
        ln_model = models["layernorm"].cpu()
        curve = ln_curve(ln_model, _batch(size, size.curve_batch, 2, None), size.curve_points)
    return Comparison(runs, asdict(size), chance, curve)


compare.cache_clear = _COMPARISONS.clear  # type: ignore[attr-defined]
