"""Figures of the chapter "Where the norm goes in today's large models": the placements' data
flows, the stream and gradients at init, the output change per SGD step, training at depth,
and the attention-logit sweep. Every function returns a Figure; every series has a colour
(Okabe-Ito) and a second cue (line style and marker)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import COLORS, OKABE_ITO, Figure, figure
from .prepost import _arrow, _box, _plus

if TYPE_CHECKING:  # pragma: no cover
    from ..experiments.since2020_placement import (
        InitProfiles,
        SweepResult,
        TrainResult,
        UpdateSizes,
    )

#: colour, line style and marker of each placement (Pre/Post as in the Pre/Post-Norm chapter)
PLACEMENT_STYLE: dict[str, dict] = {
    "post": {"color": COLORS["post"], "linestyle": "--", "marker": "s"},
    "pre": {"color": COLORS["pre"], "linestyle": "-", "marker": "o"},
    "sandwich": {"color": OKABE_ITO[3], "linestyle": "-.", "marker": "^"},
    "olmo2": {"color": OKABE_ITO[7], "linestyle": ":", "marker": "D"},
    "deepnorm": {"color": OKABE_ITO[0], "linestyle": (0, (5, 1)), "marker": "v"},
}


def _label(placement: str) -> str:
    from ..experiments.since2020_placement import LABELS

    return LABELS[placement]


# --------------------------------------------------------------------------- data flows

_NORM_C, _SUB_C = "#cfe2f3", "#fce5cd"


def dataflow_figure() -> Figure:
    """One sub-block in each of five placements, input at the bottom, residual in orange."""
    fig, axes = figure(1, 5, width=13.0, height=5.2)
    res_c = COLORS["post"]
    specs = {
        "Post-LN": (["Sublayer", "+", "Norm"], "Norm(x + F(x))", 1),
        "Pre-LN": (["Norm", "Sublayer", "+"], "x + F(Norm(x))", 2),
        "Sandwich / Peri-LN": (["Norm", "Sublayer", "Norm", "+"], "x + Norm(F(Norm(x)))", 3),
        "OLMo 2": (["Sublayer", "Norm", "+"], "x + Norm(F(x))", 2),
        "DeepNorm": (["Sublayer", "+", "Norm"], "Norm(αx + F(x))", 1),
    }
    for ax, (title, (stack, formula, plus_at)) in zip(axes, specs.items(), strict=True):
        ax.set_xlim(-1.3, 1.6)
        ax.set_ylim(-0.7, 5.6)
        ax.axis("off")
        ax.text(0, -0.55, "x (input)", ha="center", fontsize=9)
        ys = np.linspace(0.8, 4.2, len(stack))
        prev = -0.3
        for y, item in zip(ys, stack, strict=True):
            if item == "+":
                _plus(ax, 0, y)
                _arrow(ax, (0, prev), (0, y - 0.2))
                prev = y + 0.2
            else:
                _box(ax, 0, y, item, _NORM_C if item == "Norm" else _SUB_C, w=1.3, h=0.45)
                _arrow(ax, (0, prev), (0, y - 0.24))
                prev = y + 0.24
        _arrow(ax, (0, prev), (0, 5.0))
        _arrow(ax, (0.08, -0.1), (0.18, ys[plus_at]), rad=0.5, color=res_c)
        if title == "DeepNorm":
            ax.text(0.75, ys[plus_at] - 0.9, "×α", color=res_c, fontsize=10)
        ax.text(0, 5.25, formula, ha="center", fontsize=9)
        ax.set_title(title, fontsize=11)
    fig.suptitle("One sub-block (attention or MLP) in each placement; orange: the residual path")
    return fig


# --------------------------------------------------------------------------- at init


def init_figure(res: InitProfiles) -> Figure:
    """Left: RMS of the residual stream after each block; right: FFN-W2 gradient norm per
    block; one line per placement, at initialization."""
    fig, (ax_s, ax_g) = figure(1, 2, width=10.0, height=4.0)
    layers = np.arange(1, res.depth + 1)
    every = max(1, res.depth // 8)
    for p, st in PLACEMENT_STYLE.items():
        kw = dict(st, markevery=every, label=_label(p))
        ax_s.plot(layers, res.stream[p], **kw)
        ax_g.plot(layers, res.grads[p], **kw)
    ax_s.set(xlabel="block", ylabel="RMS of the residual stream", title="Stream at init")
    ax_g.set(
        xlabel="block", ylabel="gradient norm of mlp.fc2", yscale="log", title="Gradients at init"
    )
    ax_s.legend()
    return fig


def update_figure(res: UpdateSizes) -> Figure:
    """Change of the stack's output per unit learning rate after one SGD step, against
    depth (log-log), for Post-LN, Pre-LN and DeepNorm (every parameter moved), and DeepNorm
    with only its block matrices or only its norms' gains and biases moved (dotted)."""
    from matplotlib.ticker import NullFormatter, NullLocator

    fig, ax = figure(1, 1, width=6.5, height=4.2)
    for p, values in res.change.items():
        ax.plot(res.depths, values, label=_label(p) + ", all parameters", **PLACEMENT_STYLE[p])
    color = PLACEMENT_STYLE["deepnorm"].get("color")
    for group, marker in (("block matrices", "D"), ("norm gains and biases", "^")):
        if group in res.groups.get("deepnorm", {}):
            ax.plot(
                res.depths,
                res.groups["deepnorm"][group],
                color=color,
                linestyle=":",
                marker=marker,
                label=f"DeepNorm, {group} only",
            )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="layers N",
        ylabel="RMS change of the output / learning rate",
        title="One SGD step at initialization",
    )
    ax.set_xticks(res.depths, [str(d) for d in res.depths])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8)
    return fig


# --------------------------------------------------------------------------- training


def training_figure(res: TrainResult) -> Figure:
    """Training loss of each placement at ``res.depth`` layers, no warm-up; dotted: chance."""
    fig, ax = figure(1, 1, width=7.0, height=4.0)
    for run in res.runs:
        st = PLACEMENT_STYLE[run.label]
        ax.plot(run.losses, label=_label(run.label), markevery=max(1, res.steps // 8), **st)
    ax.axhline(res.chance_loss, color="grey", linestyle=":", label="chance")
    ax.set(
        xlabel="step",
        ylabel="training loss",
        yscale="log",
        title=f"{res.depth} layers, Adam lr {res.lr:g}, no warm-up",
    )
    ax.legend()
    return fig


def sweep_figure(res: SweepResult) -> Figure:
    """Left: the largest attention logit over training, per learning rate (solid without
    QK-norm, dashed with it; paler = smaller rate). Right: final loss at each learning rate,
    with and without QK-norm, as unconnected markers (a few rates, not a trend)."""
    fig, (ax_l, ax_r) = figure(1, 2, width=11.0, height=4.2)
    shades = np.linspace(0.35, 1.0, len(res.lrs))
    for qk, color, ls, marker in (
        (False, COLORS["post"], "-", "s"),
        (True, COLORS["pre"], "--", "o"),
    ):
        name = "QK-norm" if qk else "no QK-norm"
        for lr, shade in zip(res.lrs, shades, strict=True):
            run = res.get(qk, lr)
            ax_l.plot(
                run.max_logits,
                color=color,
                alpha=float(shade),
                linestyle=ls,
                marker=marker,
                markevery=max(1, res.steps // 6),
                label=f"{name}, lr {lr:g}",
            )
        finals = [res.get(qk, lr).final_loss for lr in res.lrs]
        ax_r.plot(res.lrs, finals, color=color, linestyle="none", marker=marker, label=name)
    ax_l.set(xlabel="step", ylabel="largest |attention logit|", yscale="log")
    ax_l.legend(fontsize=7, ncol=2)
    ax_r.axhline(res.chance_loss, color="grey", linestyle=":", label="chance")
    ax_r.set(xscale="log", yscale="log", xlabel="learning rate", ylabel="final loss")
    ax_r.legend()
    return fig
