"""Figures of chapter 3 (LayerNorm): the BN-vs-LN matrix, the step-by-step animation, the
learned-gamma histogram, the affine demo, and the walkthrough table (Markdown)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape

import numpy as np
from matplotlib.patches import Rectangle

from .. import seeding
from ..conventions import DEFAULT_EPS
from . import COLORS, STYLE, Figure, figure, style

__all__ = [
    "bn_vs_ln_matrix",
    "layernorm_frames",
    "layernorm_animation",
    "strip_external_links",
    "gamma_beta_histograms",
    "affine_curves",
    "small_width_accuracy",
    "walkthrough_table",
]


def bn_vs_ln_matrix(
    n_samples: int = 4, n_features: int = 5, feature: int = 1, sample: int = 1, seed: int = 0
) -> Figure:
    """Two samples x features grids: BatchNorm normalizes a column, LayerNorm a row.

    The left panel highlights feature ``feature`` (all samples) in the BatchNorm colour, the
    right panel sample ``sample`` (all features) in the LayerNorm colour. Cells show random
    example values. The highlighted cells are ``Rectangle`` patches with ``gid`` set to
    ``"bn-col"`` / ``"ln-row"`` so that tests and readers can find them.
    """
    if not (0 <= feature < n_features and 0 <= sample < n_samples):
        raise ValueError(
            f"feature must be in [0, {n_features}) and sample in [0, {n_samples}), got "
            f"{feature}, {sample}"
        )
    rng = seeding.rng(seed)
    vals = rng.normal(0, 2, size=(n_samples, n_features)).round(1)
    fig, axes = figure(1, 2, width=10, height=3.6)
    specs = (
        (axes[0], "BatchNorm: one feature, across the batch", COLORS["batchnorm"], "bn-col"),
        (axes[1], "LayerNorm: one sample, across its features", COLORS["layernorm"], "ln-row"),
    )
    for ax, title, color, gid in specs:
        for i in range(n_samples):
            for j in range(n_features):
                hit = (j == feature) if gid == "bn-col" else (i == sample)
                rect = Rectangle(
                    (j, n_samples - 1 - i),
                    1,
                    1,
                    facecolor=color if hit else "white",
                    alpha=0.85 if hit else 1.0,
                    edgecolor="#333333",
                    lw=1,
                )
                if hit:
                    rect.set_gid(gid)
                ax.add_patch(rect)
                ax.text(
                    j + 0.5,
                    n_samples - 0.5 - i,
                    f"{vals[i, j]:g}",
                    ha="center",
                    va="center",
                    color="white" if hit else "black",
                    fontsize=10,
                )
        ax.set_xlim(0, n_features)
        ax.set_ylim(0, n_samples)
        ax.set_aspect("equal")
        ax.set_xticks(np.arange(n_features) + 0.5, [f"f{j}" for j in range(n_features)])
        ax.set_yticks(
            np.arange(n_samples) + 0.5, [f"sample {n_samples - 1 - i}" for i in range(n_samples)]
        )
        ax.tick_params(length=0)
        ax.grid(False)
        ax.set_xlabel("features (D)")
        ax.set_title(title, color=color, fontsize=11)
        for s in ax.spines.values():
            s.set_visible(False)
        stat = "mean, var over this column" if gid == "bn-col" else "mean, var over this row"
        ax.plot([], [], "s", color=color, ms=10, label=stat)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    return fig


#: Captions of the animation's key frames.
STAGES = (
    "input x",
    "1. subtract the mean μ: bars shift",
    "2. divide by sqrt(σ² + ε): bars compress",
    "3. multiply by γ: bars scale",
    "4. add β: bars shift again",
)


def layernorm_frames(
    x: Sequence[float],
    gamma: Sequence[float],
    beta: Sequence[float],
    eps: float = DEFAULT_EPS,
    tween: int = 4,
) -> list[tuple[np.ndarray, str]]:
    """The bar heights of the animation: key frames of each stage plus ``tween`` interpolated
    frames between consecutive stages. Returns ``[(heights (d,), caption), ...]``; the last
    frame equals ``gamma * (x - mean) / sqrt(var + eps) + beta``.
    """
    v = np.asarray(x, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    b = np.asarray(beta, dtype=np.float64)
    if v.ndim != 1 or g.shape != v.shape or b.shape != v.shape:
        raise ValueError(
            f"x, gamma, beta must be 1-D of equal length, got {v.shape}, {g.shape}, {b.shape}"
        )
    mu = v.mean()
    c = v - mu
    xh = c / np.sqrt((c * c).mean() + eps)
    keys = [v, c, xh, g * xh, g * xh + b]
    frames: list[tuple[np.ndarray, str]] = [(keys[0], STAGES[0])]
    for k in range(1, len(keys)):
        for t in range(1, tween + 1):
            a = t / (tween + 1)
            frames.append(((1 - a) * keys[k - 1] + a * keys[k], STAGES[k] + " …"))
        frames.append((keys[k], STAGES[k]))
    return frames


def strip_external_links(html: str) -> str:
    """Remove every ``<link ...>`` that points off-site (to_jshtml links Font Awesome on a CDN)."""
    return re.sub(r"<link[^>]*href=[\"']https?://[^>]*>\s*", "", html)


def layernorm_animation(
    x: Sequence[float] = (3.0, 5.0, 1.0, 6.0, 2.0, 4.5),
    gamma: Sequence[float] = (1.5, 0.5, 1.0, 2.0, 1.0, 0.8),
    beta: Sequence[float] = (0.5, 0.0, -0.5, 0.0, 1.0, 0.0),
    eps: float = DEFAULT_EPS,
    tween: int = 4,
    alt: str = (
        "Animated bar chart of six feature values: the bars shift until their mean is zero, "
        "shrink to unit variance, then are scaled by gamma and shifted by beta"
    ),
) -> str:
    """LayerNorm of a 6-element vector as a self-contained HTML/JS player (no external request).

    ``matplotlib.animation`` renders :func:`layernorm_frames`; ``to_jshtml`` embeds the frames
    with play / step / reset (first frame) buttons that work on a static page. Returns the HTML
    string with CDN ``<link>`` tags removed, ``alt`` as the alt text of the frame image (a
    screen reader would otherwise read nothing, or the image's id) and a name for the frame
    slider. Display with ``IPython.display.HTML``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    frames = layernorm_frames(x, gamma, beta, eps, tween)
    d = len(frames[0][0])
    lo = min(float(h.min()) for h, _ in frames)
    hi = max(float(h.max()) for h, _ in frames)
    pad = 0.1 * (hi - lo)
    fig, ax = figure(width=6, height=3.4)
    fig.set_dpi(72)
    bars = ax.bar(range(d), frames[0][0], color=COLORS["layernorm"], edgecolor="#333333")
    ax.axhline(0, color="black", lw=0.8)
    mean_line = ax.axhline(
        frames[0][0].mean(), color=COLORS["batchnorm"], ls="--", lw=1.2, label="mean of the bars"
    )
    ax.set_ylim(min(lo, 0) - pad, hi + pad)
    ax.set_xticks(range(d), [f"x{i}" for i in range(d)])
    ax.set_xlabel("feature")
    ax.set_ylabel("value")
    ax.legend(loc="upper right")
    title = ax.set_title(frames[0][1])

    def update(k):
        h, cap = frames[k]
        for bar, v in zip(bars, h, strict=False):
            bar.set_height(v)
        mean_line.set_ydata([h.mean(), h.mean()])
        title.set_text(cap)
        return (*bars, mean_line, title)

    with plt.rc_context(STYLE):
        anim = FuncAnimation(fig, update, frames=len(frames), interval=350, blit=False)
        html = anim.to_jshtml(default_mode="once")
    html = re.sub(r"<img id=", lambda _: f'<img alt="{escape(alt)}" id=', html, count=1)
    # The frame slider has no <label> in matplotlib's template: name it, or a screen reader
    # announces an unnamed slider (axe rule "label", critical).
    html = re.sub(
        r'<input (?=[^>]*class="anim-slider")', '<input aria-label="Animation frame" ', html
    )
    return strip_external_links(html)


def gamma_beta_histograms(
    gamma: np.ndarray,
    beta: np.ndarray,
    bands: Mapping[str, tuple[float, float]] | None = None,
) -> Figure:
    """Two panels: learned γ (around its initial 1, optional shaded bands) and learned β
    (around its initial 0). ``gamma`` and ``beta`` are 1-D arrays of the same length."""
    g = np.asarray(gamma, dtype=float).ravel()
    b = np.asarray(beta, dtype=float).ravel()
    fig, (ax_g, ax_b) = figure(1, 2, width=11, height=3.8)
    ax_g.hist(g, bins=50, color=COLORS["layernorm"], alpha=0.85, label=f"γ ({g.size} values)")
    ax_g.axvline(1.0, color="black", ls="--", lw=1, label="initial value 1")
    palette = [COLORS["batchnorm"], COLORS["rmsnorm"], COLORS["groupnorm"]]
    for k, (name, (lo, hi)) in enumerate((bands or {}).items()):
        ax_g.axvspan(lo, hi, color=palette[k % len(palette)], alpha=0.18, label=name)
    ax_b.hist(
        b, bins=50, color=COLORS["batchnorm"], alpha=0.85, hatch="//", label=f"β ({b.size} values)"
    )
    ax_b.axvline(0.0, color="black", ls="--", lw=1, label="initial value 0")
    for ax, name in ((ax_g, "γ (scale)"), (ax_b, "β (shift)")):
        ax.set_xlabel(name)
        ax.set_ylabel("count")
        ax.set_title(f"learned LayerNorm {name}")
        ax.legend(fontsize=8)
    return fig


def affine_curves(demo: Mapping) -> Figure:
    """Training loss per epoch with and without gamma/beta, and the no-affine floor."""
    fig, ax = figure(width=7, height=3.8)
    for key, color, label in (
        ("affine", COLORS["layernorm"], "LayerNorm with γ, β"),
        ("no_affine", COLORS["none"], "LayerNorm without γ, β"),
    ):
        loss = demo[key]["loss"]
        ax.plot(np.arange(1, len(loss) + 1), loss, "o-", color=color, ms=3, lw=2, label=label)
    ax.axhline(
        demo["floor"], color="black", ls="--", lw=1, label=f"floor without γ: {demo['floor']:.3f}"
    )
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss (cross-entropy)")
    ax.set_title("Logits passed through LayerNorm")
    ax.legend()
    return fig


def small_width_accuracy(res: Mapping) -> Figure:
    """Test accuracy vs hidden width D, with LayerNorm and without a norm (log2 x axis).

    ``res``: :func:`normedu.experiments.layernorm.small_width`'s result. Each seed is a faint
    point, the mean a line; two dotted lines mark the best accuracy of a model with one
    distinct output (D = 1) and with two (D = 2).
    """
    w = np.asarray(res["widths"], dtype=float)
    fig, ax = figure(width=6.6, height=4.0)
    for norm, label in (("layernorm", "LayerNorm"), ("none", "no norm")):
        acc = 100 * np.asarray(res["acc"][norm])
        st = style(norm)
        for d, row in zip(w, acc, strict=True):
            ax.plot(
                [d] * len(row), row, ls="none", marker=st["marker"], color=st["color"], alpha=0.4
            )
        ax.plot(
            w,
            acc.mean(axis=1),
            color=st["color"],
            ls=st["linestyle"],
            lw=2,
            label=f"{label} (mean of {len(res['seeds'])} seeds)",
        )
    for key, text in (("largest_class", "one output"), ("two_largest", "two outputs")):
        ax.axhline(100 * res[key], color="black", lw=0.8, ls=":")
        ax.annotate(
            f"best with {text}", (w[-1], 100 * res[key]), ha="right", va="bottom", fontsize=8
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(w, [str(int(d)) for d in w])
    ax.set_xlabel("hidden width D (features the norm sees)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"Digits, one hidden layer, {res['epochs']} epochs")
    ax.legend(loc="center right", fontsize=8)
    return fig


def walkthrough_table(w: Mapping, digits: int = 4) -> str:
    """Markdown table of :func:`normedu.experiments.layernorm.walkthrough`, one row per element."""

    def f(v):
        return f"{v:.{digits}f}".rstrip("0").rstrip(".") if abs(v) > 0 else "0"

    rows = [
        "| i | $x_i$ | $x_i - \\mu$ | $(x_i - \\mu)^2$ | $\\hat x_i = (x_i - "
        "\\mu)/\\sqrt{\\sigma^2+\\varepsilon}$ |"
        " $y_i = \\gamma_i \\hat x_i + \\beta_i$ |",
        "|---|---|---|---|---|---|",
    ]
    for i in range(len(w["x"])):
        rows.append(
            f"| {i} | {f(w['x'][i])} | {f(w['centered'][i])} | {f(w['squared'][i])} | "
            f"{f(w['x_hat'][i])} | {f(w['y'][i])} |"
        )
    rows.append(
        f"| **sum** | {f(w['x'].sum())} | {f(w['centered'].sum())} | {f(w['squared'].sum())} | "
        f"{f(w['x_hat'].sum())} | |"
    )
    rows.append(
        f"| **÷ D** | μ = {f(w['mu'])} | | σ² = {f(w['var'])} | mean {f(w['x_hat_mean'])} | |"
    )
    return "\n".join(rows)
