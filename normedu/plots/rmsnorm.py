"""Figures of the RMSNorm chapter: the worked example, the speed ratio, pRMSNorm."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from . import COLORS, Figure, figure
from .prepost import short_device

if TYPE_CHECKING:  # pragma: no cover
    from ..bench import BenchResult
    from ..experiments.rmsnorm import PRMSResult

IMPL_STYLE = {
    "eager": ("o", "-"),
    "textbook": ("s", "--"),
    "compiled": ("^", "-."),
    "fast": ("D", ":"),
}


def example_figure(ex: dict[str, Any]) -> Figure:
    """Bars of x, its LayerNorm and its RMSNorm output, with each output's mean as a line."""
    fig, ax = figure(width=7.0, height=3.6)
    d = len(ex["x"])
    idx = np.arange(d)
    w = 0.27
    ax.bar(idx - w, ex["x"], w, color=COLORS["none"], label="input x")
    ax.bar(idx, ex["ln"], w, color=COLORS["layernorm"], label="LayerNorm(x)")
    ax.bar(idx + w, ex["rms_out"], w, color=COLORS["rmsnorm"], label="RMSNorm(x)")
    ax.axhline(
        ex["ln_mean"],
        color=COLORS["layernorm"],
        lw=1,
        ls="--",
        label=f"LayerNorm output mean {ex['ln_mean']:.4f}",
    )
    ax.axhline(
        ex["rms_out_mean"],
        color=COLORS["rmsnorm"],
        lw=1,
        ls="--",
        label=f"RMSNorm output mean {ex['rms_out_mean']:.4f}",
    )
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(idx, [f"x{i}" for i in idx])
    ax.set_xlabel("feature")
    ax.set_ylabel("value")
    ax.set_title("One vector, two normalizations: RMSNorm keeps the mean's sign")
    ax.set_ylim(top=max(ex["x"]) * 1.6)  # room for the legend above the bars
    ax.legend(fontsize=8, loc="upper left", ncols=2)
    return fig


def _ratio_panel(ax, res: BenchResult, title: str) -> None:
    rows = [r for r in res.rows() if r["pass_"] == "fwd" and r["dtype"] == "float32"]
    impls = [i for i in IMPL_STYLE if any(r["impl"] == i for r in rows)]
    for impl in impls:
        shapes = sorted({(r["n"], r["d"]) for r in rows if r["impl"] == impl}, key=lambda s: s[1])
        pts = []
        for n, d in shapes:
            try:
                pts.append((d, res.ratio(impl, n, d)))
            except KeyError:
                continue
        if not pts:
            continue
        marker, ls = IMPL_STYLE[impl]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ls=ls, label=impl)
    ax.axhline(1.0, color="black", lw=1)
    ax.axhspan(0.75, 0.9, color=COLORS["rmsnorm"], alpha=0.12, label="claimed: 10–25% faster")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("feature width D")
    ax.set_ylabel("time RMSNorm / time LayerNorm")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)


def speed_ratio_figure(live: BenchResult, stored: BenchResult | None = None) -> Figure:
    """RMSNorm / LayerNorm forward time per implementation vs D: this device and stored GPU.

    Below the line at 1, RMSNorm is faster. Without a stored run only the live panel is drawn.
    """
    if stored is None:
        fig, left = figure(1, 1, width=6.5, height=4.2)
    else:
        fig, (left, right) = figure(1, 2, width=11.0, height=4.2)
    _ratio_panel(left, live, f"This device: {short_device(live.device)}")
    if stored is not None:
        _ratio_panel(right, stored, f"Stored GPU run: {short_device(stored.device)}")
    fig.suptitle("Is RMSNorm faster? Forward time ratio, float32 (below 1: yes)")
    return fig


def prms_figure(res: PRMSResult) -> Figure:
    """Left: error of the partial RMS estimate vs p. Right: time of pRMSNorm vs full RMSNorm."""
    fig, (left, right) = figure(1, 2, width=10.0, height=3.8)
    pct = res.ps * 100
    left.plot(
        pct, res.rel_err_equal * 100, "o-", color=COLORS["rmsnorm"], label="features of equal scale"
    )
    left.plot(
        pct,
        res.rel_err_unequal * 100,
        "s--",
        color=COLORS["batchnorm"],
        label="features of unequal scale",
    )
    left.set_xscale("log", base=2)
    left.set_xlabel("p: % of features used for the RMS")
    left.set_ylabel("median |RMS_p / RMS − 1| (%)")
    left.set_title(f"Accuracy of the partial RMS ({res.shape[0]}×{res.shape[1]})")
    left.legend(fontsize=8)
    if np.isnan(res.time_ratio).all():
        right.text(0.5, 0.5, "not timed", ha="center", va="center", transform=right.transAxes)
    else:
        right.bar(range(len(pct)), res.time_ratio, color=COLORS["rmsnorm"])
        right.set_xticks(range(len(pct)), [f"{p:g}%" for p in pct])
    right.axhline(1.0, color="black", lw=1)
    right.set_xlabel("p")
    right.set_ylabel("time of pRMSNorm / time at p = 100%")
    right.set_title("Time of pRMSNorm (eager torch, this device)")
    return fig
