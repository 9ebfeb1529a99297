"""Figures for the book. Every function returns a ``matplotlib.figure.Figure`` (never shows it),
so tests can inspect the artists and the pages decide how to display.

Shared conventions live here: :func:`figure` applies the course style, and :data:`COLORS`
gives each norm and placement one colour across all chapters. Figures have an opaque white
background so they stay readable on the website's dark theme.
"""

from __future__ import annotations

from typing import Any

# No matplotlib.use() here: choosing a backend at import would override the notebook's inline
# backend and figures would print as "<Figure ...>" text. Detached Figures need no backend.
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

#: One colour per concept, used by every chapter (colour-blind-safe Okabe-Ito palette).
COLORS: dict[str, str] = {
    "none": "#7f7f7f",
    "batchnorm": "#D55E00",
    "layernorm": "#0072B2",
    "rmsnorm": "#009E73",
    "groupnorm": "#CC79A7",
    "pre": "#0072B2",
    "post": "#D55E00",
    "gpu": "#E69F00",
    "cpu": "#56B4E9",
    "accent": "#F0E442",
}

STYLE: dict[str, Any] = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 9,
    "legend.framealpha": 0.9,
}


def figure(nrows: int = 1, ncols: int = 1, *, width: float = 7.0, height: float = 4.0, **kw: Any):
    """``(fig, axes)`` like ``plt.subplots`` with the course style, detached from pyplot's state.

    Detached figures are not kept alive by pyplot, so a chapter that draws many does not leak.
    """
    with plt.rc_context(STYLE):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, **kw)
    return fig, axes


__all__ = ["COLORS", "STYLE", "figure", "Figure"]
