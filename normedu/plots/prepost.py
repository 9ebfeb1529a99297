"""Figures of the Pre-Norm vs Post-Norm chapter: data flows, gradients at init, the fits of
Xiong et al.'s argument, training and the learning-rate x warm-up heat map.

A figure that can show a stored GPU run beside the live one draws only the live panels when
none is stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from . import COLORS, Figure, figure

if TYPE_CHECKING:  # pragma: no cover
    from ..experiments.prepost import InitGradNorms, WarmupSweep, WideCheck

#: Okabe-Ito colours (colour-blind safe) and markers for the lines of one comparison.
SERIES_COLORS = ("#000000", "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
SERIES_MARKERS = ("o", "s", "^", "v", "D", "P", "X")


def short_device(device: str, width: int = 40) -> str:
    return device if len(device) <= width else device[: width - 3] + "..."


# --------------------------------------------------------------------------- data flow


def _box(ax, x, y, text, color, w=1.6, h=0.5):
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.04", fc=color, ec="black", lw=1
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def _arrow(ax, a, b, rad=0.0, color="black"):
    ax.add_patch(
        FancyArrowPatch(
            a,
            b,
            arrowstyle="-|>",
            mutation_scale=12,
            lw=1.2,
            color=color,
            connectionstyle=f"arc3,rad={rad}",
        )
    )


def _plus(ax, x, y):
    ax.add_patch(
        FancyBboxPatch(
            (x - 0.18, y - 0.18), 0.36, 0.36, boxstyle="circle,pad=0", fc="white", ec="black"
        )
    )
    ax.text(x, y, "+", ha="center", va="center", fontsize=12)


def dataflow_figure() -> Figure:
    """The two placements of one sub-block drawn side by side (input at the bottom).

    Post-Norm: ``x -> Sublayer -> (+ x) -> Norm``. Pre-Norm: ``x -> Norm -> Sublayer ->
    (+ x)``, with the residual (orange) bypassing the norm.
    """
    fig, axes = figure(1, 2, width=9.0, height=5.0)
    norm_c, sub_c, res_c = "#cfe2f3", "#fce5cd", COLORS["post"]
    for ax, kind in zip(axes, ("post", "pre"), strict=True):
        ax.set_xlim(-1.6, 2.2)
        ax.set_ylim(-0.6, 5.0)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.text(0, -0.45, "x (input)", ha="center", fontsize=9)
        if kind == "post":
            _box(ax, 0, 1.2, "Sublayer\n(attention / MLP)", sub_c)
            _plus(ax, 0, 2.5)
            _box(ax, 0, 3.6, "LayerNorm", norm_c)
            _arrow(ax, (0, -0.25), (0, 0.95))
            _arrow(ax, (0, 1.45), (0, 2.32))
            _arrow(ax, (0, 2.68), (0, 3.35))
            _arrow(ax, (0, 3.85), (0, 4.7))
            _arrow(ax, (0.1, 0.2), (0.18, 2.5), rad=0.6, color=res_c)
            ax.text(0, 4.8, "LN(x + Sublayer(x))", ha="center", fontsize=9)
            ax.set_title("Post-Norm (Vaswani et al., 2017)\nevery path crosses the norm")
        else:
            _box(ax, 0, 1.0, "LayerNorm", norm_c)
            _box(ax, 0, 2.2, "Sublayer\n(attention / MLP)", sub_c)
            _plus(ax, 0, 3.5)
            _arrow(ax, (0, -0.25), (0, 0.75))
            _arrow(ax, (0, 1.25), (0, 1.95))
            _arrow(ax, (0, 2.45), (0, 3.32))
            _arrow(ax, (0, 3.68), (0, 4.7))
            _arrow(ax, (0.1, 0.0), (0.18, 3.5), rad=0.55, color=res_c)
            ax.text(0, 4.8, "x + Sublayer(LN(x))", ha="center", fontsize=9)
            ax.set_title("Pre-Norm (GPT-2, LLaMA)\nthe residual path skips the norm")
        ax.text(1.45, 2.0, "residual", color=res_c, fontsize=9, rotation=90, va="center")
    fig.suptitle("One sub-block, two placements of the norm (repeated twice per block)")
    return fig


# --------------------------------------------------------------------------- gradients at init


def _init_panels(axes, res: InitGradNorms, source: str) -> None:
    cmap = {d: c for d, c in zip(res.depths, np.linspace(0.25, 1.0, len(res.depths)), strict=True)}
    for ax, placement in zip(axes, ("post", "pre"), strict=True):
        for depth in res.depths:
            prof = res.profile(placement, depth)
            layers = np.arange(1, depth + 1)
            color = (
                (*np.array([0, 0.2, 0.5]) * cmap[depth], 1.0)
                if placement == "pre"
                else (0.85 * cmap[depth], 0.37 * cmap[depth], 0.0, 1.0)
            )
            ax.plot(
                layers,
                prof,
                color=color,
                marker="." if depth <= 12 else None,
                label=f"{depth} layers (max/min {prof.max() / prof.min():.1f})",
            )
        ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
        ax.set_xlabel("layer (1 = next to the input)")
        if placement == "post":  # the panels share their y axis: one label, on the left
            ax.set_ylabel("‖∇ W2 of the FFN‖ at init")
        name = "Post-LN" if placement == "post" else "Pre-LN"
        where = f" ({source})" if source else ""
        ax.set_title(f"{name}, d_model {res.d_model}{where}", fontsize=10)
        ax.legend(fontsize=7)


def _plain(value: float, _pos=None) -> str:
    return f"{value:g}"


def _log_y_labels(ax, fine: bool = False) -> None:
    """Label a log y axis with plain numbers, wherever its range falls.

    Gradient norms at init often span less than one decade: a log axis then has no major tick
    (a power of ten) inside it and, with the minor ticks unlabelled, no label at all. The
    narrower the range, the more multiples of each power of ten are labelled (1, 2, 5 below
    two decades, every integer multiple below 0.7 of one), so at least two labels show.
    ``fine``: for ratios near 1 spanning at most 1.2 decades, also 1.2 and 1.5 (and every
    integer multiple), so that values between 1 and 2 can be read.
    """
    lo, hi = ax.get_ylim()
    decades = np.log10(hi / lo)
    subs = (1.0,) if decades > 2 else (1.0, 2.0, 5.0) if decades > 0.7 else np.arange(1.0, 10.0)
    if fine and decades <= 1.2:  # values near 1 (ratios): label 1.2, 1.5 too, not only 1 and 2
        subs = (1.0, 1.2, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(NullFormatter())


def init_grad_figure(
    live: InitGradNorms, stored: InitGradNorms | None = None, stored_device: str = ""
) -> Figure:
    """Per-layer FFN-W2 gradient norm at init: Post-LN left, Pre-LN right; one line per depth.

    Top row: the live run. A second row, the stored GPU run, only when one is given.
    """
    # Post-LN and Pre-LN share the axes of their row, so their gradients compare at a glance.
    if stored is None:
        fig, axes = figure(1, 2, width=11.0, height=4.2, sharex=True, sharey=True)
        _init_panels(axes, live, "")
        rows = [axes]
    else:
        fig, axes = figure(2, 2, width=11.0, height=8.0, sharex=True, sharey="row")
        _init_panels(axes[0], live, "")
        _init_panels(axes[1], stored, f"stored GPU run {short_device(stored_device, 30)}")
        rows = list(axes)
    for row in rows:
        _log_y_labels(row[0])  # the row's shared y axis
        row[1].tick_params(labelleft=True)  # each panel keeps its own tick labels
    fig.suptitle(
        "Gradient norm per layer at initialization (the quantity of Xiong et al.'s Fig. 3)"
    )
    return fig


# --------------------------------------------------------------------------- paper width


def wide_figure(res: WideCheck) -> Figure:
    """Per-layer gradient norm at init at the paper's width, each profile over its layer 1.

    Left Post-LN, right Pre-LN. One line per model: PyTorch's ``nn.TransformerEncoderLayer``
    stack (black), TinyGPT as is, with each switch alone, and with all switches. The legend
    gives each line's last/first ratio; a line above 1 at the right edge grows toward the
    output.
    """
    from ..experiments.prepost import SWITCHES

    # One style per row label, the same in both panels.
    order = ["reference", "", *SWITCHES, "all switches"]
    fig, axes = figure(1, 2, width=11.5, height=4.6, sharey=True)
    for ax, placement in zip(axes, ("post", "pre"), strict=True):
        rows = [res.get("nn.TransformerEncoderLayer", placement), *res.switch_rows(placement)]
        for row in rows:
            i = order.index(row.changes if row.model == "TinyGPT" else "reference")
            prof = np.asarray(row.norms)
            label = row.model if not row.changes else f"TinyGPT, {row.changes}"
            if row.model == "TinyGPT" and not row.changes:
                label = "TinyGPT as is"
            ax.plot(
                np.arange(1, len(prof) + 1),
                prof / prof[0],
                color=SERIES_COLORS[i % len(SERIES_COLORS)],
                marker=SERIES_MARKERS[i % len(SERIES_MARKERS)],
                ls="-" if i < 2 else ("--" if row.changes != "all switches" else ":"),
                lw=2.0 if i == 0 else 1.3,
                ms=4,
                label=f"{label} ({row.last_over_first:.2f})",
            )
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("layer (1 = next to the input)")
        ax.set_ylabel("‖∇ W2‖ relative to layer 1")
        name = "Post-LN" if placement == "post" else "Pre-LN"
        ax.set_title(f"{name}, d_model {res.size.d_model}, {res.size.n_layers} layers")
        ax.legend(fontsize=7, title="model (last/first)", title_fontsize=7)
    fig.suptitle("Gradient of the FFN's second matrix at initialization, at the paper's width")
    return fig


# --------------------------------------------------------------------------- scaling fits


def _fit_line(ax, x, slope: float, y_at_first: float, color: str, label: str) -> None:
    """A power law through (x[0], y_at_first) with exponent ``slope``, dotted."""
    x = np.asarray(x, dtype=float)
    ax.plot(x, y_at_first * (x / x[0]) ** slope, color=color, ls=":", lw=1.2, label=label)


def scaling_figure(res: InitGradNorms, expected: dict[str, dict[str, float]]) -> Figure:
    """The two fits of Xiong et al.'s argument on the init sweep, log-log axes.

    Left: the residual stream's norm ||x_l|| after block l of the deepest stack, both
    placements, with a fitted power law each. Right: the last block's FFN-W2 gradient against
    the depth L, both placements, with fitted power laws. ``expected``: the predicted exponents
    (:data:`normedu.experiments.prepost.EXPECTED_SLOPES`), given in the legends.
    """
    from ..experiments.prepost import loglog_slope

    def num(x: float) -> str:  # two decimals, no "-0.00" for a flat line
        return f"{round(x, 2) + 0.0:.2f}"

    fig, (left, right) = figure(1, 2, width=11.0, height=4.3)
    deepest = max(res.depths)
    for placement in ("pre", "post"):
        name = "Pre-LN" if placement == "pre" else "Post-LN"
        color = COLORS[placement]
        prof = res.stream_profile(placement)
        layers = np.arange(1, len(prof) + 1)
        k = res.stream_slope(placement)
        left.plot(layers, prof, color=color, marker=".", lw=1.2, label=f"{name}, measured")
        fit = np.exp(np.polyfit(np.log(layers), np.log(prof), 1)[1])
        _fit_line(
            left,
            layers,
            k,
            fit,
            color,
            f"{name} fit: slope {num(k)} (predicted {expected['stream'][placement]:g})",
        )
        # Right: relative to the shallowest stack, so batch and per-token slopes compare.
        series = [("batch", res.last_layer(placement), "o", "-")]
        if res.has_tokens:
            series.append(("per token", res.last_layer_token(placement), "s", "--"))
        for kind, values, marker, ls in series:
            rel = values / values[0]
            g = loglog_slope(res.depths, rel)
            right.plot(
                res.depths,
                rel,
                color=color,
                marker=marker,
                ls=ls,
                lw=1.2,
                mfc=color if kind == "batch" else "white",
                label=f"{name}, {kind}, measured",
            )
            fit = np.exp(np.polyfit(np.log(res.depths), np.log(rel), 1)[1])
            what = "batch fit" if kind == "batch" else "per-token fit"
            _fit_line(
                right,
                res.depths,
                g,
                fit * res.depths[0] ** g,
                color,
                f"{name} {what}: slope {num(g)} (predicted {expected['last_layer'][placement]:g})",
            )
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    left.legend(fontsize=7)
    right.legend(fontsize=6.5, loc="lower left", framealpha=0.9)
    right.set_xticks(res.depths)  # every measured depth labelled
    _log_y_labels(left)
    _log_y_labels(right, fine=True)
    right.grid(True, which="major", axis="y", lw=0.4, alpha=0.5)
    left.set_xlabel("block l (1 = next to the input)")
    left.set_ylabel("‖x_l‖, residual stream after block l")
    left.set_title(f"Residual stream at init, {deepest}-layer stacks", fontsize=10)
    right.set_xlabel("depth L (layers)")
    right.set_ylabel(f"last block's ‖∇ W2‖ at init, relative to L = {res.depths[0]}")
    right.set_title("Last layer's FFN gradient against depth", fontsize=10)
    fig.suptitle(f"Testing Xiong et al.'s Theorem 1 (d_model {res.d_model}, log-log axes)")
    return fig


# --------------------------------------------------------------------------- warm-up sweep


def warmup_heatmap(sweep: WarmupSweep) -> Figure:
    """Share of seeds that trained over learning rate (rows) x warm-up steps (columns), one
    panel per placement, one colour scale (viridis, 0 to 1), "k/n" and the median final loss
    in each cell.

    A cell with a diverged run shows "NaN" for its median loss. Brighter is better: bright
    cells trained on every seed, dark ones on none.
    """
    fig, axes = figure(1, 2, width=10.0, height=4.0, sharey=True)
    image = None
    for ax, placement in zip(axes, ("post", "pre"), strict=True):
        counts = sweep.trained_counts(placement)
        losses = sweep.final_losses(placement)
        share = counts / sweep.seeds
        image = ax.imshow(share, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        for i in range(share.shape[0]):
            for j in range(share.shape[1]):
                v = losses[i, j]
                # dark text on the light (high-share) end of viridis, light text on the dark end
                color = "black" if share[i, j] > 0.6 else "white"
                loss = f"{v:.2f}" if np.isfinite(v) else "NaN"
                text = f"{counts[i, j]}/{sweep.seeds}\n({loss})"
                ax.text(j, i, text, ha="center", va="center", color=color, fontsize=9)
        ax.set_xticks(range(len(sweep.warmups)), [str(w) for w in sweep.warmups])
        ax.set_yticks(range(len(sweep.lrs)), [f"{lr:g}" for lr in sweep.lrs])
        ax.set_xlabel(f"warm-up steps (of {sweep.steps})")
        name = "Post-LN" if placement == "post" else "Pre-LN"
        ax.set_title(f"{name}, {sweep.depth} layers", fontsize=10)
        ax.grid(False)
    axes[0].set_ylabel("peak learning rate (Adam)")
    bar = fig.colorbar(image, ax=list(axes), shrink=0.9)
    bar.set_label(f"share of the {sweep.seeds} seeds that trained")
    fig.suptitle(
        f"Seeds trained (final loss below {0.5 * sweep.chance_loss:.2f}, half of chance) after "
        f"{sweep.steps} steps ({sweep.task} task); median final loss in brackets"
    )
    return fig
