"""The chapter "Where the norm goes in today's large models": its expensive experiments over
several seeds, stored as a committed record.

The one-step update sizes, the training at depth and the learning-rate sweep with and without
QK-norm cost about 15 CPU-s per seed (76 CPU-s for the five, one thread), too much to run
several seeds every time the page executes. So the page executes one seed live (seed 0,
shifted by the seed offset of :mod:`normedu.seeding`) for its tables and figures, and words
its verdicts from this record: :data:`N_SEEDS` seeds of each experiment, measured by
``python -m normedu.records --alone since2020_placement_seeds`` and stored under
``results/cpu/timings`` as the timings are (:mod:`normedu.records`). The page also checks
that its live seed falls inside the record's spread
(:func:`normedu.claims.since2020_placement_words.live_in_record`). The record is ``seeded``:
the file is seed offset 0's, and under another offset it is measured again in memory, so the
reseeding audit tests the page's words on other seeds.

Each run is reduced to what the page's words use (:func:`train_summary`,
:func:`sweep_summary`; the update sizes are stored whole).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["N_SEEDS", "RECORD", "SeedRecord", "measure", "seed_record", "sweep_summary",
           "train_summary"]  # fmt: skip

#: Seeds of the record (5: a seed of all three experiments costs about 15 CPU-s).
N_SEEDS = 5
#: The record's name in :data:`normedu.records.RECORDS`.
RECORD = "since2020_placement_seeds"


def _tail_means(losses: list[float], steps: int) -> tuple[float, float]:
    """Mean loss of the last tenth of the steps and of the tenth before it (NaN if
    diverged)."""
    k = max(1, steps // 10)
    arr = np.asarray(losses, dtype=float)
    return float(np.mean(arr[-k:])), float(np.mean(arr[-2 * k : -k]))


def train_summary(res) -> dict[str, Any]:
    """A :class:`TrainResult` reduced to, per placement: final loss (mean of the last tenth of
    the steps), the mean of the tenth before it, diverged, trained."""
    out = {}
    for r in res.runs:
        last, before = _tail_means(r.losses, res.steps)
        out[r.label] = {
            "final_loss": r.final_loss,
            "before_loss": before,
            "diverged": r.diverged,
            "trained": r.trained,
        }
    return {"runs": out, "depth": res.depth, "lr": res.lr, "steps": res.steps,
            "chance_loss": res.chance_loss}  # fmt: skip


def sweep_summary(res) -> dict[str, Any]:
    """A :class:`SweepResult` reduced to, per run (``"plain"``/``"qk_norm"`` and learning
    rate): final loss, peak |logit|, trained, diverged, and with QK-norm the largest logit over
    its bound at any step."""
    runs = []
    for r in res.runs:
        worst = (
            max(v / b for v, b in zip(r.max_logits, r.logit_bounds, strict=True))
            if r.logit_bounds
            else None  # no bound without QK-norm
        )
        runs.append({"label": r.label, "lr": r.lr, "final_loss": r.final_loss,
                     "peak_logit": r.peak_logit, "trained": r.trained, "diverged": r.diverged,
                     "worst_over_bound": worst})  # fmt: skip
    return {"runs": runs, "lrs": list(res.lrs), "depth": res.depth, "d_model": res.d_model,
            "steps": res.steps, "chance_loss": res.chance_loss}  # fmt: skip


def measure(seeds: int = N_SEEDS, preset: str = "cpu") -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the update sizes, the training at depth and the sweep at ``preset`` for seeds
    ``0 .. seeds-1`` (shifted by the seed offset); returns ``(data, provenance)`` for
    :func:`normedu.records.compute`."""
    from ..provenance import provenance
    from ..seeding import offset
    from . import since2020_placement as E

    data: dict[str, Any] = {"preset": preset, "seeds": list(range(seeds)), "offset": offset(),
                            "size": asdict(E.SIZES[preset]), "update": [], "train": [],
                            "sweep": []}  # fmt: skip
    for s in range(seeds):
        data["update"].append(asdict(E.update_sizes(preset, s)))
        data["train"].append(train_summary(E.train_depth(preset, s)))
        data["sweep"].append(sweep_summary(E.logit_sweep(preset, s)))
    return data, provenance(device=E._device(preset).type)


@dataclass
class SeedRecord:
    """The stored record: ``update`` (:class:`UpdateSizes` per seed), ``train`` and ``sweep``
    (summaries per seed), ``seeds`` (as the code numbers them), ``offset`` (the seed offset it
    was measured at), ``measured`` (machine and date, from its provenance)."""

    seeds: list[int]
    offset: int
    update: list
    train: list[dict[str, Any]]
    sweep: list[dict[str, Any]]
    measured: str

    @property
    def n(self) -> int:
        return len(self.seeds)


def from_data(data: dict[str, Any], measured: str = "") -> SeedRecord:
    from .since2020_update import UpdateSizes

    return SeedRecord(data["seeds"], data["offset"], [UpdateSizes(**u) for u in data["update"]],
                      data["train"], data["sweep"], measured)  # fmt: skip


def seed_record() -> SeedRecord:
    """The committed record (computed and stored first if it is missing or stale)."""
    from .. import records

    rec = records.read(RECORD)
    prov = rec["provenance"]
    measured = f"{prov.get('device', '?')}, {str(prov.get('date', '?'))[:10]}"
    return from_data(rec["data"], measured)
