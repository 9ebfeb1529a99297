"""Training without normalization: the chapter's measurements over several seeds, and the
speed of a training step, timed alone. Both are stored records (:mod:`normedu.records`):

- :func:`measure_seeds` (record ``nonorm_seeds``): :func:`~.since2020_nonorm.compare` at each
  seed of ``seeds`` (seed 0 is the run the page shows), reduced to what the page's verdicts
  read: every variant's loss after ``steps`` and ``long_steps``, its gradient profile at
  initialization, the LayerNorm curve's fits, DyT trained alone from other ``alpha0`` on the
  same batches, and what a freshly built stack's branches read. A run costs about 20 CPU-s, so
  the page runs one seed live and reads the others here; the record depends on the seed
  offset of :mod:`normedu.seeding` (it is measured again, and kept in memory only, under
  another offset).
- :func:`step_speed` (record ``nonorm_step_speed``): CPU seconds per training step (forward,
  backward, Adam) of every variant, one thread, ``reps`` interleaved rounds of ``steps``
  steps each after a warm-up; the order of the variants rotates from round to round.

Part of the chapter "Training without normalization".
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from .since2020_nonorm_setup import SIZES, VARIANTS, _batch, stream_seed

__all__ = [
    "SEEDS_RECORD",
    "SPEED_RECORD",
    "falling",
    "measure_seeds",
    "step_speed",
    "seeds_record",
]

SEEDS_RECORD = "nonorm_seeds"
SPEED_RECORD = "nonorm_step_speed"


def _num(x) -> float | None:
    """A float for JSON: None for NaN (a diverged run) and for a run that did not go on."""
    return None if x is None or not math.isfinite(x) else float(x)


def falling(losses) -> bool:
    """The last tenth of the steps is lower, on average, than the tenth before it."""
    import numpy as np

    n = max(1, len(losses) // 10)
    if len(losses) < 2 * n or not np.all(np.isfinite(losses[-2 * n :])):
        return False
    return bool(np.mean(losses[-n:]) < np.mean(losses[-2 * n : -n]))


def _alpha_run(size, seed: int, alpha0: float) -> float | None:
    """DyT trained alone from ``alpha0`` on the comparison's batches of ``seed``: the mean
    loss over the last tenth of ``size.steps`` (None if it diverged)."""
    from .since2020_nonorm import build, tail_mean, train_step

    model, opt = build("dyt", size, seed, alpha0)
    losses = [
        train_step(model, opt, _batch(size, size.batch, stream_seed(seed, step), None))
        for step in range(size.steps)
    ]
    return _num(tail_mean(losses))


def _one_seed(preset: str, seed: int, alphas) -> dict[str, Any]:
    from .since2020_nonorm import compare
    from .since2020_nonorm_init import init_scales

    res = compare(preset, seed=seed)
    curve = res.curve
    fit = curve.fit()
    i = curve.names.index(curve.shown)
    runs = {
        r.name: {
            "final": _num(r.final_loss),
            "final_long": _num(r.final_loss_long),
            "diverged": r.diverged,
            "grad_init": r.grad_init,
            # loss still falling at the end: the last tenth below the tenth before it
            "falling": falling(r.losses),
            "falling_long": falling(r.losses + r.long_losses) if r.long_losses else None,
        }
        for r in res.runs
    }
    size = SIZES[preset]
    with_alpha = {f"{a:g}": _alpha_run(size, seed, a) for a in alphas}
    scales = init_scales(("layernorm", "dyt", "dyt_scaled"), preset, seed)
    scales["dyt_alpha1"] = init_scales(("dyt",), preset, seed, alpha0=1.0)["dyt"]
    return {
        "seed": seed,
        "runs": runs,
        "curve": {
            "r2_tanh": fit.r2_tanh,
            "r2_line": fit.r2_line,
            "alpha": fit.alpha,
            "c": fit.c,
            "sigma_spread": curve.sigma_spread[i],
            "r2_gaps": [curve.fit(n).r2_tanh - curve.fit(n).r2_line for n in curve.names],
        },
        "dyt_alpha0": with_alpha,
        "init": {k: vars(v) for k, v in scales.items()},
    }


def measure_seeds(
    seeds: list[int], preset: str = "cpu", alphas: list[float] = (0.2, 1.0)
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, provenance)``: ``data = {"seeds", "chance", "steps", "long_steps", "per_seed":
    [one dict per seed]}``, each as :func:`_one_seed` builds it."""
    from ..provenance import provenance
    from ..sequence_tasks import chance_loss

    size = SIZES[preset]
    per = [_one_seed(preset, s, alphas) for s in seeds]
    data = {
        "seeds": list(seeds),
        "chance": chance_loss(size.vocab, size.task),
        "steps": size.steps,
        "long_steps": size.long_steps,
        "per_seed": per,
    }
    return data, provenance(f"python -m normedu.records {SEEDS_RECORD}", "cpu")


def seeds_record() -> dict[str, Any]:
    """The record's data (read, or measured now if absent or stale)."""
    from ..records import read

    return read(SEEDS_RECORD)["data"]


def step_speed(
    reps: int, steps: int, warmup: int, preset: str = "cpu"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, provenance)``: ``data = {"variants", "tokens_per_step", "seconds": {variant:
    [seconds per step, one per round]}}``; one thread; ``warmup`` untimed steps each first."""
    from ..provenance import provenance
    from ..sequence_tasks import seq_len
    from .scale import threads
    from .since2020_nonorm import build, train_step

    size = replace(SIZES[preset], threads=1)
    names = list(VARIANTS)
    b = _batch(size, size.batch, stream_seed(0, 0), None)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    with threads(1):
        models = {n: build(n, size, 0) for n in names}
        for n in names:
            for _ in range(warmup):
                train_step(*models[n], b)
        for rnd in range(reps):
            for n in names[rnd % len(names) :] + names[: rnd % len(names)]:
                # CPU time of this process, not wall time: on a machine other work shares, wall
                # time counts the waits for a core (seven times the work at a load of 14 on
                # two cores, measured here); one thread, so this is the step's own work.
                t0 = time.process_time()
                for _ in range(steps):
                    train_step(*models[n], b)
                seconds[n].append((time.process_time() - t0) / steps)
        prov = provenance(f"python -m normedu.records {SPEED_RECORD}", "cpu")
    data = {
        "variants": names,
        "tokens_per_step": size.batch * seq_len(size.task, size.n_items),
        "seconds": seconds,
    }
    return data, prov
