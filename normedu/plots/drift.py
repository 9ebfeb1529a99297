"""Figures of chapter 1 (activation drift). Each function returns a Figure; nothing is shown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from . import COLORS, Figure, figure

__all__ = [
    "compounding",
    "layer_histograms",
    "layer_profiles",
    "loss_curves",
    "landscape_probes",
    "std_profiles",
    "update_ratios",
]

_GAIN_COLORS = ["#0072B2", "#56B4E9", "#7f7f7f", "#E69F00", "#D55E00", "#CC79A7", "#009E73"]


def compounding(measured: Mapping[str, np.ndarray]) -> Figure:
    """Activation std vs depth (log scale): measured curves (solid) and ``g**L`` (dashed).

    ``measured`` is :func:`normedu.experiments.drift.linear_scale_vs_depth`'s result:
    ``{"depth": (L+1,), "g=<g>": (L+1,), ...}``.
    """
    depth = np.asarray(measured["depth"])
    fig, ax = figure(width=7, height=4.2)
    keys = [k for k in measured if k.startswith("g=")]
    for i, k in enumerate(keys):
        g = float(k[2:])
        c = _GAIN_COLORS[i % len(_GAIN_COLORS)]
        ax.plot(depth, measured[k], color=c, lw=2, label=f"measured, g = {g:g}")
        ax.plot(depth, g**depth, color=c, lw=1, ls="--")
    ax.plot([], [], color="black", lw=1, ls="--", label="closed form $g^L$")
    ax.set_yscale("log")
    ax.set_xlabel("depth L (number of layers)")
    ax.set_ylabel("activation std / input std")
    ax.set_title("Per-layer gain compounds with depth")
    ax.legend(ncol=2, loc="upper left")
    return fig


def layer_histograms(
    records_by_label: Mapping[str, Sequence], which: str = "act", every: int = 10
) -> Figure:
    """Karpathy-style overlaid per-layer histograms, one panel per configuration.

    - records_by_label: ``{label: list[LayerStats]}`` from :class:`normedu.stats.StatsRecorder`.
    - which: ``"act"`` (layer outputs) or ``"grad"`` (dLoss/d output).
    - every: draw every ``every``-th layer (plus the last) to keep the panel readable.
    """
    if which not in ("act", "grad"):
        raise ValueError(f"which must be 'act' or 'grad', got {which!r}")
    n = len(records_by_label)
    fig, axes = figure(1, n, width=4.2 * n, height=3.6, squeeze=False)
    cmap = __import__("matplotlib").colormaps["viridis"]
    for ax, (label, recs) in zip(axes[0], records_by_label.items(), strict=False):
        chosen = list(recs[::every])
        if recs and recs[-1] is not chosen[-1]:
            chosen.append(recs[-1])
        for j, r in enumerate(chosen):
            hist = r.act_hist if which == "act" else r.grad_hist
            if hist is None:
                continue
            counts, edges = hist
            centers = (edges[:-1] + edges[1:]) / 2
            if which == "act":
                extra = f"std {r.act_std:.2f}, sat {r.saturation:.0f}%"
            else:
                extra = f"std {r.grad_std:.1e}"
            color = cmap(j / max(1, len(chosen) - 1))
            ax.plot(centers, counts, color=color, lw=1.4, label=f"layer {r.index + 1}: {extra}")
        ax.set_title(label)
        ax.set_xlabel("activation value" if which == "act" else "gradient value")
        ax.set_ylabel("density")
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(
        "Activation histograms per layer" if which == "act" else "Gradient histograms per layer"
    )
    return fig


def layer_profiles(records_by_label: Mapping[str, Sequence]) -> Figure:
    """Three panels vs layer index: activation std, saturation %, and gradient norm (log)."""
    fig, axes = figure(1, 3, width=13, height=3.8)
    styles = ["-", "--", ":", "-."]
    used: dict[str, int] = {}
    for i, (label, recs) in enumerate(records_by_label.items()):
        idx = np.array([r.index + 1 for r in recs])
        color = _color_for(label, i)
        # Two configurations with the same norm share a colour: tell them apart by line style.
        ls = styles[used.get(color, 0) % len(styles)]
        used[color] = used.get(color, 0) + 1
        kw = dict(color=color, ls=ls, lw=1.8, label=label)
        axes[0].plot(idx, [r.act_std for r in recs], **kw)
        axes[1].plot(idx, [r.saturation for r in recs], **kw)
        axes[2].plot(idx, [r.grad_norm for r in recs], **kw)
    axes[0].set_title("activation std per layer")
    axes[0].set_ylabel("std")
    axes[1].set_title("saturated units (tanh: |a|>0.97; ReLU: a=0)")
    axes[1].set_ylabel("% of units")
    axes[2].set_title("gradient norm per layer")
    axes[2].set_ylabel("||dL/da||")
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("layer")
    axes[2].legend(fontsize=8)
    return fig


def _color_for(label: str, i: int) -> str:
    low = label.lower()
    for key in ("batchnorm", "layernorm", "rmsnorm", "groupnorm"):
        if key in low:
            return COLORS[key]
    if "none" in low or "no norm" in low:
        return COLORS["none"]
    return _GAIN_COLORS[i % len(_GAIN_COLORS)]


def loss_curves(runs: Mapping[tuple[str, str], object], smooth: int = 10) -> Figure:
    """Training loss vs step, one panel per activation, one line per norm.

    ``runs`` is ``{(act, norm): TrainRun}`` as returned by
    :func:`normedu.experiments.drift.convergence`. Curves are moving averages over ``smooth``
    steps (the raw per-batch loss is noisy).
    """
    acts = list(dict.fromkeys(a for a, _ in runs))
    fig, axes = figure(1, len(acts), width=5.5 * len(acts), height=3.8, squeeze=False)
    for ax, act in zip(axes[0], acts, strict=False):
        for (a, norm), run in runs.items():
            if a != act:
                continue
            loss = np.asarray(run.loss, dtype=float)
            k = max(1, min(smooth, len(loss)))
            sm = np.convolve(loss, np.ones(k) / k, mode="valid")
            ax.plot(
                np.arange(k - 1, len(loss)),
                sm,
                color=COLORS[norm],
                lw=2,
                label=f"{norm} (test acc {run.test_acc:.0%})",
            )
        ax.set_title(f"{act} MLP, lr {runs[next(k for k in runs if k[0] == act)].config['lr']}")
        ax.set_xlabel("SGD step")
        ax.set_ylabel("training loss (cross-entropy)")
        ax.legend()
    fig.suptitle("Same network, same learning rate: with and without normalization")
    return fig


def landscape_probes(runs: Mapping[tuple[str, str], object]) -> Figure:
    """Loss range and gradient Lipschitz ratio along the gradient direction during training."""
    fig, axes = figure(1, 2, width=11, height=3.8)
    for (act, norm), run in runs.items():
        if not run.probes:
            continue
        steps = [p["step"] for p in run.probes]
        ls = "-" if act == "relu" else "--"
        kw = dict(color=COLORS[norm], ls=ls, marker="o", ms=3, label=f"{act}, {norm}")
        axes[0].plot(steps, [p["loss_range"] for p in run.probes], **kw)
        axes[1].plot(steps, [p["grad_lipschitz"] for p in run.probes], **kw)
    axes[0].set_title("loss variation along the gradient step")
    axes[0].set_ylabel("max - min loss")
    axes[1].set_title('"effective beta-smoothness"')
    axes[1].set_ylabel("max ||grad change|| / ||step||")
    for ax in axes:
        ax.set_xlabel("SGD step")
        ax.set_yscale("log")
    axes[1].legend(fontsize=8)
    return fig


_STYLES = ["-", "--", ":", "-."]
_MARKERS = ["o", "s", "^", "D", "v"]


def std_profiles(panels: Mapping[str, Mapping[str, np.ndarray]]) -> Figure:
    """Pre-activation std vs layer (log scale), one panel per entry of ``panels``.

    ``panels`` is ``{panel title: {line label: (depth+1,) std per layer}}``, e.g. the output of
    :func:`normedu.experiments.drift.preactivation_std_profile` for several gains. A dotted
    line marks std 1, the value variance preservation keeps.
    """
    n = len(panels)
    fig, axes = figure(1, n, width=5.5 * n, height=3.8, squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels.items(), strict=False):
        for i, (label, stds) in enumerate(lines.items()):
            stds = np.asarray(stds, dtype=float)
            layers = np.arange(len(stds))
            ax.plot(
                layers,
                stds,
                color=_GAIN_COLORS[(2 * i) % len(_GAIN_COLORS)],
                ls=_STYLES[i % len(_STYLES)],
                marker=_MARKERS[i % len(_MARKERS)],
                markevery=max(1, len(stds) // 8),
                ms=4,
                lw=1.8,
                label=label,
            )
        ax.axhline(1.0, color="black", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("layer")
        ax.set_ylabel("std of the pre-activation")
        ax.legend(fontsize=8)
    return fig


def update_ratios(runs: Mapping[str, object], steps: int | None = None) -> Figure:
    """Karpathy's update-to-data ratio per layer over training, one panel per run.

    ``runs`` is ``{label: TrainRun}``; each run's ``update_ratios`` is (steps, layers) of
    ``log10(std(lr * grad) / std(w))``. One line per hidden layer (colour from the first layer,
    dark, to the last, light); the dashed line marks -3, the rule-of-thumb level of an update
    about a thousandth of the weights. ``steps`` limits the x-axis to the first steps.
    """
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    n = len(runs)
    fig, axes = figure(1, n, width=5.5 * n, height=3.8, squeeze=False, sharey=True)
    for ax, (label, run) in zip(axes[0], runs.items(), strict=False):
        r = np.asarray(run.update_ratios, dtype=float)
        if steps is not None:
            r = r[:steps]
        layers = r.shape[1]
        for j in range(layers):
            kw = dict(color=cmap(j / max(1, layers - 1)), lw=1.2)
            if j in (0, layers - 1):
                kw["label"] = f"layer {j + 1}"
            ax.plot(np.arange(len(r)), r[:, j], **kw)
        ax.axhline(-3, color="black", lw=1, ls="--", label="-3 (rule of thumb)")
        ax.set_title(label)
        ax.set_xlabel("SGD step")
        ax.set_ylabel("log10(std(lr * grad) / std(w))")
        ax.legend(fontsize=8)
    return fig
