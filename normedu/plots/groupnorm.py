"""Figures of the GroupNorm chapter: the four ways to cut a (B, C, H, W) tensor (the cube
figure of Wu & He 2018, Fig. 2), one sample's output among different batchmates, and the
test error against the batch size, and against the number of groups G."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from . import COLORS, Figure, figure

__all__ = ["CUTS", "normalization_cubes", "batchmates", "batch_size_errors", "group_errors"]

#: Instance normalization appears only in this chapter; Okabe-Ito's sky blue keeps it apart
#: from the course's BatchNorm (vermillion), LayerNorm (blue) and GroupNorm (purple) colours.
INSTANCENORM = "#56B4E9"

#: (title, colour, description of the highlighted set) per normalization, in figure order.
CUTS: dict[str, tuple[str, str, str]] = {
    "batchnorm": ("Batch Norm", COLORS["batchnorm"], "one channel, every sample"),
    "layernorm": ("Layer Norm", COLORS["layernorm"], "one sample, every channel"),
    "instancenorm": ("Instance Norm", INSTANCENORM, "one sample, one channel"),
    "groupnorm": ("Group Norm", COLORS["groupnorm"], "one sample, one group of channels"),
}


def _highlight(kind: str, n: int, c: int, hw: int, groups: int) -> np.ndarray:
    """Boolean (B, C, HW) mask of the values that share one mean and variance."""
    mask = np.zeros((n, c, hw), dtype=bool)
    if kind == "batchnorm":
        mask[:, 0, :] = True
    elif kind == "layernorm":
        mask[0, :, :] = True
    elif kind == "instancenorm":
        mask[0, 0, :] = True
    elif kind == "groupnorm":
        mask[0, : c // groups, :] = True
    else:
        raise ValueError(f"unknown normalization {kind!r}; choose one of {sorted(CUTS)}")
    return mask


def normalization_cubes(
    n: int = 4, c: int = 6, hw: int = 4, groups: int = 2, kinds: Sequence[str] = tuple(CUTS)
) -> Figure:
    """One cube per normalization: axes B (batch), C (channels) and H·W (spatial positions
    flattened); the coloured cells are normalized by one shared mean and variance.

    ``groups`` must divide ``c``. Each panel's title names the norm and the highlighted set.
    The cubes are drawn with ``Axes3D.voxels``; the highlighted cells are opaque, the others
    faint grey, so the picture does not rely on colour alone.
    """
    if c % groups:
        raise ValueError(f"groups = {groups} must divide c = {c}")
    fig = figure(width=3.0 * len(kinds), height=3.8)[0]
    fig.clear()
    for i, kind in enumerate(kinds):
        title, color, what = CUTS[kind]
        ax = fig.add_subplot(1, len(kinds), i + 1, projection="3d")
        mask = _highlight(kind, n, c, hw, groups)
        # voxels(x, y, z): x = H·W (to the right), y = B (into the page), z = C (up).
        filled = np.ones((hw, n, c), dtype=bool)
        hit = np.transpose(mask, (2, 0, 1))
        colors = np.where(hit[..., None], np.array(_rgba(color, 0.95)), _rgba("#bbbbbb", 0.12))
        edges = np.where(hit[..., None], _rgba("#222222", 0.9), _rgba("#888888", 0.35))
        ax.voxels(filled, facecolors=colors, edgecolors=edges, linewidth=0.5)
        ax.set_box_aspect((hw, n, c))
        ax.view_init(elev=20, azim=-60)
        ax.set_xlabel("H, W", labelpad=-12)
        ax.set_ylabel("B", labelpad=-12)  # the batch axis, B as in the book's notation
        ax.set_zlabel("C", labelpad=-12)
        ax.set_xticks([]), ax.set_yticks([]), ax.set_zticks([])
        ax.set_title(f"{title}\n({what})", fontsize=11, y=0.98)
        ax.set_gid(kind)
    return fig


def _rgba(hex_color: str, alpha: float) -> tuple[float, float, float, float]:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[k : k + 2], 16) / 255 for k in (0, 2, 4))
    return (r, g, b, alpha)


def batchmates(values: Mapping[str, Sequence[float]], alone: float | None = None) -> Figure:
    """One normalized output value of the same sample, computed inside many different batches.

    ``values`` maps a norm key (``"batchnorm"``, ``"groupnorm"``, ...) to that value in each
    batch; ``alone`` (optional) is the value with the sample in a batch of its own. One row of
    markers per norm: a spread means the output depends on the batchmates.
    """
    fig, ax = figure(width=7.0, height=2.6)
    markers = {"batchnorm": "o", "groupnorm": "s", "layernorm": "^", "instancenorm": "D"}
    names = list(values)
    for row, key in enumerate(names):
        v = np.asarray(values[key], dtype=float)
        jitter = np.linspace(-0.12, 0.12, len(v))
        ax.scatter(
            v,
            row + jitter,
            color=CUTS.get(key, (None, "#555555"))[1],
            marker=markers.get(key, "o"),
            s=28,
            edgecolor="#222222",
            linewidth=0.4,
        )
    if alone is not None:
        ax.axvline(alone, color="#222222", linestyle="--", linewidth=1, label="GroupNorm, alone")
    ax.set_yticks(range(len(names)), [CUTS.get(k, (k,))[0] for k in names])
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xlabel("normalized output of sample 0, channel 0, position 0")
    if alone is not None:
        ax.legend(loc="upper right", fontsize=8)
    return fig


def batch_size_errors(
    sweep: Mapping, norms: Sequence[str] = ("batchnorm", "groupnorm", "layernorm")
) -> Figure:
    """Test error (%) against the training batch size (log scale), one line per norm.

    ``sweep`` is the result of :func:`normedu.experiments.batchnorm.batch_size_sweep` (or its
    stored full-size run, or :func:`normedu.experiments.convnet.batch_size_sweep`):
    ``batch_sizes`` and one list of errors (fractions) per norm. Where the sweep also holds
    ``<norm>_all`` (errors per seed), each seed's error is drawn as a small faint marker
    beside the line of means, so the reader sees the spread the means hide.
    """
    fig, ax = figure(width=6.5, height=3.6)
    styles = {"batchnorm": ("o", "-"), "groupnorm": ("s", "--"), "layernorm": ("^", ":")}
    b = sweep["batch_sizes"]
    for key in norms:
        marker, line = styles.get(key, ("o", "-"))
        ax.plot(
            b,
            100 * np.asarray(sweep[key]),
            marker=marker,
            linestyle=line,
            color=CUTS[key][1],
            label=CUTS[key][0],
        )
        for b_i, errs in zip(b, sweep.get(f"{key}_all", ()), strict=False):
            ax.scatter(
                [b_i] * len(errs),
                100 * np.asarray(errs),
                marker=marker,
                color=CUTS[key][1],
                alpha=0.45,
                s=14,
                linewidth=0,
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks(b, [str(x) for x in b])
    ax.set_xlabel("training batch size")
    ax.set_ylabel("test error (%)")
    ax.legend()
    return fig


def group_errors(sweep: Mapping) -> Figure:
    """GroupNorm's test error (%) against the number of groups G (log scale).

    ``sweep`` is :func:`normedu.experiments.convnet.group_sweep`'s result: ``groups``,
    ``errors`` (mean per G), ``all`` (per seed) and ``channels``. The mean is a line, each seed
    a faint marker; the two ends are labelled with the norms they equal (G = 1: LayerNorm,
    G = C: InstanceNorm).
    """
    fig, ax = figure(width=6.0, height=3.4)
    g, color = sweep["groups"], CUTS["groupnorm"][1]
    ax.plot(g, 100 * np.asarray(sweep["errors"]), marker="D", color=color, label="mean")
    for g_i, errs in zip(g, sweep["all"], strict=True):
        ax.scatter([g_i] * len(errs), 100 * np.asarray(errs), color=color, alpha=0.45, s=14)
    ax.set_xscale("log", base=2)
    names = {1: "1\n(LayerNorm)", sweep["channels"]: f"{sweep['channels']}\n(InstanceNorm)"}
    ax.set_xticks(g, [names.get(k, str(k)) for k in g])
    ax.set_xlabel(f"number of groups G ({sweep['channels']} channels per layer)")
    ax.set_ylabel("test error (%)")
    ax.legend(["mean over seeds", "one seed"], loc="best")
    return fig
