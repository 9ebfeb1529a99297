"""Named records: every timing a page states, measured once, alone, and stored with the course;
also multi-seed experiments too costly for a page to run at every seed (``seeded`` records).

A page that states a speed does not time anything: it reads the record,
``records.read("rmsnorm_layernorm_speed")``. A record is one JSON file,
``<course root>/results/cpu/timings/<name>.json``, written with
:func:`normedu.results.write_record` (``{"provenance", "data"}``); its provenance says what it
measured (``record.params``), on which machine and when, and whether it was measured alone
(``record.alone``).

* One record is not a timing: ``bn_seed_runs`` holds the BatchNorm chapter's training
  experiments on five seeds (:mod:`normedu.experiments.batchnorm_seeds`), too costly to run live
  in the chapter, which states their verdicts and runs one seed itself.
* :data:`RECORDS` is the registry: name -> :class:`Record` (what it holds, the function that
  computes it, given by dotted path so that this module stays torch-free, its parameters, and
  the pages that state it).
* Timings change with the machine's load, and a book build executes its pages several at a
  time: a call timed beside another page's training is slowed by a random amount. So timings
  are benchmarks that write their figures down: ``make timings`` (``python -m normedu.records
  --alone``) measures every record with nothing else running, and the files are committed with
  the course, as the GPU results are (``results/``). A build, a test session and a student's
  notebook only read them; the pages say on which machine and when they were measured.
* :func:`read` returns the stored record, or computes, stores and returns it when it is
  absent or was measured with other parameters: a page executed on its own still works. When
  several processes compute one at once, the first stored wins and the others return it.
* The build measures a record before any page runs (``book/_ext/timing_phase.py``) only when it
  is stale: missing, measured with other parameters, or not measured alone.

Outside a course checkout (no course root) records are computed and kept in memory only.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .paths import course_root
from .results import make_record, read_record, write_record

__all__ = ["Record", "RECORDS", "FOLDER", "path", "read", "compute", "stale", "main"]

#: Where the records live, under the course root: committed, beside the stored GPU results.
FOLDER = Path("results") / "cpu" / "timings"


@dataclass(frozen=True)
class Record:
    """One named record.

    - description: what it holds, in a sentence (for the command line and the reader).
    - compute: ``"module:function"``; ``function(**params)`` returns ``(data, provenance)``,
      data JSON-serialisable, provenance as :func:`normedu.provenance.provenance` (taken
      inside the measurement, so that it states the threads it ran with).
    - params: what is measured (sizes, repetitions); a stored record with other params is
      measured again.
    - pages: the book's pages (docnames) that state it: executed again when it is measured
      again, so that a cached page never quotes an earlier measurement.
    - seeded: its figures come from random experiments, so they depend on the seed offset of
      :mod:`normedu.seeding`: the stored file is offset 0's; under another offset the record
      is measured again and kept in memory only (the reseeding audit leaves the tree as is).
    """

    description: str
    compute: str
    params: dict[str, Any] = field(default_factory=dict)
    pages: tuple[str, ...] = ()
    seeded: bool = False


#: Every named record. Sizes are the ones the pages state, no more: ``make timings`` measured
#: them all in 38 s here.
RECORDS: dict[str, Record] = {
    "rmsnorm_layernorm_speed": Record(
        description="forward time of RMSNorm and LayerNorm (eager, textbook, compiled, fast) "
        "and of a copy, float32, one thread, medians of interleaved rounds: the speed ratio "
        "the RMSNorm chapter, the fast appendix, the summary and the questions state",
        compute="normedu.experiments.rmsnorm_speed:measure",
        params={
            "shapes": [[2048, 1024], [512, 4096]],
            "impls": ["eager", "textbook", "compiled", "fast"],
            "reps": 15,
            "warmup": 1,
        },
        pages=("book/rmsnorm", "book/fast", "book/summary", "book/questions"),
    ),
    "prms_time_ratio": Record(
        description="time of pRMSNorm (the RMS of the first p of the features) over full "
        "RMSNorm at each fraction p, eager torch, float32, one thread, medians of interleaved "
        "rounds: the RMSNorm chapter's table and claim",
        compute="normedu.experiments.rmsnorm:prms_times",
        params={"ps": [0.0625, 0.125, 0.25, 0.5, 1.0], "d": 1024, "seed": 0},
        pages=("book/rmsnorm",),
    ),
    "cpu_kernel_bench": Record(
        description="forward and forward+backward time of every LayerNorm and RMSNorm "
        "implementation and of a copy, float32, at the quick preset's shape "
        "(`python -m normedu.bench --quick`): the fast appendix's bandwidth figure and tables",
        compute="normedu.bench.runner:measure_book_run",
        # The preset and skips themselves are normedu.bench's QUICK preset and QUICK_SKIP:
        # tests/test_records.py checks that the stored run measured them.
        params={"preset": "quick"},
        pages=("book/fast",),
    ),
    "cpu_kernel_ablation": Record(
        description="best-of-reps forward time of a copy, the Inductor LayerNorm kernel and "
        "the C kernel with ordinary and with streaming stores, float32, at two sizes: the fast "
        "appendix's ablation table",
        compute="normedu.ablation:measure",
        params={"runs": [[2048, 4096, 9], [8192, 4096, 5]], "seed": 0},
        pages=("book/fast",),
    ),
    "bn_seed_runs": Record(
        description="not a timing: the BatchNorm chapter's training experiments (batch-size "
        "sweep, distribution shift, eval-mode CNN, calibration, the DDP table's errors) on "
        "seeds 0-4 at the CPU preset, the seeds its verdicts rest on (the chapter runs one live)",
        compute="normedu.experiments.batchnorm_seeds:measure",
        params={"seeds": [0, 1, 2, 3, 4]},
        pages=("book/batchnorm",),
        # its words are seed-dependent verdicts: the reseeding audit must measure them again
        seeded=True,
    ),
    # Not a timing: the multi-seed runs behind the verdicts of one page, too slow to run every
    # time it executes (normedu/experiments/since2020_seeds.py); stored here for the same
    # reason as the timings, and measured by the same command.
    "since2020_placement_seeds": Record(
        description="the one-step update sizes, the training at depth and the QK-norm "
        "learning-rate sweep of the placements chapter, at its CPU sizes, for seeds 0-4: the "
        "runs its verdicts rest on",
        compute="normedu.experiments.since2020_seeds:measure",
        params={"seeds": 5, "preset": "cpu"},
        pages=("book/since2020_placement",),
        seeded=True,  # about 76 CPU-s a measurement: the reseeding audit can afford it
    ),
    "nonorm_step_speed": Record(
        description="CPU seconds per training step (forward, backward, Adam) of the no-norm "
        "chapter's TinyGPT with each norm variant, one thread, interleaved rounds: the "
        "chapter's speed table and its DyT speed claim",
        compute="normedu.experiments.since2020_nonorm_seeds:step_speed",
        params={"reps": 9, "steps": 10, "warmup": 3},
        pages=("book/since2020_nonorm",),
    ),
    "nonorm_seeds": Record(
        description="the no-norm chapter's comparison at five seeds (losses after 80 and 240 "
        "steps, gradient profiles at initialization, the LayerNorm curve's fits, DyT from "
        "other alpha0, what the branches read at initialization): its multi-seed verdicts",
        compute="normedu.experiments.since2020_nonorm_seeds:measure_seeds",
        params={"seeds": [0, 1, 2, 3, 4], "preset": "cpu", "alphas": [0.2, 1.0]},
        pages=("book/since2020_nonorm",),
        seeded=True,
    ),
}

_MEMORY: dict[str, dict[str, Any]] = {}


def _spec(name: str) -> Record:
    if name not in RECORDS:
        raise KeyError(f"no record named {name!r}; the records are {sorted(RECORDS)}")
    return RECORDS[name]


def path(name: str) -> Path | None:
    """``<course root>/results/cpu/timings/<name>.json``, or None outside a course checkout
    (and for a seeded record under a nonzero seed offset: kept in memory only)."""
    spec = _spec(name)
    root = course_root()
    if root is None or (spec.seeded and _offset() != 0):
        return None
    return root / FOLDER / f"{name}.json"


def _offset() -> int:
    from .seeding import offset

    return offset()


def _stored(name: str) -> dict[str, Any] | None:
    """The stored record if it measured this record's params (else None)."""
    p = path(name)
    if p is None or not p.exists():
        return None
    try:
        rec = read_record(p)
    except (ValueError, json.JSONDecodeError):
        return None
    meta = rec["provenance"].get("record", {})
    return rec if meta.get("params") == _spec(name).params else None


def stale() -> list[str]:
    """Names of the records to measure again: missing, measured with other params, or not
    measured alone."""
    out = []
    for name in RECORDS:
        if path(name) is None and RECORDS[name].seeded:
            continue  # under another seed offset: measured by the page that reads it
        rec = _stored(name)
        if rec is None or not rec["provenance"]["record"].get("alone"):
            out.append(name)
    return out


def compute(name: str, *, alone: bool = False, replace: bool = True) -> dict[str, Any]:
    """Compute record ``name`` and store it; returns ``{"provenance", "data"}``.

    ``alone``: measured with nothing else of a build running (``make timings``, the timing
    phase).
    ``replace=False``: if another process stored the record meanwhile, keep and return
    that one (first stored wins), so that concurrent readers agree.
    """
    spec = _spec(name)
    module, func = spec.compute.split(":")
    data, prov = getattr(importlib.import_module(module), func)(**spec.params)
    prov = {**prov, "record": {"name": name, "params": spec.params, "alone": alone}}
    rec = make_record(data, prov)
    p = path(name)
    if p is None:
        return rec
    tmp = p.with_name(f".{p.name}.{os.getpid()}")
    write_record(tmp, data, prov)
    if replace:
        os.replace(tmp, p)
        return rec
    try:
        os.link(tmp, p)  # fails if another process stored it first
    except FileExistsError:
        rec = _stored(name) or rec
    finally:
        tmp.unlink()
    return rec


def read(name: str) -> dict[str, Any]:
    """Record ``name`` as ``{"provenance", "data"}``: the stored one, else computed now.

    Within one process a record is read from disk once.
    """
    if name not in _MEMORY:
        rec = _stored(name)
        if rec is None:
            p = path(name)
            if p is not None and p.exists():
                p.unlink()  # measured with other params: measure again
            rec = compute(name, replace=False)
        _MEMORY[name] = rec
    return _MEMORY[name]


def main(argv: list[str] | None = None) -> int:
    """``python -m normedu.records [--alone] [--stale] [NAME ...]``: compute records (all, the
    named ones, or the stale timings) and store them under ``results/cpu/timings``."""
    ap = argparse.ArgumentParser(prog="python -m normedu.records", description=main.__doc__)
    ap.add_argument("names", nargs="*", help=f"records to compute (of {sorted(RECORDS)})")
    ap.add_argument(
        "--alone", action="store_true", help="mark them measured with nothing else running"
    )
    ap.add_argument("--stale", action="store_true", help="only the stale records")
    args = ap.parse_args(argv)
    names = stale() if args.stale else (args.names or list(RECORDS))
    for name in names:
        rec = compute(name, alone=args.alone)
        print(f"{name}: {RECORDS[name].description} ({rec['provenance'].get('device')})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
