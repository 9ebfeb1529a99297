"""Figures of the chapter "Training without normalization": LayerNorm's curve and its tanh fit,
the five stacks' loss curves and their per-block gradients.

The norms take their colour, line style and marker from the registry (:data:`COLORS` ...);
ReZero, which is not a norm, gets its own here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import COLORS, LINESTYLES, MARKERS, Figure, figure

if TYPE_CHECKING:  # pragma: no cover
    from ..experiments.since2020_nonorm import Comparison, TokenScaleDemo

#: ReZero's style: an Okabe-Ito colour no plotted norm uses, with its own dash and marker.
REZERO = {"color": "#56B4E9", "linestyle": (0, (5, 1)), "marker": "P"}
#: DyT with the embedding scalar: DyT's colour family (Okabe-Ito vermillion), solid, a star.
DYT_SCALED = {"color": "#D55E00", "linestyle": (0, (1, 1)), "marker": "*"}


def variant_style(name: str) -> dict:
    """``color``, ``linestyle``, ``marker`` of a variant of the comparison."""
    if name == "rezero":
        return dict(REZERO)
    if name == "dyt_scaled":
        return dict(DYT_SCALED)
    return {"color": COLORS[name], "linestyle": LINESTYLES[name], "marker": MARKERS[name]}


def _fit_lines(ax, x, fit) -> None:
    grid = np.linspace(np.min(x), np.max(x), 200)
    ax.plot(
        grid,
        fit.c * np.tanh(fit.alpha * grid),
        color="black",
        ls="-",
        lw=1.6,
        label=f"{fit.c:.2f}·tanh({fit.alpha:.3g}x): R² {fit.r2_tanh:.3f}",
    )
    ax.plot(
        grid,
        fit.slope * grid + fit.intercept,
        color="#D55E00",
        lw=1.2,
        ls="--",
        label=f"straight line: R² {fit.r2_line:.3f}",
    )


def curve_figure(res: Comparison, demos: list[TokenScaleDemo], shown: float = 1.0) -> Figure:
    """Left: a trained LayerNorm's input against its normalized output, element by element,
    with the fitted tanh and line. Middle: the same for synthetic tokens of unequal scales
    (the demo whose log-scale spread is ``shown``). Right: R² of both fits against that
    spread, for every demo."""
    fig, (a, b, c) = figure(1, 3, width=13.0, height=4.2)
    curve = res.curve
    fit = curve.fit()
    a.scatter(curve.x, curve.y, s=3, alpha=0.3, color=COLORS["layernorm"], rasterized=True)
    _fit_lines(a, curve.x, fit)
    which = "final LayerNorm" if curve.shown == "final" else f"LayerNorm of {curve.shown}"
    a.set_title(f"Trained TinyGPT, {which}", fontsize=10)
    a.set_xlabel("input x (one element)")
    a.set_ylabel("normalized output (before γ, β)")
    a.legend(fontsize=8, loc="upper left")
    demo = next(d for d in demos if d.log_spread == shown)
    b.scatter(demo.x, demo.y, s=3, alpha=0.3, color=COLORS["layernorm"], rasterized=True)
    _fit_lines(b, demo.x, demo.fit)
    b.set_title(f"Synthetic tokens, log-scale spread {demo.log_spread:g}", fontsize=10)
    b.set_xlabel("input x (one element)")
    b.legend(fontsize=8, loc="upper left")
    spreads = [d.log_spread for d in demos]
    c.plot(
        spreads, [d.fit.r2_tanh for d in demos], color="black", ls="-", marker="o", label="tanh fit"
    )
    c.plot(
        spreads,
        [d.fit.r2_line for d in demos],
        color="#D55E00",
        marker="s",
        ls="--",
        label="straight line",
    )
    c.set_xlabel("spread of the tokens' log-scale")
    c.set_ylabel("R² of the fit")
    c.set_title("The more the token scales differ,\nthe more the cloud bends", fontsize=10)
    c.legend(fontsize=8)
    return fig


def training_figure(res: Comparison) -> Figure:
    """Training loss of every variant against the step, with the chance level; the variants
    that went on past the lockstep steps are drawn to the end of their longer run, and a
    vertical line marks where the lockstep part ends."""
    fig, ax = figure(1, 1, width=7.5, height=4.4)
    size = res.size
    top = res.chance_loss
    for run in res.runs:
        st = variant_style(run.name)
        losses = np.asarray(run.losses + run.long_losses, dtype=float)
        label = f"{run.label}: {run.final_loss:.2f} at {size['steps']}"
        if run.final_loss_long is not None:
            label += f", {run.final_loss_long:.2f} at {size['long_steps']}"
        ax.plot(
            np.arange(1, len(losses) + 1),
            losses,
            color=st["color"],
            ls=st["linestyle"],
            lw=1.5,
            label=label,
        )
        if np.isfinite(losses).any():
            top = max(top, float(np.nanmax(losses)))
    ax.axhline(res.chance_loss, color="black", lw=0.8, ls=":", label="chance: ln(V−2)")
    if any(r.long_losses for r in res.runs):
        ax.axvline(size["steps"], color="grey", lw=0.8, ls="-.")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (answer tokens)")
    ax.set_ylim(0, 1.05 * top)  # every curve whole, the first steps included
    ax.set_title(
        f"{size['depth']} blocks, d_model {size['d_model']}, Adam lr {size['lr']:g}, no warm-up"
        f" (seed {res.seed})",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    return fig


def grad_figure(res: Comparison) -> Figure:
    """‖dL/d(block output)‖ per block, at initialization (left) and after training (right)."""
    fig, axes = figure(1, 2, width=11.5, height=4.2, sharey=True)
    panels = (("grad_init", "At initialization"), ("grad_end", f"After {res.size['steps']} steps"))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for run in res.runs:
            g = np.asarray(getattr(run, key), dtype=float)
            if g.size == 0:
                continue
            st = variant_style(run.name)
            ax.plot(
                np.arange(1, g.size + 1),
                g,
                color=st["color"],
                ls=st["linestyle"],
                marker=st["marker"],
                label=run.label,
            )
        ax.set_yscale("log")
        ax.set_xlabel("block (1 = input side)")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("‖∂L/∂(block output)‖")
    axes[0].legend(fontsize=8)
    return fig
