"""Figures of chapter 2 (BatchNorm). Each function returns a Figure; nothing is shown."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import COLORS, Figure, figure, style

__all__ = [
    "backward_graph",
    "BN_GRAPH_NODES",
    "BN_GRAPH_EDGES",
    "batch_size_sweep",
    "syncbn",
    "init_gradient_growth",
    "running_average",
]


def batch_size_sweep(sweep: Mapping, cited: Mapping | None = None) -> Figure:
    """Test error (%) vs batch size per norm; optional second panel with cited numbers.

    - sweep: :func:`normedu.experiments.batchnorm.batch_size_sweep`'s result.
    - cited: ``{norm: {batch: error %}}`` from a paper (e.g. ``WU_HE_2018``), drawn as
      markers without a connecting line in its own panel (a paper's few points, not a curve),
      labelled as cited.
    """
    bs = np.asarray(sweep["batch_sizes"])
    norms = [k for k in sweep if k in COLORS]
    ncols = 2 if cited else 1
    fig, axes = figure(1, ncols, width=5.6 * ncols, height=3.9, squeeze=False)
    ax = axes[0][0]
    for norm in norms:
        err = 100 * np.asarray(sweep[norm])
        ax.plot(bs, err, marker="o", color=COLORS[norm], lw=2, label=norm)
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel("training batch size")
    ax.set_ylabel("test error (%)")
    ax.set_title(f"Digits MLP, {sweep['epochs']} epochs, lr ∝ batch (measured)")
    ax.legend()
    if cited:
        ax2 = axes[0][1]
        for norm, pts in cited.items():
            b = sorted(pts)
            ax2.plot(
                b,
                [pts[k] for k in b],
                marker="s",
                ls="none",  # published points: nothing was measured between them
                ms=8,
                color=COLORS.get(norm, "black"),
                label=f"{norm} (cited)",
            )
            for k in b:
                ax2.annotate(f"{pts[k]}%", (k, pts[k]), textcoords="offset points", xytext=(6, 4))
        ax2.set_xscale("log", base=2)
        ax2.set_xticks([2, 4, 8, 16, 32], ["2", "4", "8", "16", "32"])
        ax2.set_xlabel("images per GPU")
        ax2.set_ylabel("ImageNet top-1 error (%)")
        ax2.set_title("ResNet-50, Wu & He (ECCV 2018), cited")
        ax2.legend()
    return fig


def syncbn(sim: Mapping) -> Figure:
    """Local BN vs SyncBN: variance bias and mean error vs per-process batch m, with theory.

    ``sim`` is :func:`normedu.experiments.batchnorm.syncbn_simulation`'s result;
    ``sim["devices"]`` is the number of processes P (the book's letter for it). The theory
    lines are that module's closed forms, for m samples (local) and P * m (synchronized).
    """
    from ..experiments.batchnorm import expected_local_var_ratio, rms_mean_error

    m = np.asarray(sim["per_device"], dtype=float)
    p = sim["devices"]  # processes

    def theory(f, processes: int) -> list[float]:
        return [f(processes * int(v)) for v in m]

    fig, axes = figure(1, 2, width=11, height=3.9)
    ax = axes[0]
    ax.plot(m, sim["local_var_ratio"], "o-", color=COLORS["batchnorm"], label="local BN (measured)")
    ax.plot(m, theory(expected_local_var_ratio, 1), ":", color="black", label="theory (m-1)/m")
    ax.plot(
        m,
        sim["sync_var_ratio"],
        "s-",
        color=COLORS["layernorm"],
        label=f"SyncBN over {p} processes",
    )
    ax.plot(
        m,
        theory(expected_local_var_ratio, p),
        "--",
        color="black",
        lw=0.8,
        label="theory (Pm-1)/(Pm)",
    )
    ax.set_xscale("log", base=2)
    ax.set_xticks(m, [f"{int(v)}" for v in m])
    ax.set_xlabel("per-process batch m")
    ax.set_ylabel("E[batch variance] / true variance")
    ax.set_title("Variance estimate is biased low for small m")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.plot(m, sim["local_mean_err"], "o-", color=COLORS["batchnorm"], label="local BN (measured)")
    ax.plot(m, theory(rms_mean_error, 1), ":", color="black", label="theory 1/sqrt(m)")
    ax.plot(m, sim["sync_mean_err"], "s-", color=COLORS["layernorm"], label="SyncBN (measured)")
    ax.plot(m, theory(rms_mean_error, p), "--", color="black", lw=0.8, label="theory 1/sqrt(Pm)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(m, [f"{int(v)}" for v in m])
    ax.set_xlabel("per-process batch m")
    ax.set_ylabel("RMS error of the mean (in stds)")
    ax.set_title("Noise of the mean estimate")
    ax.legend(fontsize=8)
    return fig


def init_gradient_growth(res: Mapping, rate: float | None = None) -> Figure:
    """First-to-last hidden layer gradient-norm ratio at initialization vs depth (log y).

    ``res``: :func:`normedu.experiments.bn_init.growth_with_depth`'s result. Every seed is a
    point; the line is the fitted ``ratio ∝ rate ** (depth − 1)`` per norm; ``rate`` (e.g.
    ``RELU_BN_RATE``) adds the predicted growth, drawn through the BN fit's depth-1 point.
    """
    depths = np.asarray(res["depths"], dtype=float)
    fig, ax = figure(width=6.4, height=4.0)
    for norm, label in (("batchnorm", "BatchNorm"), ("none", "no norm")):
        rows = res["ratio"][norm]
        for d, row in zip(depths, rows, strict=True):
            ax.plot(
                [d] * len(row),
                row,
                ls="none",
                marker=style(norm)["marker"],
                color=COLORS[norm],
                alpha=0.6,
            )
        geo = np.exp([np.mean(np.log(r)) for r in rows])
        fit = res["rate"][norm]
        # the fitted line through the geometric means of the points (same slope as the fit)
        anchor = np.mean(np.log(geo) - (depths - 1) * np.log(fit))
        ax.plot(
            depths,
            np.exp(anchor + (depths - 1) * np.log(fit)),
            color=COLORS[norm],
            ls=style(norm)["linestyle"],
            label=f"{label}: fitted ×{fit:.3f} per layer",
        )
    if rate is not None:
        fit = res["rate"]["batchnorm"]
        geo = np.exp([np.mean(np.log(r)) for r in res["ratio"]["batchnorm"]])
        anchor = np.mean(np.log(geo) - (depths - 1) * np.log(fit))
        ax.plot(
            depths,
            np.exp(anchor + (depths - 1) * np.log(rate)),
            color="black",
            lw=0.8,
            ls="--",
            label=f"predicted ×{rate:.3f} per layer",
        )
    ax.set_yscale("log")
    ax.set_xticks(depths, [str(int(d)) for d in depths])
    ax.set_xlabel("depth (hidden layers)")
    ax.set_ylabel("‖∂L/∂W₁‖ / ‖∂L/∂W_L‖")
    ax.set_title(
        f"At initialization, width {res['width']}, batch {res['batch']}, {len(res['seeds'])} seeds"
    )
    ax.legend(fontsize=8)
    return fig


def running_average(trace: Mapping) -> Figure:
    """Running mean of one feature during training vs the batch means and the true mean.

    ``trace``: ``{"batch_mean": (steps,), "running_mean": (steps,), "true_mean": float,
    "momentum": float}``.
    """
    fig, ax = figure(width=7, height=3.6)
    steps = np.arange(1, len(trace["batch_mean"]) + 1)
    ax.plot(steps, trace["batch_mean"], ".", color=COLORS["cpu"], ms=4, label="batch mean")
    ax.plot(
        steps,
        trace["running_mean"],
        color=COLORS["batchnorm"],
        lw=2,
        label=f"running mean (momentum {trace['momentum']})",
    )
    ax.axhline(trace["true_mean"], color="black", ls="--", lw=1, label="mean over all data")
    ax.set_xlabel("training step")
    ax.set_ylabel("feature mean")
    ax.set_title("Running average of the batch mean")
    ax.legend()
    return fig


#: The BatchNorm forward graph: node -> (x, y) position, and each edge's local gradient.
#: One source for the figure and its test; the chapter derives each label in words.
BN_GRAPH_NODES: dict[str, tuple[float, float]] = {
    "x": (0.0, 0.0),
    "μ": (1.6, 1.3),
    "x − μ": (3.2, 0.0),
    "v": (4.8, 1.3),
    "1/σ": (6.4, 1.3),
    "x̂": (8.0, 0.0),
    "y": (9.6, 0.0),
    "γ, β": (9.6, 1.3),
}
BN_GRAPH_EDGES: tuple[tuple[str, str, str], ...] = (
    ("x", "μ", r"$1/N$"),
    ("x", "x − μ", r"$1$"),
    ("μ", "x − μ", r"$-1$"),
    ("x − μ", "v", r"$2(x_i-\mu)/N$"),
    ("v", "1/σ", r"$-\frac{1}{2}(v+\varepsilon)^{-3/2}$"),
    ("x − μ", "x̂", r"$1/\sigma$"),
    ("1/σ", "x̂", r"$x_i-\mu$"),
    ("x̂", "y", r"$\gamma$"),
    ("γ, β", "y", r"$\hat x_i$, $1$"),
)


def backward_graph() -> Figure:
    """The computational graph of BatchNorm's forward pass, with each edge's local gradient.

    Boxes are the intermediate values of one feature over a batch of N samples
    (x → μ → x−μ → σ² → 1/σ → x̂ → y, with σ = sqrt(σ² + ε)); an arrow's label is the
    derivative of its head with respect to its tail. The backward pass walks the arrows in
    reverse, multiplying the upstream gradient by these labels and summing where paths meet.
    """
    from matplotlib.patches import FancyArrowPatch

    fig, ax = figure(width=10, height=3.4)
    ax.set_xlim(-0.7, 10.3)
    ax.set_ylim(-0.9, 2.0)
    ax.axis("off")
    box = dict(boxstyle="round,pad=0.35", facecolor="white", edgecolor="black", lw=1.4)
    for name, (px, py) in BN_GRAPH_NODES.items():
        face = "#E69F00" if name in ("x", "y") else "white"
        ax.text(
            px,
            py,
            name,
            ha="center",
            va="center",
            fontsize=13,
            bbox={**box, "facecolor": face},
            zorder=3,
        )
    for tail, head, label in BN_GRAPH_EDGES:
        (x0, y0), (x1, y1) = BN_GRAPH_NODES[tail], BN_GRAPH_NODES[head]
        # Curve the direct x -> x−μ edge below the row so it does not hide behind μ's edges.
        rad = 0.35 if (tail, head) == ("x", "x − μ") else 0.0
        ax.add_patch(
            FancyArrowPatch(
                (x0, y0),
                (x1, y1),
                arrowstyle="-|>",
                mutation_scale=14,
                lw=1.3,
                color="#0072B2",
                shrinkA=20,
                shrinkB=20,
                connectionstyle=f"arc3,rad={rad}",
                zorder=2,
            )
        )
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        if rad:
            my -= 0.55
        ax.text(
            mx,
            my + (0.18 if y0 == y1 else 0.0),
            label,
            ha="center",
            va="bottom",
            fontsize=9,
            color="#333333",
            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none"),
            zorder=4,
        )
    ax.set_title("BatchNorm forward graph (one feature); arrow labels: local gradients")
    return fig
