"""Figures of the lecturer's class report (``normedu report``, :mod:`normedu.course.report`):
the score distribution and each test cell's pass share. Both take the numbers the report's
tables show, so a figure and its table never disagree."""

from __future__ import annotations

from collections.abc import Sequence

from . import COLORS, Figure, figure

__all__ = ["score_histogram", "pass_shares"]


def score_histogram(bands: Sequence[tuple[float, float, int]], max_score: float) -> Figure:
    """Bars of students per score band (``(low, high, students)``, from
    :func:`normedu.course.report.score_bands`), scores 0 to ``max_score`` on the x axis."""
    fig, ax = figure(width=7.0, height=3.6)
    lows = [lo for lo, _, _ in bands]
    widths = [hi - lo for lo, hi, _ in bands]
    counts = [n for _, _, n in bands]
    ax.bar(lows, counts, width=widths, align="edge", color=COLORS["pre"], edgecolor="white")
    ax.set_xlim(0, max(max_score, 1e-9))
    ax.set_xlabel(f"total score (of {max_score:g} points)")
    ax.set_ylabel("students")
    ax.set_title("Score distribution")
    ax.yaxis.get_major_locator().set_params(integer=True)
    return fig


def pass_shares(cells: Sequence[str], shares: Sequence[float]) -> Figure:
    """One horizontal bar per test cell (in notebook order, top to bottom): the share of the
    graded hand-ins that got its full points, in percent, written at the bar's end."""
    fig, ax = figure(width=7.0, height=1.2 + 0.32 * max(1, len(cells)))
    y = list(range(len(cells)))[::-1]
    percent = [100 * s for s in shares]
    ax.barh(y, percent, color=COLORS["cpu"], edgecolor=COLORS["pre"])
    for yi, p in zip(y, percent, strict=True):
        ax.text(min(p + 1, 88), yi, f"{p:.0f}%", va="center", fontsize=9)
    ax.set_yticks(y, cells)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of graded hand-ins that passed (%)")
    ax.set_title("Test cells passed")
    ax.grid(axis="y", visible=False)
    return fig
