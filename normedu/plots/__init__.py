"""Figures for the book. Every function returns a ``matplotlib.figure.Figure`` (never shows it),
so tests can inspect the artists and the pages decide how to display.

Shared conventions live here, and importing :mod:`normedu.plots` makes them the default:

- :data:`COLORS`: one colour per concept (norm, placement, device) across all chapters, from the
  Okabe-Ito palette, which stays distinguishable with the common colour-vision deficiencies;
- :data:`LINESTYLES` and :data:`MARKERS`: a second cue per concept, so that no line is told from
  another by colour alone (nor in a greyscale print); :func:`style` gives all three at once;
- :data:`STYLE`: the rcParams of every course figure. Its property cycle pairs each Okabe-Ito
  colour with its own line style, so a plot that names no colour is still readable. It is
  applied to matplotlib's defaults when this package is imported (a chapter that imports it
  draws every figure in the course style) and again by :func:`figure`;
- figures have an opaque white background so they stay readable on the website's dark theme.
"""

from __future__ import annotations

from typing import Any

import matplotlib as mpl

# No matplotlib.use() here: choosing a backend at import would override the notebook's inline
# backend and figures would print as "<Figure ...>" text. Detached Figures need no backend.
import matplotlib.pyplot as plt
from cycler import cycler
from matplotlib.figure import Figure

from normedu.norms import NORMS

#: Okabe & Ito (2008), "Color Universal Design": black first, then the seven colours.
OKABE_ITO: tuple[str, ...] = (
    "#000000",
    "#E69F00",
    "#56B4E9",
    "#009E73",
    "#F0E442",
    "#0072B2",
    "#D55E00",
    "#CC79A7",
)

#: One colour per concept, used by every chapter (Okabe-Ito, plus grey for "no norm"). The
#: norms' own come from their registry entries (:data:`normedu.norms.NORMS`).
COLORS: dict[str, str] = {
    "none": "#7f7f7f",
    **{spec.kind: spec.color for spec in NORMS},
    "pre": "#0072B2",
    "post": "#D55E00",
    "gpu": "#E69F00",
    "cpu": "#56B4E9",
    "accent": "#F0E442",
}
#: The second cue of each concept: its line style ...
LINESTYLES: dict[str, str | tuple] = {
    "none": ":",
    **{spec.kind: spec.linestyle for spec in NORMS},
    "pre": "-",
    "post": "--",
    "gpu": "-",
    "cpu": "--",
    "accent": ":",
}
#: ... and its marker (for points, and lines with few points).
MARKERS: dict[str, str] = {
    "none": "x",
    **{spec.kind: spec.marker for spec in NORMS},
    "pre": "o",
    "post": "s",
    "gpu": "v",
    "cpu": "P",
    "accent": "*",
}
#: Hatches that tell bars apart without colour (same keys).
HATCHES: dict[str, str] = {"layernorm": "", "rmsnorm": "//", "batchnorm": "..", "none": "xx"}

#: Line styles of the default property cycle, one per Okabe-Ito colour.
_CYCLE_STYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)), "-")

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
    # Black is kept out of the cycle's start: reference lines (theory, floors) are black.
    "axes.prop_cycle": cycler(
        color=[*OKABE_ITO[1:], OKABE_ITO[0]],
        linestyle=[*_CYCLE_STYLES[1:], _CYCLE_STYLES[0]],
    ),
    "image.cmap": "viridis",
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
}


def style(concept: str) -> dict[str, Any]:
    """``color``, ``linestyle`` and ``marker`` of a concept, for ``ax.plot(..., **style(k))``."""
    return {
        "color": COLORS[concept],
        "linestyle": LINESTYLES.get(concept, "-"),
        "marker": MARKERS.get(concept, "o"),
    }


def figure(nrows: int = 1, ncols: int = 1, *, width: float = 7.0, height: float = 4.0, **kw: Any):
    """``(fig, axes)`` like ``plt.subplots`` with the course style, detached from pyplot's state.

    Detached figures are not kept alive by pyplot, so a chapter that draws many does not leak.
    """
    with plt.rc_context(STYLE):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, **kw)
    return fig, axes


# Artists read some rcParams when they are drawn or created (line width, marker size), after
# figure() has returned: make the course style matplotlib's default for the whole session.
mpl.rcParams.update(STYLE)

__all__ = [
    "COLORS",
    "HATCHES",
    "LINESTYLES",
    "MARKERS",
    "OKABE_ITO",
    "STYLE",
    "Figure",
    "figure",
    "style",
]
