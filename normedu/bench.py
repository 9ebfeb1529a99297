"""Benchmark suite: how close each LayerNorm/RMSNorm implementation gets to memory bandwidth.

Normalization is memory-bound: its time floor is the bytes it must move divided by the memory
bandwidth. The suite measures, in one run and on one device:

* the device's achievable bandwidth, as a large copy ``dst.copy_(x)`` into a preallocated
  ``dst`` (and, to show the CPU allocator effect, ``x.clone()`` into a fresh tensor);
* for each op (``"layernorm"``, ``"rmsnorm"``), implementation, pass, dtype and shape: the
  median, min and max time of ``reps`` timed calls after the first call and ``warmup`` more
  untimed ones (the first call is timed apart: it includes compilation), the effective
  bandwidth ``gbps = ideal bytes / median`` and its fraction of the copy bandwidth measured at
  the same shape and dtype (``frac_of_copy``, medians; ``frac_best``, fastest call against
  fastest copy, the robust estimate on a machine shared with other work).

Implementations (``impls``):

========== ===================================================================================
eager      ``torch.nn.functional.layer_norm`` / ``rms_norm``: PyTorch's own kernels
textbook   :func:`normedu.nn.layer_norm` / ``rms_norm``: one torch op per line, autograd backward
compiled   the textbook code through ``torch.compile`` (Inductor; autograd backward compiled too)
numpy      :mod:`normedu.functional`: NumPy forward and hand-written backward (not bfloat16)
fast       :mod:`normedu.fast`: fused compiled kernels, hand-written fused backward
fast_out   ``fast`` writing into a preallocated output (``out=``; forward only)
========== ===================================================================================

Passes: ``"fwd"`` (inference: nothing requires grad) and ``"fwdbwd"`` (forward + backward with
a fixed random upstream gradient; gradients of x, weight and bias). Ideal bytes: forward reads x
and writes y, ``2*N*D*itemsize``; forward + backward adds reading x and dy and writing dx,
``5*N*D*itemsize`` in all. Parameters (D elements) are ignored.

Honesty rules the code follows:

* Timing is :mod:`normedu.timing`'s. Every timed call of one shape/dtype is interleaved
  round-robin with the others (and with the copy), so a machine whose load changes during
  the run slows every variant alike.
* The first call of each variant is timed separately: for the compiled ones it includes the
  compilation, reported as ``compile_s = first call - median`` (0.0 for variants that do not
  compile). Compiled code is cached per process, so a second run reports about zero.
* On CUDA each sample is bracketed by CUDA events and synchronized; each sample runs the
  variant several times back to back (``inner``, sized to about 2 ms) so that Python launch
  overhead overlaps GPU work; the time reported is per call. For shapes whose kernel takes
  less than the launch overhead (a few tens of µs) the overhead is what gets measured: that is
  what a Python caller pays too.
* On a CPU a fresh large output is ``mmap``-ed by glibc (its mmap threshold is at most 32 MiB),
  so the first write to each page faults and the operating system zeroes it. Every variant but
  ``fast_out`` pays this, as a model would; ``copy`` vs ``clone`` and ``fast`` vs ``fast_out``
  show its size.

Use from Python::

    from normedu.bench import run_benchmark
    res = run_benchmark(shapes=[(2048, 4096)], impls=("eager", "fast"), preset="quick")
    res.rows(); res.ratio("eager", 2048, 4096); res.copy_gbps; res.save("bench-out/bench.json")

or from the shell: ``python -m normedu.bench --quick`` (see :func:`main`).
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPS = ("layernorm", "rmsnorm")
IMPLS = ("eager", "textbook", "compiled", "numpy", "fast", "fast_out")
PASSES = ("fwd", "fwdbwd")
DTYPES = ("float32", "bfloat16", "float16")
#: Name of the stored GPU result: ``results/gpu/bench.json``.
STORED_NAME = "bench"
EPS = 1e-5
ROW_KEYS = (
    "op",
    "impl",
    "pass_",
    "dtype",
    "n",
    "d",
    "median_s",
    "min_s",
    "max_s",
    "reps",
    "gbps",
    "frac_of_copy",
    "compile_s",
    "frac_best",
)
ALLOCATOR_NOTE = (
    "CPU: fresh large outputs are mmap-ed by glibc (mmap threshold <= 32 MiB), so the first "
    "write to each 4 KiB page faults and the operating system zeroes it; 'copy' writes into a "
    "preallocated tensor, 'clone' into a fresh one, and 'fast_out' is 'fast' with a "
    "preallocated output."
)


@dataclass(frozen=True)
class Preset:
    """Repetitions and default shapes of a benchmark preset."""

    #: untimed calls after the first call (which is itself untimed as a sample)
    warmup: int
    reps: int
    shapes: tuple[tuple[int, int], ...]
    #: target duration (s) of one CUDA sample; each sample repeats the call to reach it.
    cuda_sample_s: float = 2e-3


PRESETS: dict[str, Preset] = {
    "quick": Preset(warmup=0, reps=9, shapes=((2048, 4096),)),
    "full": Preset(
        warmup=3,
        reps=25,
        shapes=((8192, 768), (8192, 2048), (8192, 4096), (4096, 8192), (2048, 16384)),
    ),
}

#: What ``python -m normedu.bench --quick`` and the book leave out: the unfused backwards
#: (NumPy, textbook) take about a second per call at the quick shape and teach nothing new
#: about speed.
QUICK_SKIP = ("numpy/fwdbwd", "textbook/fwdbwd")


def ideal_bytes(n: int, d: int, pass_: str, itemsize: int) -> int:
    """Bytes a perfect kernel moves: fwd reads x, writes y; fwdbwd also reads x, dy, writes dx."""
    if pass_ not in PASSES:
        raise ValueError(f"pass_ must be one of {PASSES}, got {pass_!r}")
    return (2 if pass_ == "fwd" else 5) * n * d * itemsize


def floor_seconds(n: int, d: int, bandwidth_bytes_per_s: float, itemsize: int = 4) -> float:
    """Roofline floor of the forward pass: ``2*N*D*itemsize / bandwidth`` (seconds)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_bytes_per_s}")
    return ideal_bytes(n, d, "fwd", itemsize) / bandwidth_bytes_per_s


# --------------------------------------------------------------------------- traffic model


@dataclass(frozen=True)
class OpTraffic:
    """One ATen operator an eager call dispatched, and the bytes its tensors occupy."""

    op: str
    bytes_in: int
    bytes_out: int

    @property
    def bytes(self) -> int:
        return self.bytes_in + self.bytes_out


def aten_traffic(fn: Callable[[], Any]) -> list[OpTraffic]:
    """The ATen operators ``fn()`` dispatches, each with the bytes of its tensor inputs and
    outputs: an unfused implementation moves about ``sum(op.bytes)`` through memory (each op
    reads its inputs and writes its outputs in full; nothing stays in cache between ops).

    Works for eager code only: a compiled function is one opaque call.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def nbytes(tree) -> int:
        return sum(
            t.numel() * t.element_size() for t in tree_leaves(tree) if isinstance(t, torch.Tensor)
        )

    log: list[OpTraffic] = []

    class _Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name not in ("detach", "expand", "view", "_unsafe_view", "t"):  # no data moved
                log.append(OpTraffic(name, nbytes((args, kwargs)), nbytes(out)))
            return out

    with _Log():
        fn()
    return log


# --------------------------------------------------------------------------- results


@dataclass
class BenchResult:
    """Rows of a benchmark run plus the copy measurements and provenance.

    - ``_rows``: one dict per measured variant, keys :data:`ROW_KEYS`.
    - ``copies``: dicts with the same keys for ``op="copy"``, ``impl`` ``"copy"`` (into a
      preallocated tensor) or ``"clone"`` (into a fresh one), ``pass_="fwd"``.
    - ``provenance``: :func:`normedu.provenance.provenance` of the run.
    - ``meta``: preset, repetitions, skipped variants (with why), the allocator note.
    """

    _rows: list[dict[str, Any]]
    copies: list[dict[str, Any]]
    provenance: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per variant: op, impl, pass_, dtype, n, d, median_s, min_s, max_s, reps,
        gbps, frac_of_copy (median against the copy's median), compile_s, and frac_best
        (fastest call against the fastest copy; copies excluded: see :attr:`copies`)."""
        return [dict(r) for r in self._rows]

    def find(
        self, op: str, impl: str, n: int, d: int, pass_: str = "fwd", dtype: str = "float32"
    ) -> dict[str, Any]:
        """The row of one variant; KeyError naming what was measured if it is missing."""
        for r in self._rows:
            if _key(r) == (op, impl, pass_, dtype, n, d):
                return dict(r)
        have = sorted(
            {(r["op"], r["impl"], r["pass_"], r["dtype"], r["n"], r["d"]) for r in self._rows}
        )
        raise KeyError(f"no row for {(op, impl, pass_, dtype, n, d)}; measured: {have}")

    def ratio(self, impl: str, n: int, d: int, pass_: str = "fwd", dtype: str = "float32") -> float:
        """Median time of RMSNorm divided by that of LayerNorm for one implementation family
        (below 1: RMSNorm is faster)."""
        rms = self.find("rmsnorm", impl, n, d, pass_, dtype)["median_s"]
        ln = self.find("layernorm", impl, n, d, pass_, dtype)["median_s"]
        return rms / ln

    def copy_row(self, n: int, d: int, dtype: str = "float32", impl: str = "copy") -> dict:
        """The copy (``impl="copy"``) or clone (``impl="clone"``) measurement of one shape."""
        for r in self.copies:
            if (r["impl"], r["dtype"], r["n"], r["d"]) == (impl, dtype, n, d):
                return dict(r)
        raise KeyError(f"no {impl} measurement for {(n, d, dtype)}")

    @property
    def copy_gbps(self) -> float:
        """Copy bandwidth (GB/s, preallocated destination) of the largest tensor measured."""
        copies = [r for r in self.copies if r["impl"] == "copy"]
        if not copies:
            return math.nan
        big = max(copies, key=lambda r: (r["n"] * r["d"] * _itemsize(r["dtype"]), r["gbps"]))
        return big["gbps"]

    @property
    def device(self) -> str:
        return str(self.provenance.get("device", "unknown device"))

    @property
    def device_type(self) -> str:
        """``"cpu"`` or ``"cuda"``: the kind of device the run measured."""
        return str(self.meta.get("device_type", "cpu"))

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self._rows, "copies": self.copies, "meta": self.meta}

    def save(self, path: str | Path) -> Path:
        """Write ``{"provenance", "data"}`` JSON to ``path`` and a CSV of the rows beside it."""
        from .results import write_record

        path = write_record(path, self.to_dict(), self.provenance)
        with open(path.with_suffix(".csv"), "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=ROW_KEYS)
            writer.writeheader()
            for r in [*self.copies, *self._rows]:
                writer.writerow({k: r[k] for k in ROW_KEYS})
        return path

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> BenchResult:
        from .results import check_record

        data = check_record(record, "a benchmark record")["data"]
        return cls(
            _rows=list(data["rows"]),
            copies=list(data["copies"]),
            provenance=dict(record["provenance"]),
            meta=dict(data.get("meta", {})),
        )

    @classmethod
    def load(cls, path: str | Path) -> BenchResult:
        from .results import read_record

        return cls.from_record(read_record(path))

    @classmethod
    def load_stored(cls) -> BenchResult | None:
        """The stored GPU run (``results/gpu/bench.json``), or None if none was ever stored."""
        from .results import load_stored

        record = load_stored(STORED_NAME)
        return None if record is None else cls.from_record(record)

    def table_markdown(self, pass_: str = "fwd", dtype: str = "float32") -> str:
        """Markdown table: per shape and implementation, LN and RMS time, GB/s, fraction of copy."""
        # GPU kernels take tens of microseconds: milliseconds with 2 decimals would hide them.
        scale, unit, fmt = (1e6, "µs", ".1f") if self.device_type == "cuda" else (1e3, "ms", ".2f")
        lines = [
            f"| N × D | implementation | LayerNorm {unit} | RMSNorm {unit} | LN GB/s | RMS GB/s "
            "| LN / copy: median (best) | RMS / copy: median (best) | RMS / LN |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        shapes = sorted({(r["n"], r["d"]) for r in self._rows})
        impls = [i for i in IMPLS if any(r["impl"] == i for r in self._rows)]
        for n, d in shapes:
            for impl in impls:
                try:
                    ln = self.find("layernorm", impl, n, d, pass_, dtype)
                    rms = self.find("rmsnorm", impl, n, d, pass_, dtype)
                except KeyError:
                    continue
                lines.append(
                    f"| {n} × {d} | {impl} | {ln['median_s'] * scale:{fmt}}"
                    f" | {rms['median_s'] * scale:{fmt}}"
                    f" | {ln['gbps']:.1f} | {rms['gbps']:.1f} | {_frac(ln)} | {_frac(rms)}"
                    f" | {rms['median_s'] / ln['median_s']:.2f} |"
                )
            for kind in ("copy", "clone"):
                try:
                    c = self.copy_row(n, d, dtype, kind)
                except KeyError:
                    continue
                lines.append(
                    f"| {n} × {d} | {kind} ({'preallocated' if kind == 'copy' else 'fresh'} "
                    f"output) | {c['median_s'] * scale:{fmt}} | | {c['gbps']:.1f} | | "
                    f"{c['frac_of_copy']:.2f} | | |"
                )
        return "\n".join(lines)


def ratios_markdown(res: BenchResult, n: int, d: int, dtype: str = "float32") -> str:
    """Markdown table: RMSNorm / LayerNorm median time per implementation family and pass."""
    lines = ["| implementation | RMS / LN forward | RMS / LN forward + backward |", "|---|---|---|"]
    for impl in IMPLS:
        cells = []
        for pass_ in PASSES:
            try:
                cells.append(f"{res.ratio(impl, n, d, pass_, dtype):.2f}")
            except KeyError:
                cells.append("–")
        if any(c != "–" for c in cells):
            lines.append(f"| {impl} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def compile_markdown(res: BenchResult) -> str:
    """Markdown table: first-call compile time (s) of every compiled variant."""
    lines = [
        "| implementation | op | pass | N × D | compile (s) | run (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for r in res.rows():
        if r["impl"] in ("compiled", "fast", "fast_out"):
            lines.append(
                f"| {r['impl']} | {r['op']} | {r['pass_']} | {r['n']} × {r['d']} "
                f"| {r['compile_s']:.2f} | {r['median_s'] * 1e3:.2f} |"
            )
    return "\n".join(lines)


def traffic_markdown(n: int, d: int, res: BenchResult | None = None) -> str:
    """Markdown table: the ATen ops the eager and textbook implementations dispatch at (n, d) in
    float32 and the bytes they move, counted in *passes* over the tensor (``N*D*4`` bytes; a
    perfect forward makes 2: read x, write y). With ``res``, also the passes its measured
    forward time implies: ``2 * time / copy time`` (a copy makes exactly 2)."""
    import torch
    import torch.nn.functional as F

    from . import nn

    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(n, d, generator=gen), torch.randn(d, generator=gen), torch.randn(d)
    one_pass = n * d * 4
    cases = {
        ("layernorm", "eager"): lambda: F.layer_norm(x, (d,), w, b, EPS),
        ("rmsnorm", "eager"): lambda: F.rms_norm(x, (d,), w, EPS),
        ("layernorm", "textbook"): lambda: nn.layer_norm(x, w, b, EPS),
        ("rmsnorm", "textbook"): lambda: nn.rms_norm(x, w, EPS),
    }
    head = "| implementation | op | ATen ops dispatched | passes counted |"
    rule = "|---|---|---|---|"
    if res is not None:
        head += " passes implied by the measured time |"
        rule += "---|"
    lines = [head, rule]
    for (op, impl), fn in cases.items():
        traffic = aten_traffic(fn)
        ops = ", ".join(t.op for t in traffic)
        passes = sum(t.bytes for t in traffic) / one_pass
        row = f"| {impl} | {op} | {len(traffic)}: {ops} | {passes:.1f} |"
        if res is not None:
            row += f" {2 / res.find(op, impl, n, d)['frac_of_copy']:.1f} |"
        lines.append(row)
    return "\n".join(lines)


def _frac(r: dict[str, Any]) -> str:
    return f"{r['frac_of_copy']:.2f} ({r.get('frac_best', float('nan')):.2f})"


def _key(r: dict[str, Any]) -> tuple:
    return (r["op"], r["impl"], r["pass_"], r["dtype"], r["n"], r["d"])


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}[dtype]


# --------------------------------------------------------------------------- variants


@functools.cache
def _compiled_textbook(op: str):
    import torch

    from . import fast, nn

    fast.raise_recompile_limit()

    fn = nn.layer_norm if op == "layernorm" else nn.rms_norm
    return torch.compile(fn, dynamic=False)


def _make_variant(op: str, impl: str, pass_: str, x, w, b, dy, out) -> Callable[[], Any] | None:
    """A zero-argument callable running one variant, or None if it does not exist."""
    import torch
    import torch.nn.functional as F

    from . import fast, functional, nn

    d = x.shape[-1]
    if impl == "numpy":
        if x.dtype not in (torch.float32, torch.float64):
            return None
        xn, wn, bn, dyn = (t.detach().cpu().numpy() for t in (x, w, b, dy))
        if op == "layernorm":
            if pass_ == "fwd":
                return lambda: functional.layer_norm(xn, wn, bn, EPS)

            def run_ln():
                functional.layer_norm(xn, wn, bn, EPS)
                return functional.layer_norm_backward(dyn, xn, wn, EPS)

            return run_ln
        if pass_ == "fwd":
            return lambda: functional.rms_norm(xn, wn, EPS)

        def run_rms():
            functional.rms_norm(xn, wn, EPS)
            return functional.rms_norm_backward(dyn, xn, wn, EPS)

        return run_rms

    if impl == "fast_out":
        if pass_ != "fwd":
            return None
        if op == "layernorm":
            return lambda: fast.layer_norm(x, w, b, EPS, out=out)
        return lambda: fast.rms_norm(x, w, EPS, out=out)

    fns = {
        ("layernorm", "eager"): lambda x_, w_, b_: F.layer_norm(x_, (d,), w_, b_, EPS),
        ("rmsnorm", "eager"): lambda x_, w_, b_: F.rms_norm(x_, (d,), w_, EPS),
        ("layernorm", "textbook"): lambda x_, w_, b_: nn.layer_norm(x_, w_, b_, EPS),
        ("rmsnorm", "textbook"): lambda x_, w_, b_: nn.rms_norm(x_, w_, EPS),
        ("layernorm", "fast"): lambda x_, w_, b_: fast.layer_norm(x_, w_, b_, EPS),
        ("rmsnorm", "fast"): lambda x_, w_, b_: fast.rms_norm(x_, w_, EPS),
    }
    if impl == "compiled":
        comp = _compiled_textbook(op)
        if op == "layernorm":
            fn = lambda x_, w_, b_: comp(x_, w_, b_, EPS)  # noqa: E731
        else:
            fn = lambda x_, w_, b_: comp(x_, w_, EPS)  # noqa: E731
    else:
        fn = fns[(op, impl)]
    if pass_ == "fwd":
        return lambda: fn(x, w, b)
    xg, wg, bg = (t.detach().clone().requires_grad_(True) for t in (x, w, b))

    def run_fwdbwd():
        xg.grad = wg.grad = bg.grad = None
        fn(xg, wg, bg).backward(dy)

    return run_fwdbwd


# --------------------------------------------------------------------------- timing


def _copy_variants(x) -> list[tuple[dict[str, Any], Callable[[], Any], bool]]:
    """The two copies: into a preallocated tensor (the roofline) and into a fresh one."""
    import torch

    dst = torch.empty_like(x)
    return [
        ({"op": "copy", "impl": "copy", "pass_": "fwd"}, lambda: dst.copy_(x), False),
        ({"op": "copy", "impl": "clone", "pass_": "fwd"}, lambda: x.clone(), False),
    ]


def _normalize_shapes(shapes) -> list[tuple[int, int]]:
    out = []
    for s in shapes:
        if len(s) != 2 or any(int(v) != v or v <= 0 for v in s):
            raise ValueError(f"each shape must be (N, D) with positive integers, got {s!r}")
        out.append((int(s[0]), int(s[1])))
    return out


def _check_choice(name: str, values: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        values = (values,)
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ValueError(
            f"{name} must be a non-empty subset of {tuple(allowed)}, got {tuple(values)}"
        )
    return tuple(values)


def run_benchmark(
    shapes: Sequence[tuple[int, int]] | None = None,
    ops: Sequence[str] = OPS,
    impls: Sequence[str] = ("eager", "textbook", "compiled"),
    passes: Sequence[str] = ("fwd",),
    dtypes: Sequence[str] = ("float32",),
    preset: str = "quick",
    progress: bool = True,
    device: str | None = None,
    warmup: int | None = None,
    reps: int | None = None,
    seed: int = 0,
    command: str | None = None,
    skip: Sequence[str] = (),
) -> BenchResult:
    """Measure every requested variant, interleaved round-robin per shape and dtype.

    Inputs:
    - shapes: list of (N, D); None for the preset's shapes.
    - ops, impls, passes, dtypes: subsets of :data:`OPS`, :data:`IMPLS`, :data:`PASSES`,
      :data:`DTYPES`. Variants that do not exist (numpy in bfloat16, fast_out backward) are
      listed in ``meta["skipped"]``, as are those named in ``skip``.
    - preset: ``"quick"`` or ``"full"`` (:data:`PRESETS`); ``warmup``/``reps`` override it.
    - progress: tqdm progress bar on stderr.
    - device: ``"cpu"``/``"cuda"``; default CUDA when available.
    - seed: inputs are ``randn`` from this seed (weight and bias too, so no term is trivial).
    - command: recorded in the provenance (default: this process's command line).
    - skip: ``"impl/pass"`` variants to leave out, e.g. :data:`QUICK_SKIP`.

    Returns a :class:`BenchResult`.
    """
    import torch

    from . import fast
    from .device import pick_device
    from .provenance import provenance
    from .timing import Timer, inner_for, interleaved

    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {tuple(PRESETS)}, got {preset!r}")
    pre = PRESETS[preset]
    ops = _check_choice("ops", ops, OPS)
    impls = _check_choice("impls", impls, IMPLS)
    passes = _check_choice("passes", passes, PASSES)
    dtypes = _check_choice("dtypes", dtypes, DTYPES)
    shapes = _normalize_shapes(pre.shapes if shapes is None else shapes)
    if not shapes:
        raise ValueError("shapes must not be empty")
    warmup = pre.warmup if warmup is None else int(warmup)
    reps = pre.reps if reps is None else int(reps)
    if reps < 1 or warmup < 0:
        raise ValueError(f"need reps >= 1 and warmup >= 0, got reps={reps}, warmup={warmup}")
    dev = pick_device(device)
    timer = Timer(dev)

    from tqdm.std import tqdm  # tqdm.auto draws a widget that static pages show as raw JSON

    rows: list[dict[str, Any]] = []
    copies: list[dict[str, Any]] = []
    skipped: list[str] = []
    groups = [(s, dt) for s in shapes for dt in dtypes]
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
        variants = _copy_variants(x)
        for op in ops:
            for impl in impls:
                for pass_ in passes:
                    fn = None
                    if f"{impl}/{pass_}" not in skip:
                        fn = _make_variant(op, impl, pass_, x, w, b, dy, out)
                    if fn is None:
                        skipped.append(f"{op}/{impl}/{pass_}/{dt}")
                        bar.update(1 + warmup + reps)
                        continue
                    compiles = impl in ("compiled", "fast", "fast_out")
                    variants.append(({"op": op, "impl": impl, "pass_": pass_}, fn, compiles))
        # First calls (compilation included), then a rough per-call time to size CUDA samples.
        first: list[float] = []
        inner: list[int] = []
        for _, fn, _ in variants:
            first.append(timer(fn))
            inner.append(inner_for(timer(fn), pre.cuda_sample_s) if dev.type == "cuda" else 1)
            bar.update(1)
        samples = interleaved(
            [fn for _, fn, _ in variants],
            reps,
            timer=timer,
            warmup=warmup,
            inner=inner,
            on_call=lambda: bar.update(1),
        )
        copy_med, copy_min = statistics.median(samples[0]), min(samples[0])
        copy_bytes = ideal_bytes(n, d, "fwd", _itemsize(dt))
        copy_gbps = copy_bytes / copy_med / 1e9
        for (spec, _, compiles), s, t_first in zip(variants, samples, first, strict=True):
            med = statistics.median(s)
            bytes_ = ideal_bytes(n, d, spec["pass_"], _itemsize(dt))
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
        "preset": preset,
        "warmup": warmup,
        "reps": reps,
        "seed": seed,
        "eps": EPS,
        "skipped": skipped,
        "allocator_note": ALLOCATOR_NOTE if dev.type == "cpu" else "",
        "device_type": dev.type,
        "bytes_model": "fwd: 2*N*D*itemsize; fwdbwd: 5*N*D*itemsize",
    }
    return BenchResult(rows, copies, provenance(command, device=str(dev)), meta)


_CACHE: dict[tuple, BenchResult] = {}


def run_cached(**kwargs: Any) -> BenchResult:
    """:func:`run_benchmark` memoized on its arguments (lists become tuples; ``progress`` is
    not part of the key): a chapter and its claim checks share one run."""
    key = tuple(sorted((k, _freeze(v)) for k, v in kwargs.items() if k != "progress"))
    if key not in _CACHE:
        _CACHE[key] = run_benchmark(**kwargs)
    return _CACHE[key]


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def book_run(progress: bool = True) -> BenchResult:
    """The run the "Making it fast" chapter shows and its claim checks reuse: exactly what
    ``python -m normedu.bench --quick`` measures (float32, every implementation and pass but
    :data:`QUICK_SKIP`)."""
    return run_cached(
        shapes=None,
        impls=IMPLS,
        passes=PASSES,
        dtypes=("float32",),
        preset="quick",
        progress=progress,
        skip=QUICK_SKIP,
    )


# --------------------------------------------------------------------------- CLI


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

    from .device import pick_device

    dev = pick_device(args.device)
    if args.store and dev.type != "cuda":
        parser.error("--store writes the stored GPU result: run it on a CUDA device")
    dtypes = args.dtype
    if dtypes is None:
        dtypes = ["float32"]
        if not args.quick and bf16_supported(dev):
            dtypes.append("bfloat16")
    t0 = time.perf_counter()
    res = run_benchmark(
        shapes=args.shape,
        ops=args.op,
        impls=args.impl,
        passes=args.passes,
        dtypes=dtypes,
        preset="quick" if args.quick else "full",
        progress=not args.no_progress,
        device=args.device,
        warmup=args.warmup,
        reps=args.reps,
        command=shlex.join(["python", "-m", "normedu.bench", *argv]),
        skip=QUICK_SKIP if args.quick else (),
    )
    res.meta["wall_s"] = time.perf_counter() - t0
    out = Path(args.out)
    json_path = res.save(out / "bench.json")
    from .plots.bench import bench_figure

    fig = bench_figure(res, stored=None if args.store else BenchResult.load_stored())
    fig.savefig(out / "bench.png", dpi=110)
    print(f"device: {res.device}; copy bandwidth {res.copy_gbps:.1f} GB/s")
    print(f"wall time {res.meta['wall_s']:.1f} s (compilation included)")
    for dt in dtypes:
        for pass_ in args.passes:
            print(f"\n{pass_} {dt}\n" + res.table_markdown(pass_, dt))
    print(f"\nwrote {json_path}, {json_path.with_suffix('.csv')}, {out / 'bench.png'}")
    if args.store:
        from .results import save_stored

        path = save_stored(
            STORED_NAME, res.to_dict(), command=res.provenance["command"], device=str(dev)
        )
        print(f"stored {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
