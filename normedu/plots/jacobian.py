"""Figures of the gradient-flow chapter: Jacobian parts, eigenvalues, self-regulation, highway."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from . import COLORS, Figure, figure
from .prepost import short_device

if TYPE_CHECKING:  # pragma: no cover
    from ..experiments.gradflow import HighwayGrid, JacobianDemo, SelfRegulation


def parts_figure(demo: JacobianDemo) -> Figure:
    """Heat maps of the three parts and their sum (same colour scale), plus autograd's J."""
    mats = [
        ("scaling  (1/σ) I", demo.scaling),
        ("centering  −(1/σ) 11ᵀ/d", demo.centering),
        ("decorrelation  −(1/σ) x̂x̂ᵀ/d", demo.decorrelation),
        ("sum = J (closed form)", demo.jac),
        ("J from autograd", demo.jac_autograd),
    ]
    vmax = max(np.abs(m).max() for _, m in mats)
    fig, axes = figure(1, len(mats), width=14.0, height=3.4)
    im = None
    for ax, (title, m) in zip(axes, mats, strict=True):
        im = ax.imshow(m, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("input j")
        ax.set_ylabel("output i")
        ax.grid(False)
    fig.colorbar(im, ax=axes, shrink=0.8, label="∂y_i/∂x_j")
    fig.suptitle(f"LayerNorm Jacobian of one vector (d = {demo.d}, σ = {demo.sigma:.3f})")
    return fig


def eigen_figure(demo: JacobianDemo) -> Figure:
    """Eigenvalues of J (measured) against the closed form: 0, ≈0 and 1/σ (d − 2 times)."""
    fig, ax = figure(width=6.5, height=3.6)
    k = np.arange(demo.d)
    ax.bar(k - 0.2, demo.eigenvalues, 0.4, color=COLORS["layernorm"], label="eigvalsh(J)")
    ax.bar(
        k + 0.2,
        demo.predicted_eigenvalues,
        0.4,
        color=COLORS["accent"],
        ec="black",
        lw=0.5,
        label="closed form",
    )
    ax.axhline(1 / demo.sigma, color="black", lw=0.8, ls="--", label="1/σ")
    ax.set_xlabel("eigenvalue index (ascending)")
    ax.set_ylabel("eigenvalue")
    ax.set_title("Two directions are (almost) killed: 1 and x̂")
    ax.legend(fontsize=8)
    return fig


def self_regulation_figure(sr: SelfRegulation) -> Figure:
    """Backward gain ||dL/dx|| / ||dL/dy|| vs input scale, log-log, with the 1/σ line."""
    fig, ax = figure(width=6.5, height=4.0)
    ax.loglog(sr.scales, sr.gain, "o", ms=8, color=COLORS["layernorm"], label="measured (autograd)")
    ax.loglog(sr.scales, 1 / sr.sigma, "-", color="black", lw=1, label="1/σ")
    ax.set_xlabel("input scale s (x = s·z)")
    ax.set_ylabel("gradient gain through LayerNorm")
    ax.set_title(f"Large inputs get small gradients, small inputs large ones (d = {sr.d})")
    ax.legend(fontsize=8)
    return fig


def highway_figure(
    live: HighwayGrid, stored: HighwayGrid | None = None, stored_device: str = ""
) -> Figure:
    """2 x 2 grid (norm x residual) of the gradient norm arriving at each block, log scale.

    Live run solid; the stored GPU run dashed on the same panels (x = relative depth, since
    the depths differ), or a note in the title when none is stored.
    """
    from ..experiments.gradflow import GRID

    fig, axes = figure(2, 2, width=11.0, height=7.0, sharex=True)
    for ax, (key, norm, residual) in zip(axes.ravel(), GRID, strict=True):
        color = COLORS["layernorm"] if norm == "layernorm" else COLORS["none"]
        for res, ls, source in ((live, "-", "this device"), (stored, "--", "stored GPU")):
            if res is None:
                continue
            y = np.asarray(res.norms[key])
            x = np.arange(1, len(y) + 1) / len(y)
            spread = y.max() / y.min() if y.min() > 0 else np.inf
            ax.plot(
                x,
                y,
                ls=ls,
                color=color if source == "this device" else COLORS["gpu"],
                label=f"{source}: {res.depth} layers, max/min {spread:.3g}",
            )
        ax.set_yscale("log")
        ax.set_title(
            ("LayerNorm" if norm == "layernorm" else "no norm")
            + (" + residual" if residual else ", no residual"),
            fontsize=10,
        )
        ax.set_ylabel("‖∂L/∂(block output)‖")
        ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("relative depth of the block (0 = input, 1 = output)")
    if stored is None:
        title = "Gradient highway: per-layer gradient norm"
    else:
        title = (
            f"Gradient highway: this device and a stored GPU run ({short_device(stored_device)})"
        )
    fig.suptitle(title, fontsize=10)
    return fig


def scale_invariance_figure(res: Mapping) -> Figure:
    """2 x 2 panels over SGD steps, without and with weight decay: ‖W‖ (with the predicted
    equilibrium), |cos(W, g)| (log), the effective learning rate η/‖W‖² (log) and c = ‖g‖‖W‖.

    ``res``: :func:`normedu.experiments.scale_invariance.runs`'s result.
    """
    fig, axes = figure(2, 2, width=11.0, height=7.0, sharex=True)
    runs = (
        ("plain", "plain SGD", COLORS["none"], "-"),
        ("decay", f"SGD, weight decay λ = {res['wd']:g}", COLORS["layernorm"], "--"),
    )
    (a_norm, a_cos), (a_lr, a_c) = axes
    for key, label, color, ls in runs:
        r = res[key]
        t = np.arange(len(r["norm"]))
        a_norm.plot(t, r["norm"], color=color, ls=ls, label=label)
        a_cos.semilogy(t, np.abs(r["cos"]), color=color, ls=ls, lw=1, label=label)
        a_lr.semilogy(t, r["eff_lr"], color=color, ls=ls, label=label)
        a_c.plot(t, r["c"], color=color, ls=ls, lw=1, alpha=0.8, label=label)
    a_norm.axhline(
        res["predicted"], color="black", lw=0.8, ls=":", label=f"equilibrium {res['predicted']:.2f}"
    )
    for ax in (a_norm, a_c):  # the steps whose c and ‖W‖ enter the comparison
        ax.axvspan(res["tail_start"], len(res["decay"]["norm"]), color="0.9", zorder=0)
    a_norm.set_ylabel("‖W‖")
    a_norm.set_title("Weight norm")
    a_cos.set_ylabel("|cos(W, ∂L/∂W)|")
    a_cos.set_title("Gradient orthogonal to W (up to ε)")
    eq_lr = res["lr"] / res["predicted"] ** 2
    a_lr.axhline(eq_lr, color="black", lw=0.8, ls=":", label=f"η/‖W*‖² = {eq_lr:.3f}")
    a_lr.set_ylabel("η / ‖W‖²")
    a_lr.set_title("Effective learning rate")
    a_c.axhline(
        res["c_rms"], color="black", lw=0.8, ls=":", label=f"c (rms, shaded) {res['c_rms']:.2f}"
    )
    a_c.set_ylabel("c = ‖∂L/∂W‖ · ‖W‖")
    a_c.set_title("Gradient at unit weight norm")
    for ax in axes.ravel():
        ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("SGD step")
    fig.suptitle(f"Linear → LayerNorm on the digits, plain SGD, η = {res['lr']:g}", fontsize=10)
    return fig


__all__ = [
    "parts_figure",
    "eigen_figure",
    "self_regulation_figure",
    "highway_figure",
    "scale_invariance_figure",
]
