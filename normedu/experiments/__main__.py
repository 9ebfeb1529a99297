"""``python -m normedu.experiments``: run the scale experiments; ``--store`` keeps their output.

THE one command that regenerates every stored GPU result of the scale experiments::

    python -m normedu.experiments --store            # on a CUDA machine: all, full size

writes ``results/gpu/<name>.json`` (``{"provenance", "data"}``, via
:func:`normedu.results.save_stored`) for every experiment registered with
:func:`normedu.experiments.scale_experiment`. On a machine without CUDA it refuses to store
unless ``--allow-cpu`` is given, so that CPU numbers are never filed as GPU ones.

Other options: ``--list`` (names only), ``--only NAME`` (repeatable), ``--preset cpu|cuda``
(default: the device's; ``NORMEDU_PRESET`` works too), ``--out DIR`` (write there instead of
``results/gpu``). Without ``--store`` the experiments run and a one-line summary per
experiment is printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..device import PRESETS, preset_name
from . import registered

COMMAND = "python -m normedu.experiments --store"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m normedu.experiments",
        description="Run the scale experiments; --store writes results/gpu/<name>.json.",
    )
    parser.add_argument("--store", action="store_true", help="store the results")
    parser.add_argument(
        "--allow-cpu",
        action="store_true",
        help="allow --store without CUDA (the files then name the CPU)",
    )
    parser.add_argument("--only", action="append", metavar="NAME", help="run only NAME")
    parser.add_argument("--preset", choices=PRESETS, help="size preset (default: the device's)")
    parser.add_argument("--out", type=Path, help="directory to write to instead of results/gpu")
    parser.add_argument("--list", action="store_true", help="list the experiments and exit")
    args = parser.parse_args(argv)

    experiments = registered()
    if args.list:
        print("\n".join(sorted(experiments)))
        return 0
    names = args.only or sorted(experiments)
    unknown = [n for n in names if n not in experiments]
    if unknown:
        parser.error(f"unknown experiment(s) {unknown}; known: {sorted(experiments)}")
    if args.store and not _cuda_available() and not args.allow_cpu:
        print(
            "refusing to --store without CUDA: results/gpu holds GPU runs only. "
            "Run this on a CUDA machine, or pass --allow-cpu (e.g. with --out) to store a "
            "CPU run that says so in its provenance.",
            file=sys.stderr,
        )
        return 2
    preset = args.preset or preset_name()
    command = (
        f"python -m normedu.experiments {' '.join(argv if argv is not None else sys.argv[1:])}"
    )
    for name in names:
        t0 = time.perf_counter()
        data = experiments[name](preset)
        secs = time.perf_counter() - t0
        if not args.store:
            print(f"{name}: ran at preset {preset!r} in {secs:.1f} s (not stored)")
            continue
        if args.out is not None:
            from ..provenance import provenance
            from ..results import write_record

            path = write_record(args.out / f"{name}.json", data, provenance(command.strip()))
        else:
            from ..results import save_stored

            path = save_stored(name, data, command=command.strip())
        print(f"{name}: stored {path} (preset {preset!r}, {secs:.1f} s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
