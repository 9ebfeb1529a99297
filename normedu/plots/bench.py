"""Figures of the benchmark (:mod:`normedu.bench`): the reader's device beside a stored GPU run.

Each panel shows, for one device, the effective bandwidth of every implementation's forward
pass as a fraction of that device's measured copy bandwidth (1.0 = as fast as a plain copy,
the roofline), LayerNorm and RMSNorm side by side: bars for the medians, black dashes for the
fastest call against the fastest copy. Without a stored GPU run the figure shows this device
alone; nothing is invented. RMSNorm bars are hatched, so the two norms differ without colour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import COLORS, HATCHES, Figure, figure

# From bench's submodules, never the package: bench/__init__ imports bench/cli, which imports
# this module, so ``from ..bench import ...`` here would close an import circle.
if TYPE_CHECKING:  # pragma: no cover
    from ..bench.report import BenchResult


def headline_shape(res: BenchResult, pass_: str = "fwd", dtype: str = "float32") -> tuple[int, int]:
    """The measured (N, D) with the largest D (then the largest N): the most memory-bound one."""
    shapes = {(r["n"], r["d"]) for r in res.rows() if r["pass_"] == pass_ and r["dtype"] == dtype}
    if not shapes:
        raise ValueError(f"the result has no {pass_} {dtype} rows")
    return max(shapes, key=lambda s: (s[1], s[0]))


def _panel(ax, res: BenchResult, title: str, pass_: str, dtype: str) -> None:
    from ..bench.variants import IMPLS

    n, d = headline_shape(res, pass_, dtype)
    rows = [
        r for r in res.rows() if (r["n"], r["d"], r["pass_"], r["dtype"]) == (n, d, pass_, dtype)
    ]
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    width = 0.38
    for k, op in enumerate(("layernorm", "rmsnorm")):
        xs, hs, best = [], [], []
        for j, impl in enumerate(impls):
            match = [r for r in rows if r["impl"] == impl and r["op"] == op]
            if match:
                xs.append(j + (k - 0.5) * width)
                hs.append(match[0]["frac_of_copy"])
                best.append(match[0].get("frac_best", float("nan")))
        label = "LayerNorm (median)" if op == "layernorm" else "RMSNorm (median)"
        bars = ax.bar(
            xs, hs, width=width, color=COLORS[op], hatch=HATCHES[op], edgecolor="white", label=label
        )
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        ax.scatter(
            xs,
            best,
            marker="_",
            s=120,
            color="black",
            zorder=3,
            label="fastest call vs fastest copy" if k == 0 else None,
        )
    ax.axhline(1.0, color="black", lw=1.0, ls="-", label="copy bandwidth (roofline)")
    try:
        clone = res.copy_row(n, d, dtype, "clone")["frac_of_copy"]
        ax.axhline(clone, color=COLORS["none"], lw=1.0, ls=":", label="clone (fresh output)")
    except KeyError:
        pass
    ax.set_xticks(range(len(impls)), impls, rotation=20)
    ax.set_ylabel("effective bandwidth / copy bandwidth")
    ax.set_title(
        f"{title}\n{n}×{d} {dtype} {pass_}, copy {res.copy_row(n, d, dtype)['gbps']:.1f} GB/s",
        fontsize=10,
    )
    ax.set_ylim(0, max(1.15, ax.get_ylim()[1]))
    ax.legend(loc="upper left", fontsize=7)


def bench_figure(
    res: BenchResult,
    stored: BenchResult | None = None,
    pass_: str = "fwd",
    dtype: str = "float32",
) -> Figure:
    """``res`` (this device) beside ``stored`` (a GPU run); one panel and a note when none exists.

    Bars: fraction of copy bandwidth per implementation at the headline shape (largest D).
    """
    if stored is None:
        # One readable panel rather than a wide figure with an empty half: the column of the
        # page would shrink the labels of two panels below legibility.
        fig, left = figure(1, 1, width=7.5, height=4.6)
        _panel(left, res, f"This device: {_short(res.device)}", pass_, dtype)
    else:
        # One panel above the other: side by side, the page's column would shrink the labels
        # of both below legibility.
        fig, (left, right) = figure(2, 1, width=7.5, height=8.6)
        _panel(left, res, f"This device: {_short(res.device)}", pass_, dtype)
        _panel(right, stored, f"Stored GPU run: {_short(stored.device)}", pass_, dtype)
    fig.suptitle("How close each implementation gets to memory bandwidth (higher is better)")
    return fig


def time_figure(res: BenchResult, pass_: str = "fwd", dtype: str = "float32") -> Figure:
    """Median time (ms, log scale) per implementation and op at every measured shape."""
    from ..bench.variants import IMPLS

    shapes = sorted(
        {(r["n"], r["d"]) for r in res.rows() if r["pass_"] == pass_ and r["dtype"] == dtype},
        key=lambda s: (s[1], s[0]),
    )
    fig, axes = figure(1, len(shapes), width=max(5.5, 4.5 * len(shapes)), height=4.0, squeeze=False)
    for ax, (n, d) in zip(axes[0], shapes, strict=True):
        rows = [
            r
            for r in res.rows()
            if (r["n"], r["d"], r["pass_"], r["dtype"]) == (n, d, pass_, dtype)
        ]
        impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
        for k, op in enumerate(("layernorm", "rmsnorm")):
            pts = [
                (j, r)
                for j, i in enumerate(impls)
                for r in rows
                if r["impl"] == i and r["op"] == op
            ]
            xs = [j + (k - 0.5) * 0.38 for j, _ in pts]
            med = [r["median_s"] * 1e3 for _, r in pts]
            lo = [(r["median_s"] - r["min_s"]) * 1e3 for _, r in pts]
            hi = [(r["max_s"] - r["median_s"]) * 1e3 for _, r in pts]
            ax.bar(
                xs,
                med,
                width=0.38,
                color=COLORS[op],
                hatch=HATCHES[op],
                edgecolor="white",
                yerr=[lo, hi],
                capsize=2,
                label="LayerNorm" if op == "layernorm" else "RMSNorm",
            )
        floor = res.copy_row(n, d, dtype)["median_s"] * 1e3
        ax.axhline(floor, color="black", lw=1.0, label="copy (floor)")
        ax.set_yscale("log")
        ax.set_xticks(range(len(impls)), impls, rotation=20)
        ax.set_ylabel("median time per call (ms)")
        ax.set_title(f"{n}×{d} {dtype} {pass_}", fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(f"Time per call with min–max range: {_short(res.device)}")
    return fig


def _short(device: str) -> str:
    return device if len(device) <= 48 else device[:45] + "..."
