"""Figures of chapters 4-6: drawn from live results and beside a stored GPU run.

The "stored GPU runs" here are FAKE TEST DATA written to a pytest tmp dir (never to
results/): they only prove that the figures draw a stored run when one exists and draw only
the live panels, with no build instructions, when none does.
"""

from __future__ import annotations

import numpy as np
import pytest

from normedu import results
from normedu.bench import BenchResult
from normedu.experiments import gradflow as G
from normedu.experiments import prepost as E
from normedu.experiments import rmsnorm as R
from normedu.experiments import stored_result
from normedu.plots import jacobian as PJ
from normedu.plots import prepost as PP
from normedu.plots import rmsnorm as PR

FAKE = "FAKE TEST DATA (tests/test_plots_ch4_6.py), not a measurement"


def _texts(fig) -> str:
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [t.get_text() for t in ax.texts] + [ax.get_title()]
    if fig._suptitle is not None:
        out.append(fig._suptitle.get_text())
    return "\n".join(out)


def _white(fig) -> bool:
    return fig.get_facecolor()[:3] == (1.0, 1.0, 1.0)


def _fake_bench(device: str, ratio: float) -> BenchResult:
    rows = []
    for d in (1024, 4096, 16384):
        for impl in ("eager", "textbook", "compiled"):
            for op, t in (("layernorm", 1e-3), ("rmsnorm", 1e-3 * ratio)):
                rows.append(
                    dict(
                        op=op,
                        impl=impl,
                        pass_="fwd",
                        dtype="float32",
                        n=1024,
                        d=d,
                        median_s=t,
                        min_s=t,
                        max_s=t,
                        reps=3,
                        gbps=1.0,
                        frac_of_copy=0.5,
                        compile_s=0.0,
                    )
                )
    copies = [
        dict(
            op="copy",
            impl="copy",
            pass_="fwd",
            dtype="float32",
            n=1024,
            d=d,
            median_s=1e-4,
            min_s=1e-4,
            max_s=1e-4,
            reps=3,
            gbps=10.0,
            frac_of_copy=1.0,
            compile_s=0.0,
        )
        for d in (1024, 4096, 16384)
    ]
    return BenchResult(_rows=rows, copies=copies, provenance={"device": device, "note": FAKE})


def _fake_stability() -> E.StabilityResult:
    runs = [
        E.TrainRun(
            p,
            w,
            list(np.linspace(3, 0.1 if p == "pre" else 2.5, 20)),
            0.1,
            1.0,
            False,
            p == "pre" or w > 0,
            [1.0, 0.9],
        )
        for p in ("post", "pre")
        for w in (0, 5)
    ]
    return E.StabilityResult(
        runs,
        depth=24,
        d_model=512,
        steps=20,
        lr=1e-3,
        task="reverse",
        chance_loss=float(np.log(64)),
    )


def _fake_init() -> E.InitGradNorms:
    norms = {p: {str(d): list(np.linspace(1, 2, d)) for d in (6, 12)} for p in ("post", "pre")}
    return E.InitGradNorms([6, 12], norms, d_model=512, seeds=1)


def _fake_grid(depth: int) -> G.HighwayGrid:
    return G.HighwayGrid(depth, 512, {k: list(np.geomspace(1, 10, depth)) for k, _, _ in G.GRID})


@pytest.fixture
def fake_results_dir(tmp_path, monkeypatch):
    """A tmp results/ holding fake stored runs, so load_stored finds them."""
    monkeypatch.setenv("NORMEDU_ROOT", str(tmp_path))
    results.save_stored(
        "prepost",
        {"note": FAKE, "init": _fake_init().to_json(), "training": _fake_stability().to_json()},
        command="pytest (fake)",
    )
    results.save_stored(
        "gradflow", {"note": FAKE, "grid": _fake_grid(96).to_json()}, command="pytest (fake)"
    )
    return tmp_path


def test_speed_ratio_figure_without_and_with_stored():
    live = _fake_bench("CPU (fake)", 2.0)
    fig = PR.speed_ratio_figure(live, None)
    assert _white(fig) and len(fig.axes) == 1 and "--store" not in _texts(fig)
    (left,) = fig.axes
    assert len(left.get_lines()) == 4  # eager, textbook, compiled, the line at 1
    np.testing.assert_allclose(left.get_lines()[0].get_ydata(), [2.0, 2.0, 2.0])
    fig = PR.speed_ratio_figure(live, _fake_bench("NVIDIA H200 (fake)", 0.8))
    assert len(fig.axes) == 2
    right = fig.axes[1]
    np.testing.assert_allclose(right.get_lines()[0].get_ydata(), [0.8, 0.8, 0.8])
    assert "H200" in right.get_title()
    assert right.get_xlabel() and right.get_ylabel() and right.get_legend() is not None


def test_stored_result_reads_fake_file(fake_results_dir):
    data, prov = stored_result("prepost")
    assert data["note"] == FAKE and prov["command"] == "pytest (fake)"
    assert stored_result("never-stored") is None


def test_init_grad_figure_beside_stored(fake_results_dir):
    live = _fake_init()
    fig = PP.init_grad_figure(live, None)
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 2]
    # The fake profiles span 1 to 2, less than a decade: no power of ten inside, yet every
    # panel labels its y axis, and Post-LN and Pre-LN share their axes.
    post, pre = fig.axes
    for ax in (post, pre):
        lo, hi = ax.get_ylim()
        shown = [t.get_text() for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi]
        assert shown == ["1", "2"], shown
    assert post.get_shared_y_axes().joined(post, pre)
    assert post.get_shared_x_axes().joined(post, pre)
    data, prov = stored_result("prepost")
    fig = PP.init_grad_figure(live, E.InitGradNorms.from_json(data["init"]), prov["device"])
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 2, 2, 2]
    assert "stored GPU run" in _texts(fig)


def test_highway_figure_beside_stored(fake_results_dir):
    live = _fake_grid(24)
    fig = PJ.highway_figure(live, None)
    assert "--store" not in _texts(fig) and "stored GPU" not in _texts(fig)
    assert all(len(ax.get_lines()) == 1 for ax in fig.axes)
    data, prov = stored_result("gradflow")
    fig = PJ.highway_figure(live, G.HighwayGrid.from_json(data["grid"]), prov["device"])
    assert all(len(ax.get_lines()) == 2 for ax in fig.axes)
    assert all(ax.get_yscale() == "log" for ax in fig.axes)
    # the stored run is drawn on relative depth: both end at 1.0
    xs = [line.get_xdata() for line in fig.axes[0].get_lines()]
    assert len(xs[0]) == 24 and len(xs[1]) == 96 and xs[0][-1] == xs[1][-1] == 1.0


def test_jacobian_figures():
    demo = G.jacobian_demo(d=5)
    fig = PJ.parts_figure(demo)
    assert len(fig.axes[0].get_images()) == 1 and len(fig.axes) == 6  # 5 panels + colorbar
    np.testing.assert_allclose(fig.axes[3].get_images()[0].get_array(), demo.jac)
    fig = PJ.eigen_figure(demo)
    heights = [p.get_height() for p in fig.axes[0].patches[: demo.d]]
    np.testing.assert_allclose(heights, demo.eigenvalues)
    sr = G.self_regulation(scales=(0.1, 1.0, 10.0), d=8)
    fig = PJ.self_regulation_figure(sr)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), sr.gain)


def test_rmsnorm_figures():
    ex = R.worked_example()
    fig = PR.example_figure(ex)
    bars = fig.axes[0].patches
    np.testing.assert_allclose([b.get_height() for b in bars[8:12]], ex["rms_out"])
    assert "0.7303" in "".join(t.get_text() for t in fig.axes[0].get_legend().get_texts())
    pr = R.prms_check(ps=(0.25, 1.0), n=64, d=32, timed=False)
    fig = PR.prms_figure(pr)
    assert "not timed" in _texts(fig) and _white(fig)


def test_dataflow_figure():
    fig = PP.dataflow_figure()
    text = _texts(fig)
    assert "LN(x + Sublayer(x))" in text and "x + Sublayer(LN(x))" in text
    assert _white(fig)


def test_wide_figure_draws_each_profile_over_its_first_layer():
    def prof(model, placement, changes, norms):
        return E.WideProfile(model, placement, changes, norms)

    res = E.WideCheck(
        [
            prof("nn.TransformerEncoderLayer", "post", "", [2.0, 3.0]),
            prof("nn.TransformerEncoderLayer", "pre", "", [4.0, 1.0]),
            prof("TinyGPT", "post", "", [1.0, 1.5]),
            prof("TinyGPT", "post", "no causal mask", [2.0, 1.0]),
            prof("TinyGPT", "pre", "", [5.0, 1.0]),
        ],
        E.WIDE,
    )
    fig = PP.wide_figure(res)
    post, pre = fig.axes
    assert _white(fig) and len(post.get_lines()) == 4 and len(pre.get_lines()) == 3  # + y=1
    np.testing.assert_allclose(post.get_lines()[0].get_ydata(), [1.0, 1.5])
    np.testing.assert_allclose(post.get_lines()[2].get_ydata(), [1.0, 0.5])
    labels = [t.get_text() for t in post.get_legend().get_texts()]
    assert labels[0].endswith("(1.50)") and "no causal mask (0.50)" in labels[2]
    markers = {line.get_marker() for line in post.get_lines()[:3]}
    assert len(markers) == 3  # told apart without colour


def test_scale_invariance_figure_panels():
    steps = 8
    run = {
        "norm": np.linspace(1, 2, steps),
        "cos": np.full(steps, 1e-7),
        "eff_lr": 0.5 / np.linspace(1, 2, steps) ** 2,
        "c": np.ones(steps),
    }
    res = {
        "plain": run,
        "decay": run,
        "lr": 0.5,
        "wd": 0.01,
        "tail_start": 6,
        "predicted": 1.5,
        "c_rms": 1.0,
    }
    fig = PJ.scale_invariance_figure(res)
    assert len(fig.axes) == 4
    assert fig.axes[1].get_yscale() == "log" and fig.axes[2].get_yscale() == "log"
    eq = [ln for ln in fig.axes[2].get_lines() if "W*" in ln.get_label()]
    np.testing.assert_allclose(eq[0].get_ydata(), [0.5 / 1.5**2] * 2)


def test_warmup_heatmap_colours_the_share_of_seeds_and_writes_every_cell():
    lrs, warmups = [1e-3, 1e-2], [0, 5, 20]
    # two seeds: seed 1 trains wherever seed 0 does, and also in Post-LN's warm-up 5 column
    runs = [
        E.TrainRun(p, w, [], loss, 1.0, not np.isfinite(loss), loss < 1.0, [], lr, seed)
        for seed in (0, 1)
        for p, base in (("post", 2.5), ("pre", 0.1))
        for lr in lrs
        for w, loss in zip(
            warmups,
            (base, base / (2 + 2 * seed), float("nan") if p == "post" else 0.05),
            strict=True,
        )
    ]
    sweep = E.WarmupSweep(
        runs, lrs, warmups, 1e-2, 5, 4, 32, 50, "reverse", float(np.log(14)), seeds=2
    )
    fig = PP.warmup_heatmap(sweep)
    post, pre = fig.axes[:2]
    # one scale, the share of seeds that trained, 0 to 1
    assert post.images[0].get_clim() == pre.images[0].get_clim() == (0.0, 1.0)
    assert post.images[0].get_cmap().name == "viridis"
    np.testing.assert_array_equal(post.images[0].get_array(), [[0, 0.5, 0], [0, 0.5, 0]])
    cells = [t.get_text() for ax in (post, pre) for t in ax.texts]
    # Post-LN warm-up 5: seeds at 1.25 and 0.625, median 0.94; a diverged seed: NaN median
    assert len(cells) == 12 and cells.count("0/2\n(NaN)") == 2 and "1/2\n(0.94)" in cells
    assert "2/2\n(0.05)" in cells and "0/2\n(2.50)" in cells
    assert [t.get_text() for t in post.get_yticklabels()] == ["0.001", "0.01"]


def test_scaling_figure_states_each_fitted_slope():
    depths = [6, 12, 24, 48]
    norms = {
        p: {str(d): [1.0] * (d - 1) + [d**k] for d in depths}
        for p, k in (("pre", -0.5), ("post", 0.0))
    }
    stream = {
        p: {str(d): list(np.arange(1, d + 1) ** k) for d in depths}
        for p, k in (("pre", 0.5), ("post", 0.0))
    }
    init = E.InitGradNorms(depths, norms, d_model=8, seeds=1, stream=stream)
    fig = PP.scaling_figure(init, E.EXPECTED_SLOPES)
    labels = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    assert "Pre-LN fit: slope 0.50 (predicted 0.5)" in labels
    assert "Post-LN fit: slope 0.00 (predicted 0)" in labels  # no "-0.00"
    assert "Pre-LN batch fit: slope -0.50 (predicted -0.5)" in labels
    assert not any("per-token" in x for x in labels)  # not measured: not drawn
    init.token = {p: {str(d): 3.0 * d**-0.5 for d in depths} for p in ("pre", "post")}
    fig = PP.scaling_figure(init, E.EXPECTED_SLOPES)
    labels = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    assert "Post-LN per-token fit: slope -0.50 (predicted 0)" in labels
