"""normedu.claims.jacobian_words: each sentence of the gradient-flow chapter follows its rule,
on made-up results whose answers are known by construction (every branch, no training)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from normedu.claims import jacobian_words as W
from normedu.experiments import scale_invariance as V
from normedu.experiments.gradflow import GRID, HighwayGrid


def test_span_always_names_both_ends():
    # the same words on every seed offset: a range never collapses to one number, and ends
    # that differ get the digit that tells them apart
    assert W.span([0.181, 0.184], ".2g") == "0.181 to 0.184"
    assert W.span([0.18, 0.18], ".2g") == "0.18 to 0.18"
    assert W.span([0.27, -1.8], "+.1f") == "-1.8 to +0.3"


def test_within_is_the_seed_rule_on_absolute_errors():
    ok, words = W.within([0.01, -0.02, 0.03])
    assert ok and words == "within 5% on all 3 seeds"
    # one seed 20% off, two close: no sign agreement and a mean under twice its error
    ok, words = W.within([0.01, 0.2, -0.01])
    assert not ok and words.startswith("no difference detectable with 3 seeds")
    ok, _ = W.within([0.2, -0.3, 0.25])
    assert not ok


def _seed(q3: float, q4: float, **kw) -> dict:
    base = {
        "loss": {"plain": (q3, q4), "decay": (q3, q4)},
        "c_near": 0.3,
        "c_median": 2.0,
        "c_max": 40.0,
        "c_rms": 5.0,
        "c_plain": 0.2,
        "c_plain_early": 2.3,
    }
    return {**base, **kw}


def test_loss_words_fall_rise_and_flat():
    falling = [_seed(0.3, 0.2), _seed(0.31, 0.22), _seed(0.29, 0.25)]
    assert W.loss_words(falling, "plain")[0].startswith("its training loss was still falling")
    rising = [_seed(0.2, 0.3), _seed(0.22, 0.31), _seed(0.25, 0.29)]
    assert "rising again" in W.loss_words(rising, "decay")[0]
    flat = [_seed(0.2, 0.3), _seed(0.3, 0.2), _seed(0.25, 0.26)]
    text, cmp = W.loss_words(flat, "decay")
    assert "no longer falling detectably" in text and not cmp.clear


def test_c_is_called_steady_only_when_most_steps_sit_near_its_median():
    spiky = {"per_seed": [_seed(0.3, 0.2), _seed(0.3, 0.2, c_near=0.95)]}
    text = W.describe_c(spiky)
    assert "does not settle" in text and "30 to 95%" in text
    assert "is lower on all 2 seeds" in text  # the plain run's c fell on both
    steady = {"per_seed": [_seed(0.3, 0.2, c_near=0.9), _seed(0.3, 0.2, c_near=0.85)]}
    assert "stays near its median" in W.describe_c(steady)


def _profile(first_over_last: float, depth: int = 8) -> list[float]:
    """A geometric profile whose first block over its last is ``first_over_last``."""
    return list(np.geomspace(first_over_last, 1.0, depth))


def _grid(ln_alone=(3.0, 4.0, 5.0), ln_res=(2.0, 3.0, 4.0), res=1e4, plain=1e-8) -> HighwayGrid:
    per = {
        "layernorm+residual": [_profile(x) for x in ln_res],
        "layernorm, no residual": [_profile(x) for x in ln_alone],
        "no norm+residual": [_profile(res * k) for k in (1, 2, 3)],
        "no norm, no residual": [_profile(plain * k) for k in (1, 2, 3)],
    }
    mean = {k: np.mean(v, axis=0).tolist() for k, v in per.items()}
    return HighwayGrid(8, 16, mean, per)


def test_grid_spreads_directions_and_factors_per_seed():
    g = _grid()
    np.testing.assert_allclose(W.spreads(g, "layernorm+residual"), [2.0, 3.0, 4.0])
    assert W.toward_input(g, "no norm+residual").sign == 1
    assert W.toward_input(g, "no norm, no residual").sign == -1
    # a geometric profile over 8 blocks: 7 equal factors, the 7th root of first/last
    np.testing.assert_allclose(W.factors(g, "layernorm+residual")[:7], 2.0 ** (1 / 7))
    assert W.classify(g) == {
        "layernorm+residual": "bounded",
        "layernorm, no residual": "bounded",
        "no norm+residual": "orders",
        "no norm, no residual": "orders",
    }
    text = W.describe_highway(g)
    assert "larger at the input side than at the output side on all 3 seeds" in text
    assert "under that init the norm removes the orders of magnitude" in text


def test_small_init_cell_decides_what_the_orders_of_magnitude_come_from():
    g = _grid()
    g.per_seed[W.SMALL_INIT] = [_profile(x) for x in (1.001, 1.002, 1.001)]
    g.norms[W.SMALL_INIT] = np.mean(g.per_seed[W.SMALL_INIT], axis=0).tolist()
    assert W.classify(g)[W.SMALL_INIT] == "bounded"
    assert "spread depends on the init" in W.conclude_highway(g)
    g.per_seed[W.SMALL_INIT][1] = _profile(50.0)  # one seed past 10: no such conclusion
    text = W.conclude_highway(g)
    assert "not below 10 on every seed" in text and "depends on the init" not in text


def test_conclusion_tests_layernorm_alone_and_the_clean_contrast():
    # LayerNorm alone past 10 on one seed, still a hundred times below every no-norm stack
    text = W.conclude_highway(_grid(ln_alone=(3.0, 40.0, 5.0)))
    assert "spreads of 3 to 40 over the seeds, at least 100 times below" in text
    # ... or within a factor of 100 of one (the no-norm stacks' smallest spread is 1e4)
    text = W.conclude_highway(_grid(ln_alone=(3.0, 200.0, 5.0)))
    assert "does not remove the orders of magnitude" in text
    # LayerNorm + residuals above 10 on one seed: no clean contrast
    assert "does **not** show a clean contrast" in W.conclude_highway(_grid(ln_res=(2, 3, 12)))


def test_stored_grids_are_judged_only_with_three_seeds():
    old = HighwayGrid(8, 16, {k: _profile(3.0) for k, _, _ in GRID})  # no per-seed profiles
    assert old.seed_spreads("layernorm+residual") == []
    assert "too few to judge" in W.describe_stored(old, "GPU", 2)
    assert "On every seed" in W.describe_stored(_grid(), "GPU", 3)
    again = HighwayGrid.from_json({"depth": 8, "d_model": 16, "norms": old.norms})
    assert again == old  # results stored before per-seed profiles still load


def test_later_layers_box_follows_each_seed():
    g = _grid()
    assert "What goes wrong is at the input side" in W.describe_later_layers(g)
    # one seed whose last block without a norm receives a hundredth of LayerNorm's
    g.per_seed["no norm, no residual"][1] = [x * 1e-2 for x in g.per_seed["no norm+residual"][0]]
    assert "less than a tenth" in W.describe_later_layers(g)


def test_window_stats_against_a_run_at_its_equilibrium():
    # A made-up decay run sitting at the fixed point of the norm's recursion (found here by
    # iterating it), turning by the angle its step implies, and a plain run that keeps growing.
    lr, wd, c, steps = 0.5, 0.01, 2.0, 40
    u = 1.0
    for _ in range(20_000):
        u = (1 - lr * wd) ** 2 * u + lr**2 * c**2 / u
    w = math.sqrt(u)
    turn = math.atan(lr * c / w / ((1 - lr * wd) * w))
    decay = {
        "lr": lr,
        "wd": wd,
        "c": np.full(steps, c),
        "norm": np.full(steps, w),
        "turn": np.full(steps, turn),
        "eff_lr": np.full(steps, lr / w**2),
        "loss": np.linspace(1.0, 0.5, steps),
        "cos": np.zeros(steps),
        "step_residual": 0.0,
        "test_acc": 0.9,
    }
    norms = np.linspace(1.0, 2.0, steps)
    plain = {
        **decay,
        "c": np.linspace(3.0, 1.0, steps),
        "norm": norms,
        "final_norm": 2.1,
        "eff_lr": lr / norms**2,
        "turn": np.full(steps, 0.01),
    }
    st = V.window_stats(plain, decay, 10)
    assert st["gap"] == pytest.approx(0, abs=1e-12)
    assert st["turn"]["decay"] / math.sqrt(2 * lr * wd) == pytest.approx(1, abs=0.01)
    assert st["c_near"] == 1.0 and st["c_rms"] == pytest.approx(c)
    assert st["grew"] and st["plain_eff_lr_fall"] == pytest.approx(4.0)
    assert st["c_plain"] < st["c_plain_early"]
    assert st["loss"]["decay"][1] < st["loss"]["decay"][0]
    # at the fixed point every quarter sits on its own equilibrium, and the norm does not move
    np.testing.assert_allclose(st["quarters"], 0, atol=1e-12)
    np.testing.assert_allclose(st["lagged"], 0, atol=1e-12)
    assert st["drift"] == pytest.approx(0, abs=1e-12) and W.settled([st, st])[0]
    # the same run still relaxing from twice its equilibrium: the whole window's comparison
    # mixes the quarters, the quarter test sees the first one (steps 10-17) off by its mean
    lagging = {**decay, "norm": w * (1 + np.exp(-np.arange(steps) / 10.0))}
    st = V.window_stats(plain, lagging, 10)
    first = np.mean(np.exp(-np.arange(10, 17) / 10.0))
    assert st["worst_quarter"] == pytest.approx(first) and st["quarters"][0] == st["worst_quarter"]
    assert not W.settled([st, st])[0] and "more than 15% off" in W.settled([st, st])[1]
