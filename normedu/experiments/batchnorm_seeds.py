"""The BatchNorm chapter's training experiments over several seeds: one committed record.

The chapter executes one seed of each training experiment live; its verdicts rest on the
seeds of this record, because they do not fit the chapter's 45 CPU-s live (the batch-size
sweep alone costs about 12 CPU-s per seed on one core here). The record is measured by::

    python -m normedu.records --alone bn_seed_runs

and committed as ``results/cpu/timings/bn_seed_runs.json`` with its provenance (machine,
date, commit), like the timing records of :mod:`normedu.records`. It runs at the CPU preset,
the sizes the chapter runs live. It is a ``seeded`` record: the committed file is seed offset
0's (:mod:`normedu.seeding`); under another offset (the reseeding audit) it is measured again
in memory, so that the chapter's worded verdicts are tested on other seeds too. The claim
``bn.seed_record`` checks that the live seed lands inside the record's spread (:func:`inside`).

What it holds, per seed (``data[experiment][key]``: a list in seed order, or a list per
batch size / momentum / setting):

- ``sweep``: test error of the digits MLP (:func:`.batchnorm.train_mlp`, one epoch) per norm
  and training batch size;
- ``shift``: :func:`.batchnorm.distribution_shift` (contrast 0.5, brightness 1);
- ``eval_mode``: :func:`.batchnorm.eval_mode_demo` (the digits CNN run in both modes);
- ``calibration``: :func:`.batchnorm.calibration_demo` (momenta 0.1 and 0.9, batch 4);
- ``ddp``: :func:`.syncbn.ddp_table`'s test errors per seed (``errors["P,m,variant"]``) and
  the one-process replay of its local row at its smallest setting (:func:`.syncbn.local_bn_replica`:
  test error in eval mode and in training mode on test digits in groups of m).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .. import seeding
from ..device import preset_name

__all__ = ["RECORD", "SEEDS", "SHIFT", "CAL_MOMENTA", "CAL_BATCH", "measure", "stored", "inside"]

#: The record's name in :data:`normedu.records.RECORDS`.
RECORD = "bn_seed_runs"
#: The seeds of the record: five (each run costs well under 2 CPU-s except the sweep's
#: batch-2 runs, about 2 CPU-s each).
SEEDS = seeding.seeds(5)
#: The distribution shift the chapter applies: test pixels become 0.5 * x + 1.
SHIFT = (0.5, 1.0)
#: The calibration demo's BN momenta and training batch size.
CAL_MOMENTA = (0.1, 0.9)
CAL_BATCH = 4
NORMS = ("batchnorm", "groupnorm", "layernorm")


def measure(seeds: Sequence[int] = SEEDS) -> tuple[dict, dict]:
    """Run every experiment of the record for ``seeds``; returns ``(data, provenance)``.

    Refuses another preset than "cpu" or a nonzero seed offset: the record states the seeds
    the chapter names (0, 1, ...) at the sizes it runs live.
    """
    import torch

    from ..provenance import provenance
    from . import batchnorm as B
    from . import syncbn as S

    if preset_name() != "cpu":
        raise RuntimeError(f"the record is measured at the CPU preset (got {preset_name()!r})")
    torch.set_num_threads(1)  # tiny models; and the provenance states the threads
    seeds = list(seeds)
    size = B.SIZES["cpu"]
    sweep: dict = {"batch_sizes": list(size.batch_sizes), "epochs": size.epochs}
    for norm in NORMS:
        sweep[norm] = [
            [B.train_mlp(norm, b, size.epochs, s, size.depth, size.width)[1] for s in seeds]
            for b in size.batch_sizes
        ]
    runs = {
        "shift": [B.distribution_shift(*SHIFT, seed=s) for s in seeds],
        "eval_mode": [B.eval_mode_demo(s) for s in seeds],
    }
    data: dict = {"seeds": seeds, "sweep": sweep}
    for name, per_seed in runs.items():
        data[name] = {k: [r[k] for r in per_seed] for k in per_seed[0]}
    cal = [B.calibration_demo(CAL_MOMENTA, CAL_BATCH, s) for s in seeds]
    data["calibration"] = {
        "momenta": list(CAL_MOMENTA),
        "batch": CAL_BATCH,
        **{
            k: [[c[i][k] for c in cal] for i in range(len(CAL_MOMENTA))]
            for k in ("error_running", "error_calibrated")
        },
    }
    # The DDP table itself, every seed (processes started: minutes on two cores), and the
    # one-process replay of its local row at the smallest setting, for the training-mode error.
    table = S.ddp_table("cpu", timeout=1800.0, seeds=tuple(seeds))
    sz = table["size"]
    p0, m0 = sz["world_sizes"][0], sz["per_process"][0]
    reps = [S.local_bn_replica(p0, m0, "cpu", s) for s in seeds]
    data["ddp"] = {
        "steps": sz["max_steps"],
        "errors": {
            f"{r['processes']},{r['per_process']},{r['variant']}": r["errors"]
            for r in table["rows"]
        },
        "replay": {
            "setting": [p0, m0],
            **{k: [r[k] for r in reps] for k in ("error", "error_train_mode", "agree")},
            # the shares of x̂ within 1e-3 of ±1: the least of the BN layers in training mode,
            # the most of them in eval mode
            "pm1_train_min": [min(r["pm1_train"]) for r in reps],
            "pm1_eval_max": [max(r["pm1_eval"]) for r in reps],
        },
    }
    return data, provenance(f"python -m normedu.records --alone {RECORD}")


def stored() -> dict:
    """The record's data (:func:`normedu.records.read`: the committed file, else measured)."""
    from .. import records

    return records.read(RECORD)["data"]


#: Student's t quantile at 0.995 by degrees of freedom (standard tables; scipy.stats.t.ppf
#: gives the same to three decimals), for :func:`inside`: importing scipy costs a CPU-second.
T995 = {1: 63.657, 2: 9.925, 3: 5.841, 4: 4.604, 5: 4.032, 6: 3.707, 7: 3.499, 8: 3.355, 9: 3.250}


def inside(live: float, values: Sequence[float]) -> bool:
    """Whether a live seed's ``live`` value lies within the 99% prediction interval for one new
    seed from the record's ``values`` (one per seed): mean ± t · sd · sqrt(1 + 1/n), with
    Student's t quantile at 0.995 for n − 1 degrees of freedom. The bare min-max of five seeds
    would reject a new seed one time in three; this interval about one time in a hundred, if
    the seeds' values are roughly normal."""
    vals = [float(v) for v in values]
    n = len(vals)
    if n < 2:
        raise ValueError("need at least two seeds to have a spread")
    if n - 1 not in T995:
        raise ValueError(f"inside() knows Student's t for 2 to {len(T995) + 1} seeds, got {n}")
    mean = sum(vals) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    half = T995[n - 1] * sd * math.sqrt(1 + 1 / n)
    return mean - half <= live <= mean + half
