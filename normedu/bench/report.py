"""A benchmark's results (:class:`BenchResult`: rows, copies, provenance) and its reports
(Markdown tables for the book and the command line).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .traffic import aten_traffic, itemsize
from .variants import EPS, IMPLS, PASSES, ROW_KEYS, STORED_NAME

__all__ = [
    "BenchResult",
    "ratios_markdown",
    "compile_markdown",
    "repetitions_note",
    "traffic_markdown",
]


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
        big = max(copies, key=lambda r: (r["n"] * r["d"] * itemsize(r["dtype"]), r["gbps"]))
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
        from ..results import write_record

        path = write_record(path, self.to_dict(), self.provenance)
        with open(path.with_suffix(".csv"), "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=ROW_KEYS)
            writer.writeheader()
            for r in [*self.copies, *self._rows]:
                writer.writerow({k: r[k] for k in ROW_KEYS})
        return path

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> BenchResult:
        from ..results import check_record

        data = check_record(record, "a benchmark record")["data"]
        return cls(
            _rows=list(data["rows"]),
            copies=list(data["copies"]),
            provenance=dict(record["provenance"]),
            meta=dict(data.get("meta", {})),
        )

    @classmethod
    def load(cls, path: str | Path) -> BenchResult:
        from ..results import read_record

        return cls.from_record(read_record(path))

    @classmethod
    def load_stored(cls) -> BenchResult | None:
        """The stored GPU run (``results/gpu/bench.json``), or None if none was ever stored."""
        from ..results import load_stored

        record = load_stored(STORED_NAME)
        return None if record is None else cls.from_record(record)

    def table_markdown(self, pass_: str = "fwd", dtype: str = "float32", ratio: bool = True) -> str:
        """Markdown table: per shape and implementation, LN and RMS time, GB/s, fraction of copy,
        and (``ratio``) RMS / LN time. A page that states the forward ratio from the speed
        record (:mod:`normedu.experiments.rmsnorm_speed`) leaves the column out."""
        # GPU kernels take tens of microseconds: milliseconds with 2 decimals would hide them.
        scale, unit, fmt = (1e6, "µs", ".1f") if self.device_type == "cuda" else (1e3, "ms", ".2f")
        lines = [
            f"| N × D | implementation | LayerNorm {unit} | RMSNorm {unit} | LN GB/s | RMS GB/s "
            "| LN / copy: median (best) | RMS / copy: median (best) |"
            + (" RMS / LN |" if ratio else ""),
            "|---|---|---|---|---|---|---|---|" + ("---|" if ratio else ""),
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
                    f" | {ln['gbps']:.1f} | {rms['gbps']:.1f} | {_frac(ln)} | {_frac(rms)} |"
                    + (f" {rms['median_s'] / ln['median_s']:.2f} |" if ratio else "")
                )
            for kind in ("copy", "clone"):
                try:
                    c = self.copy_row(n, d, dtype, kind)
                except KeyError:
                    continue
                lines.append(
                    f"| {n} × {d} | {kind} ({'preallocated' if kind == 'copy' else 'fresh'} "
                    f"output) | {c['median_s'] * scale:{fmt}} | | {c['gbps']:.1f} | | "
                    f"{c['frac_of_copy']:.2f} | |" + (" |" if ratio else "")
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


def repetitions_note(res: BenchResult) -> str:
    """How many timed calls the variants got, for a sentence: "9 timed repetitions per
    variant", plus, when the time budget gave the slowest fewer, which ones and how many."""
    rows = res.rows()
    most = max(r["reps"] for r in rows)
    fewer = [r for r in rows if r["reps"] < most]
    note = f"{most} timed repetitions per variant"
    if not fewer:
        return note
    counts = sorted({r["reps"] for r in fewer})
    span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    names = ", ".join(f"{r['impl']} {r['op']} {r['pass_']}" for r in fewer)
    return (
        f"{note}; {span} for the slowest ({names}), whose samples stop after about "
        f"{res.meta['budget_s']:g} s"
    )


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

    from .. import nn

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
