"""Running the benchmark: every variant of a shape and dtype timed interleaved, rows built.

Timing itself is :mod:`normedu.timing`'s; this module decides what to run and turns samples
into rows (median, fastest, bandwidth, fraction of the copy at the same shape and dtype).
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from .report import BenchResult
from .traffic import ideal_bytes, itemsize
from .variants import (
    ALLOCATOR_NOTE,
    EPS,
    IMPLS,
    PASSES,
    QUICK_SKIP,
    Preset,
    Selection,
    copy_variants,
    make_variant,
    preset_named,
)

__all__ = ["run_benchmark", "measure_book_run", "book_run", "BOOK_RECORD"]


def run_benchmark(
    preset: Preset | str = "quick",
    selection: Selection | None = None,
    *,
    device: str | None = None,
    seed: int = 0,
    progress: bool = True,
    command: str | None = None,
) -> BenchResult:
    """Measure every variant of ``selection``, interleaved round-robin per shape and dtype.

    Inputs:
    - preset: a :class:`Preset` or the name of one of :data:`PRESETS` (``"quick"``,
      ``"full"``): shapes, warmup and reps; ``PRESETS["quick"].override(reps=3)`` changes
      some. With a preset's time budget, a variant slower than the budget gets fewer reps
      (at least ``min_reps``; each row records its ``reps``).
    - selection: the ops, implementations, passes and dtypes measured (:class:`Selection`;
      None: its defaults, the forward of eager, textbook and compiled in float32).
      Variants that do not exist (numpy in bfloat16, fast_out backward) are listed in
      ``meta["skipped"]``, as are those the selection skips.
    - device: ``"cpu"``/``"cuda"``; default CUDA when available.
    - seed: inputs are ``randn`` from this seed (weight and bias too, so no term is trivial).
    - progress: tqdm progress bar on stderr.
    - command: recorded in the provenance (default: this process's command line).

    Returns a :class:`BenchResult`.
    """
    import torch

    from .. import fast
    from ..device import pick_device
    from ..provenance import provenance
    from ..timing import Timer, inner_for, interleaved, rounds_within

    pre = preset_named(preset)
    selection = selection or Selection()
    ops, impls, passes, dtypes = selection.ops, selection.impls, selection.passes, selection.dtypes
    warmup, reps, budget_s = pre.warmup, pre.reps, pre.budget_s
    dev = pick_device(device)
    timer = Timer(dev)

    from tqdm.std import tqdm  # tqdm.auto draws a widget that static pages show as raw JSON

    rows: list[dict[str, Any]] = []
    copies: list[dict[str, Any]] = []
    skipped: list[str] = []
    groups = [(s, dt) for s in pre.shapes for dt in dtypes]
    n_variants = len(ops) * len(impls) * len(passes) + 2
    bar = tqdm(
        total=len(groups) * n_variants * (1 + warmup + reps),
        desc="normedu.bench",
        disable=not progress,
        file=sys.stderr,
        unit="call",
    )
    for (n, d), dt in groups:
        dtype = getattr(torch, dt)
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(n, d, generator=gen).to(device=dev, dtype=dtype)
        w = torch.randn(d, generator=gen).to(device=dev, dtype=dtype)
        b = torch.randn(d, generator=gen).to(device=dev, dtype=dtype)
        dy = torch.randn(n, d, generator=gen).to(device=dev, dtype=dtype)
        out = torch.empty_like(x)
        fast_backend = fast.backend(x)
        variants = copy_variants(x)
        for op in ops:
            for impl in impls:
                for pass_ in passes:
                    fn = None
                    if f"{impl}/{pass_}" not in selection.skip:
                        fn = make_variant(op, impl, pass_, x, w, b, dy, out)
                    if fn is None:
                        skipped.append(f"{op}/{impl}/{pass_}/{dt}")
                        bar.update(1 + warmup + reps)
                        continue
                    compiles = impl in ("compiled", "fast", "fast_out")
                    variants.append(({"op": op, "impl": impl, "pass_": pass_}, fn, compiles))
        # First calls (compilation included), then a second call each: a rough per-call time
        # that sizes the CUDA samples and, on a CPU, decides which variants are primed.
        first: list[float] = []
        second: list[float] = []
        for _, fn, _ in variants:
            first.append(timer(fn))
            second.append(timer(fn))
            bar.update(1)
        inner = [inner_for(t, pre.cuda_sample_s) if dev.type == "cuda" else 1 for t in second]
        rounds = [
            reps if budget_s is None else rounds_within(t * k, reps, pre.min_reps, budget_s)
            for t, k in zip(second, inner, strict=True)
        ]
        samples = interleaved(
            [fn for _, fn, _ in variants],
            rounds,
            timer=timer,
            warmup=warmup,
            inner=inner,
            probes=second,
            on_call=lambda: bar.update(1),
        )
        bar.update(sum(reps - r for r in rounds))  # the rounds the slow variants sat out
        copy_med, copy_min = statistics.median(samples[0]), min(samples[0])
        copy_bytes = ideal_bytes(n, d, "fwd", itemsize(dt))
        copy_gbps = copy_bytes / copy_med / 1e9
        for (spec, _, compiles), s, t_first in zip(variants, samples, first, strict=True):
            med = statistics.median(s)
            bytes_ = ideal_bytes(n, d, spec["pass_"], itemsize(dt))
            gbps = bytes_ / med / 1e9
            row = {
                **spec,
                "dtype": dt,
                "n": n,
                "d": d,
                "median_s": med,
                "min_s": min(s),
                "max_s": max(s),
                "reps": len(s),
                "gbps": gbps,
                "frac_of_copy": gbps / copy_gbps,
                "compile_s": max(0.0, t_first - med) if compiles else 0.0,
                # best against best: interference from other work only ever slows a call down
                "frac_best": (copy_min / min(s)) * (bytes_ / copy_bytes),
            }
            if spec["impl"] in ("fast", "fast_out"):
                row["backend"] = fast_backend
            (copies if spec["op"] == "copy" else rows).append(row)
        variants.clear()
    bar.close()
    meta = {
        "preset": pre.name,
        "warmup": warmup,
        "reps": reps,
        "budget_s": budget_s,
        "seed": seed,
        "eps": EPS,
        "skipped": skipped,
        "allocator_note": ALLOCATOR_NOTE if dev.type == "cpu" else "",
        "device_type": dev.type,
        "bytes_model": "fwd: 2*N*D*itemsize; fwdbwd: 5*N*D*itemsize",
    }
    return BenchResult(rows, copies, provenance(command, device=str(dev)), meta)


#: The record of the run the "Making it fast" appendix shows (:mod:`normedu.records`).
BOOK_RECORD = "cpu_kernel_bench"


def measure_book_run(preset: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, provenance)`` of exactly what ``python -m normedu.bench --quick`` measures
    (float32, every implementation and pass but :data:`QUICK_SKIP`) at ``preset``: the
    record :data:`BOOK_RECORD`, measured alone (``make timings``)."""
    res = run_benchmark(
        preset,
        Selection(impls=IMPLS, passes=PASSES, skip=QUICK_SKIP),
        device="cpu",
        progress=False,
        command=f"python -m normedu.records {BOOK_RECORD}",
    )
    return res.to_dict(), res.provenance


def book_run() -> BenchResult:
    """The run the "Making it fast" appendix shows and its claim checks reuse, read from its
    stored record."""
    from ..records import read

    return BenchResult.from_record(read(BOOK_RECORD))
