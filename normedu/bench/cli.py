"""The command line: ``python -m normedu.bench [--quick] [--store] [--out DIR] ...``."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .report import BenchResult
from .runner import run_benchmark
from .variants import DTYPES, IMPLS, OPS, PASSES, PRESETS, QUICK_SKIP, STORED_NAME, Selection

__all__ = ["main", "bf16_supported"]


def bf16_supported(device) -> bool:
    """Whether ``device`` computes bfloat16 natively: a CUDA GPU that says so, or a CPU with
    AVX-512 BF16 or AMX-BF16 instructions (elsewhere bfloat16 is emulated and its timings
    would say little about memory)."""
    import torch

    if torch.device(device).type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _parse_shape(text: str) -> tuple[int, int]:
    try:
        n, d = (int(v) for v in text.lower().replace("x", ",").split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"shape must look like 8192x4096, got {text!r}") from err
    return n, d


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m normedu.bench [--quick] [--store] [--out DIR] [--dtype ...] ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m normedu.bench",
        description="Benchmark LayerNorm/RMSNorm implementations against memory bandwidth.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="quick preset (under a minute on 2 CPU cores; no NumPy/textbook backward)",
    )
    parser.add_argument(
        "--store", action="store_true", help="also store as results/gpu/bench.json (CUDA only)"
    )
    parser.add_argument("--out", default="bench-out", help="output folder (default: bench-out/)")
    parser.add_argument(
        "--dtype",
        nargs="+",
        choices=DTYPES,
        default=None,
        help="default: float32, plus bfloat16 where supported (not with --quick)",
    )
    parser.add_argument("--impl", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument("--op", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument("--pass", dest="passes", nargs="+", choices=PASSES, default=list(PASSES))
    parser.add_argument(
        "--shape",
        nargs="+",
        type=_parse_shape,
        default=None,
        help="shapes like 8192x4096 (default: the preset's)",
    )
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--no-progress", action="store_true")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    from ..device import pick_device

    dev = pick_device(args.device)
    if args.store and dev.type != "cuda":
        parser.error("--store writes the stored GPU result: run it on a CUDA device")
    dtypes = args.dtype
    if dtypes is None:
        dtypes = ["float32"]
        if not args.quick and bf16_supported(dev):
            dtypes.append("bfloat16")
    t0 = time.perf_counter()
    preset = PRESETS["quick" if args.quick else "full"]
    selection = Selection(
        ops=args.op,
        impls=args.impl,
        passes=args.passes,
        dtypes=dtypes,
        skip=QUICK_SKIP if args.quick else (),
    )
    res = run_benchmark(
        preset.override(shapes=args.shape, warmup=args.warmup, reps=args.reps),
        selection,
        device=args.device,
        progress=not args.no_progress,
        command=shlex.join(["python", "-m", "normedu.bench", *argv]),
    )
    res.meta["wall_s"] = time.perf_counter() - t0
    out = Path(args.out)
    json_path = res.save(out / "bench.json")
    from ..plots.bench import bench_figure

    fig = bench_figure(res, stored=None if args.store else BenchResult.load_stored())
    fig.savefig(out / "bench.png", dpi=110)
    print(f"device: {res.device}; copy bandwidth {res.copy_gbps:.1f} GB/s")
    print(f"wall time {res.meta['wall_s']:.1f} s (compilation included)")
    for dt in dtypes:
        for pass_ in args.passes:
            print(f"\n{pass_} {dt}\n" + res.table_markdown(pass_, dt))
    print(f"\nwrote {json_path}, {json_path.with_suffix('.csv')}, {out / 'bench.png'}")
    if args.store:
        from ..results import save_stored

        path = save_stored(
            STORED_NAME, res.to_dict(), command=res.provenance["command"], device=str(dev)
        )
        print(f"stored {path}")
    return 0
