"""Figures of chapters 1-3: each returns a Figure with the expected artists and data."""

from __future__ import annotations

import re
from types import SimpleNamespace

import matplotlib.colors as mcolors
import numpy as np
import pytest
from matplotlib.patches import Rectangle

from normedu import functional as Fn
from normedu.plots import COLORS
from normedu.plots import batchnorm as PB
from normedu.plots import drift as PD
from normedu.plots import layernorm as PL
from normedu.stats import LayerStats


def _white(fig):
    assert mcolors.to_hex(fig.get_facecolor()) == "#ffffff"


def _labelled(ax):
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def _recs(n=5, scale=1.0):
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        v = rng.normal(0, scale, 100)
        counts, edges = np.histogram(v, bins=10, density=True)
        out.append(
            LayerStats(
                name=str(i),
                kind="Tanh",
                index=i,
                shape=(10, 10),
                act_mean=float(v.mean()),
                act_std=float(v.std()) * (i + 1),
                saturation=float(i),
                act_hist=(counts, edges),
                grad_std=0.1 * (i + 1),
                grad_norm=10.0**-i,
                grad_hist=(counts, edges),
            )
        )
    return out


def test_compounding_plots_measured_and_closed_form():
    depth = np.arange(4)
    meas = {
        "depth": depth,
        "g=0.5": np.array([1, 0.6, 0.2, 0.1]),
        "g=2": np.array([1, 2.1, 3.9, 8.5]),
    }
    fig = PD.compounding(meas)
    ax = fig.axes[0]
    _white(fig)
    _labelled(ax)
    ys = [line.get_ydata() for line in ax.get_lines() if len(line.get_xdata())]
    np.testing.assert_allclose(ys[0], meas["g=0.5"])
    np.testing.assert_allclose(ys[1], 0.5**depth)  # dashed closed form
    np.testing.assert_allclose(ys[3], 2.0**depth)
    assert ax.get_yscale() == "log" and ax.get_legend() is not None


def test_layer_histograms_and_profiles():
    recs = {"no norm": _recs(), "BatchNorm": _recs(scale=2)}
    fig = PD.layer_histograms(recs, which="act", every=2)
    assert len(fig.axes) == 2
    assert all(len(ax.get_lines()) == 3 for ax in fig.axes)  # layers 1, 3, 5
    np.testing.assert_allclose(
        fig.axes[0].get_lines()[0].get_ydata(), recs["no norm"][0].act_hist[0]
    )
    assert all(ax.get_legend() is not None for ax in fig.axes)
    fig = PD.layer_histograms(recs, which="grad", every=4)
    assert "Gradient" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="which"):
        PD.layer_histograms(recs, which="weights")
    fig = PD.layer_profiles(recs)
    assert len(fig.axes) == 3
    np.testing.assert_allclose(
        fig.axes[0].get_lines()[1].get_ydata(), [r.act_std for r in recs["BatchNorm"]]
    )
    assert fig.axes[0].get_lines()[1].get_color() == COLORS["batchnorm"]
    assert fig.axes[2].get_yscale() == "log" and fig.axes[2].get_legend() is not None


class _Run:
    def __init__(self, loss, lr=0.1, probes=()):
        self.loss, self.test_acc, self.config, self.probes = (
            np.asarray(loss),
            0.5,
            {"lr": lr},
            list(probes),
        )


def test_loss_curves_are_moving_averages():
    loss = np.arange(20, dtype=float) ** 0.5
    runs = {
        ("relu", "none"): _Run(loss),
        ("relu", "batchnorm"): _Run(loss / 2),
        ("tanh", "none"): _Run(loss),
    }
    fig = PD.loss_curves(runs, smooth=5)
    assert len(fig.axes) == 2
    y = fig.axes[0].get_lines()[0].get_ydata()
    expected = [loss[i - 4 : i + 1].mean() for i in range(4, 20)]
    np.testing.assert_allclose(y, expected)
    _labelled(fig.axes[0])


def test_landscape_probes():
    probes = [
        {"step": 0, "loss_range": 1.0, "grad_lipschitz": 3.0},
        {"step": 5, "loss_range": 0.5, "grad_lipschitz": 2.0},
    ]
    fig = PD.landscape_probes({("relu", "none"): _Run([1.0], probes=probes)})
    np.testing.assert_allclose(fig.axes[1].get_lines()[0].get_ydata(), [3.0, 2.0])


def test_std_profiles_one_line_per_gain_and_a_unit_reference():
    fig = PD.std_profiles({"relu": {"g1": np.array([1.0, 0.5]), "g2": np.array([1.0, 2.0])}})
    ax = fig.axes[0]
    _white(fig)
    _labelled(ax)
    lines = ax.get_lines()
    np.testing.assert_allclose(lines[1].get_ydata(), [1.0, 2.0])
    assert len(lines) == 3 and list(lines[-1].get_ydata()) == [1.0, 1.0]
    assert ax.get_yscale() == "log"


def test_update_ratios_one_line_per_layer():
    ratios = np.arange(12.0).reshape(4, 3)
    fig = PD.update_ratios({"a": SimpleNamespace(update_ratios=ratios)}, steps=3)
    lines = fig.axes[0].get_lines()
    assert len(lines) == 4  # three layers and the -3 reference
    np.testing.assert_allclose(lines[1].get_ydata(), [1.0, 4.0, 7.0])
    _labelled(fig.axes[0])


def test_batch_size_sweep_plot_with_cited_panel():
    sweep = {
        "batch_sizes": [2, 8, 32],
        "epochs": 2,
        "seeds": [0],
        "batchnorm": [0.5, 0.1, 0.05],
        "layernorm": [0.1, 0.1, 0.1],
    }
    fig = PB.batch_size_sweep(sweep, cited={"batchnorm": {32: 23.6, 2: 34.7}})
    assert len(fig.axes) == 2
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), [50, 10, 5])
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert "23.6%" in texts and "34.7%" in texts
    assert "cited" in fig.axes[1].get_title()
    cited = fig.axes[1].get_lines()[0]  # published points: markers, no line joining them
    assert cited.get_linestyle() == "None" and cited.get_marker() == "s"
    assert len(PB.batch_size_sweep(sweep).axes) == 1


def test_backward_graph_draws_every_node_and_edge_label():
    fig = PB.backward_graph()
    ax = fig.axes[0]
    texts = {t.get_text() for t in ax.texts}
    assert set(PB.BN_GRAPH_NODES) <= texts
    assert {label for _, _, label in PB.BN_GRAPH_EDGES} <= texts
    assert len(ax.patches) == len(PB.BN_GRAPH_EDGES)  # one arrow per edge
    assert ax.get_title()
    _white(fig)


def test_syncbn_and_running_average_plots():
    sim = {
        "per_device": [2, 4],
        "devices": 4,
        "local_var_ratio": [0.5, 0.75],
        "sync_var_ratio": [0.9, 0.95],
        "local_mean_err": [0.7, 0.5],
        "sync_mean_err": [0.35, 0.25],
    }
    fig = PB.syncbn(sim)
    lines = fig.axes[0].get_lines()
    np.testing.assert_allclose(lines[1].get_ydata(), [0.5, 0.75])  # theory (m-1)/m
    np.testing.assert_allclose(lines[3].get_ydata(), [7 / 8, 15 / 16])  # theory (Pm-1)/(Pm)
    trace = {
        "batch_mean": np.array([1.0, 2.0]),
        "running_mean": np.array([0.1, 0.29]),
        "true_mean": 1.5,
        "momentum": 0.1,
    }
    fig = PB.running_average(trace)
    _labelled(fig.axes[0])
    np.testing.assert_allclose(fig.axes[0].get_lines()[1].get_ydata(), [0.1, 0.29])


def test_bn_vs_ln_matrix_highlights_a_column_and_a_row():
    fig = PL.bn_vs_ln_matrix(n_samples=4, n_features=5, feature=2, sample=1)
    bn_ax, ln_ax = fig.axes
    col = [p for p in bn_ax.patches if isinstance(p, Rectangle) and p.get_gid() == "bn-col"]
    row = [p for p in ln_ax.patches if isinstance(p, Rectangle) and p.get_gid() == "ln-row"]
    assert len(col) == 4 and {p.get_x() for p in col} == {2}
    assert len(row) == 5 and {p.get_y() for p in row} == {4 - 1 - 1}
    assert mcolors.to_hex(col[0].get_facecolor()) == COLORS["batchnorm"].lower()
    assert mcolors.to_hex(row[0].get_facecolor()) == COLORS["layernorm"].lower()
    assert len(bn_ax.texts) == 20
    with pytest.raises(ValueError):
        PL.bn_vs_ln_matrix(feature=9)


def test_layernorm_frames_end_at_the_reference_output():
    x, g, b = [3.0, 5.0, 1.0, 6.0, 2.0, 4.5], [1.5, 0.5, 1, 2, 1, 0.8], [0.5, 0, -0.5, 0, 1, 0]
    frames = PL.layernorm_frames(x, g, b, tween=2)
    assert len(frames) == 1 + 4 * 3
    np.testing.assert_allclose(frames[0][0], x)
    np.testing.assert_allclose(
        frames[-1][0], Fn.layer_norm(np.array([x]), np.array(g), np.array(b))[0], rtol=1e-12
    )
    np.testing.assert_allclose(frames[3][0], np.array(x) - np.mean(x))  # after stage 1
    assert frames[-1][1].startswith("4.")
    with pytest.raises(ValueError):
        PL.layernorm_frames([1.0, 2.0], [1.0], [0.0])


def test_animation_html_is_offline_and_has_every_frame():
    html = PL.layernorm_animation(tween=1)
    assert "<link" not in html and "http://" not in html and "https://" not in html
    assert html.count("data:image/png;base64") == 1 + 4 * 2
    assert "Animation" in html and "first" in html.lower()
    assert re.search(r'<img alt="Animated bar chart[^"]*" id=', html)  # alt text for readers
    # Every control has a name for screen readers: the buttons carry matplotlib's aria-label,
    # the slider ours.
    sliders = re.findall(r"<input [^>]*anim-slider[^>]*>", html)
    assert len(sliders) == 1 and 'aria-label="Animation frame"' in sliders[0]


def test_strip_external_links():
    src = (
        '<link rel="stylesheet" href="https://cdn.example/fa.css">\n'
        '<div>x</div><link href="local.css">'
    )
    out = PL.strip_external_links(src)
    assert "cdn.example" not in out and 'href="local.css"' in out and "<div>x</div>" in out


def test_affine_curves():
    demo = {
        "floor": 0.28,
        "affine": {"loss": np.array([1.0, 0.2])},
        "no_affine": {"loss": np.array([1.0, 0.4])},
    }
    fig = PL.affine_curves(demo)
    ys = [line.get_ydata() for line in fig.axes[0].get_lines()]
    np.testing.assert_allclose(ys[0], [1.0, 0.2])
    np.testing.assert_allclose(ys[2], [0.28, 0.28])


def test_gamma_beta_histograms_two_panels():
    g, b = np.r_[np.ones(8), 1.7 * np.ones(2)], np.r_[np.zeros(8), 0.5 * np.ones(2)]
    fig = PL.gamma_beta_histograms(g, b, bands={"a": (1.5, 2.0)})
    ax_g, ax_b = fig.axes
    assert sum(p.get_height() for p in ax_g.containers[0]) == 10
    assert sum(p.get_height() for p in ax_b.containers[0]) == 10
    assert list(ax_b.get_lines()[0].get_xdata()) == [0.0, 0.0]  # beta's initial value
    _labelled(ax_g)
    _labelled(ax_b)


def test_walkthrough_table():
    from normedu.experiments.layernorm import walkthrough

    md = PL.walkthrough_table(walkthrough((2.0, 4.0, -1.0, 3.0)))
    lines = md.splitlines()
    assert len(lines) == 2 + 4 + 2
    assert "| 1 | 4 | 2 | 4 | 1.069 | 1.069 |" in md
    assert "σ² = 3.5" in md and "μ = 2" in md


def test_init_gradient_growth_fit_lines():
    res = {
        "depths": [2, 4],
        "seeds": [0, 1],
        "width": 8,
        "batch": 8,
        "ratio": {"batchnorm": [[1.2, 1.2], [1.728, 1.728]], "none": [[1.0, 1.0], [1.0, 1.0]]},
        "rate": {"batchnorm": 1.2, "none": 1.0},
    }
    fig = PB.init_gradient_growth(res, rate=1.5)
    ax = fig.axes[0]
    _labelled(ax)
    assert ax.get_yscale() == "log"
    fits = [ln for ln in ax.get_lines() if "per layer" in ln.get_label()]
    assert len(fits) == 3  # two fits and the predicted line
    np.testing.assert_allclose(fits[0].get_ydata(), [1.2, 1.728])  # through the points
    # the predicted rate, from the fit's value at depth 1 (here 1.0)
    np.testing.assert_allclose(fits[2].get_ydata(), [1.5, 1.5**3])


def test_small_width_accuracy_means_and_bounds():
    res = {
        "widths": [1, 2, 4],
        "seeds": [0, 1],
        "epochs": 1,
        "acc": {
            "layernorm": [[0.1, 0.1], [0.2, 0.1], [0.8, 0.9]],
            "none": [[0.3, 0.2], [0.5, 0.4], [0.9, 0.9]],
        },
        "largest_class": 0.102,
        "two_largest": 0.204,
    }
    fig = PL.small_width_accuracy(res)
    ax = fig.axes[0]
    _labelled(ax)
    means = [ln for ln in ax.get_lines() if "mean of" in ln.get_label()]
    np.testing.assert_allclose(means[0].get_ydata(), [10, 15, 85])
    bounds = sorted(
        ln.get_ydata()[0]
        for ln in ax.get_lines()
        if ln.get_linestyle() == ":" and ln.get_color() == "black"
    )
    np.testing.assert_allclose(bounds, [10.2, 20.4])
