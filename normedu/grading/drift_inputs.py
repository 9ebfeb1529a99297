"""The drift notebook's inputs and picture: the gains, the weights of the deep tanh stack,
and the figure of its statistics per layer. The course's own cells call them.

A leaf module (NumPy only): the grading kernel loads it for real (:mod:`normedu.course.reach`),
so that those cells run there too; the references stay in :mod:`.drift`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["GAINS", "make_weights", "plot_profiles"]

#: Weight scales of the experiment: W ~ N(0, (gain / sqrt(D))^2). 5/3 is PyTorch's tanh gain.
GAINS = (0.5, 1.0, 5 / 3, 3.0)


def make_weights(depth: int, width: int, gain: float, seed: int = 0) -> list[np.ndarray]:
    """``depth`` weight matrices of shape (width, width) with entries N(0, (gain/sqrt(width))^2)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((width, width)) * gain / np.sqrt(width) for _ in range(depth)]


def plot_profiles(profiles: dict) -> Any:
    """Figure of the std and the saturated fraction per layer, one line per gain.

    - profiles: {gain: (L, 3) array of (mean, std, saturated) per layer}.

    Returns the figure, or None while nbgrader grades the notebook (``NBGRADER_EXECUTION`` is
    set): grading needs no picture, and importing matplotlib costs seconds per submission.
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    from normedu.grading.compare import inline_figures
    from normedu.plots import figure

    inline_figures()

    fig, (ax_std, ax_sat) = figure(1, 2, width=10, height=3.6)
    for g, p in profiles.items():
        layers = np.arange(1, len(p) + 1)
        ax_std.semilogy(layers, p[:, 1], marker="o", label=f"gain {g:.2f}")
        ax_sat.plot(layers, p[:, 2], marker="o", label=f"gain {g:.2f}")
    ax_std.set(title="Activation std per layer", xlabel="layer", ylabel="std (log scale)")
    ax_sat.set(title="Saturated tanh units per layer", xlabel="layer", ylabel="fraction |h| > 0.97")
    ax_std.legend()
    return fig
