"""The BatchNorm chapter's multi-seed record and the sentences it words (no training except
one cheap live seed): normedu.experiments.batchnorm_seeds, normedu.claims.batchnorm_words."""

from __future__ import annotations

import pytest

from normedu import records
from normedu.claims import batchnorm_words as W
from normedu.experiments import batchnorm_seeds as R

TIE = 1 / 450


def test_inside_is_the_99_percent_prediction_interval_of_one_new_seed():
    # mean 0.2, sd 0.0791 over 5 seeds; t(0.995, 4) = 4.604 (a table value), sqrt(1 + 1/5):
    # half-width 0.399, so the interval is [-0.199, 0.599].
    vals = [0.1, 0.15, 0.2, 0.25, 0.3]
    assert R.inside(0.59, vals) and R.inside(-0.19, vals)
    assert not R.inside(0.61, vals) and not R.inside(-0.21, vals)
    with pytest.raises(ValueError, match="two seeds"):
        R.inside(0.1, [0.1])


def test_the_record_holds_five_seeds_of_every_experiment():
    rec = records.read(R.RECORD)
    data = rec["data"]
    assert data["seeds"] == list(R.SEEDS) == [0, 1, 2, 3, 4]
    n = len(data["seeds"])
    assert rec["provenance"]["record"]["params"] == {"seeds": data["seeds"]}
    for per_batch in (data["sweep"][k] for k in W.NORM_NAMES):
        assert len(per_batch) == len(data["sweep"]["batch_sizes"])
        assert all(len(v) == n for v in per_batch)
    for part in ("shift", "eval_mode"):
        assert all(len(v) == n for v in data[part].values())
    assert all(len(v) == n for v in data["ddp"]["errors"].values())


def test_the_live_seed_0_reproduces_the_records_shift_run():
    # The cheapest recorded runs (two MLPs, 42 steps each): at seed offset 0 the live run is
    # the record's seed 0, so it must land inside the record's spread (here: on its value).
    import torch

    from normedu.experiments import batchnorm as B

    torch.set_num_threads(1)
    rec = R.stored()["shift"]
    B.distribution_shift.cache_clear()
    live = B.distribution_shift(*R.SHIFT, seed=0)
    for key in ("bn_clean", "bn_shift", "ln_shift"):
        assert R.inside(live[key], rec[key]), key
        assert live[key] == pytest.approx(rec[key][0], abs=3 * TIE)
    assert live["recal_logit_diff"] < 1e-3  # the affine shift is undone exactly
    # ... so the clean-recalibrated model classifies the clean digits as the shifted-
    # recalibrated one does the shifted digits (the table's last row: one accuracy twice)
    assert live["bn_recal_clean"] == pytest.approx(live["bn_recalibrated"], abs=TIE)
    lo, med, hi = live["ln_std_ratio"]
    assert 0 < lo <= med <= hi


def test_sweep_words_state_the_ends_and_only_a_range_between():
    sweep = {
        "batch_sizes": [2, 4, 8],
        "batchnorm": [[0.6, 0.5, 0.7], [0.10, 0.12, 0.09], [0.05, 0.06, 0.04]],
        "groupnorm": [[0.10, 0.09, 0.12], [0.11, 0.10, 0.10], [0.10, 0.09, 0.11]],
        "layernorm": [[0.05, 0.06, 0.07], [0.12, 0.08, 0.13], [0.08, 0.09, 0.07]],
    }
    assert W.worse_than_both(sweep, 0, TIE) and not W.worse_than_both(sweep, 1, TIE)
    assert W.better_than_both(sweep, 2, TIE) and not W.better_than_both(sweep, 1, TIE)
    text = W.describe_sweep(sweep, TIE)
    assert "at batch 2 BatchNorm's error is above both GroupNorm's and LayerNorm's" in text
    assert "at batch 8 it is below both GroupNorm's and LayerNorm's" in text
    # batch 4, by hand: BN mean 0.10333, GN 0.10333 (+0.0 points), LN 0.11 (-0.7 points)
    assert "between (4) it is above both at none of them" in text
    assert "runs +0.0 points (GroupNorm) and -0.7 points (LayerNorm)" in text
    # An end with no clear verdict against one norm is worded one norm at a time.
    sweep["batchnorm"][2] = [0.12, 0.06, 0.11]  # vs GN: +2, -3, 0: not clear
    assert "at batch 8 it is against GroupNorm, no difference detectable" in W.describe_sweep(
        sweep, TIE
    )


def test_replay_words_follow_the_rule_both_ways():
    replay = {"error": [0.70, 0.60, 0.80], "error_train_mode": [0.75, 0.78, 0.80]}
    text = W.describe_replay(replay, [0.30, 0.32, 0.48], TIE)
    assert "local BN's error is higher on all 3 seeds" in text
    assert "-5.0, -18.0, +0.0 points" in text  # the change, per seed, without a verdict
    assert "it is still higher than SyncBN's on all 3 seeds" in text
    assert "already there in the mode the network was trained in" in text
    # Training-mode error not above SyncBN's: the sentence about the failure is left out.
    text = W.describe_replay(replay, [0.80, 0.70, 0.85], TIE)
    assert "already there" not in text


def test_shift_calibration_ddp_and_eval_words():
    sh = {
        "bn_clean": [0.93, 0.92, 0.94],
        "bn_shift": [0.49, 0.60, 0.55],
        "ln_clean": [0.91, 0.92, 0.90],
        "ln_shift": [0.25, 0.31, 0.66],
        "recal_logit_diff": [2e-5, 3e-5, 1e-5],
        "bn_recalibrated": [0.94, 0.92, 0.96],
    }
    text = W.describe_shift(sh, TIE)
    assert "-44.0, -32.0, -39.0 points" in text and "3e-05 or better" in text
    assert "trained one's by +1.0, +0.0, +2.0 points" in text  # recalibrated minus trained
    sh["bn_recal_clean"] = [0.95, 0.92, 0.96]  # measured: used instead
    assert "trained one's by +2.0, +0.0, +2.0 points" in W.describe_shift(sh, TIE)
    assert text.count("the shifted accuracy is lower on all 3 seeds") == 2
    cal = {
        "momenta": [0.1, 0.9],
        "batch": 4,
        "error_running": [[0.10, 0.11, 0.09], [0.30, 0.25, 0.40]],
        "error_calibrated": [[0.10, 0.10, 0.10], [0.10, 0.11, 0.12]],
    }
    text = W.describe_calibration(cal, TIE)
    assert "momentum 0.9" in text and "calibration lowers the error on all 3 seeds" in text
    assert "momentum 0.1" in text and "no difference detectable with 3 seeds" in text
    errors = {
        "2,2,local": [0.7, 0.6, 0.8],
        "2,2,sync": [0.3, 0.3, 0.5],
        "2,2,global": [0.3, 0.3, 0.5],
    }
    text = W.describe_ddp({"steps": 40, "errors": errors}, TIE)
    assert "40 SGD steps" in text and "local BN's error is higher on all 3 seeds" in text
    assert "equals the one-process BatchNorm's on every seed" in text
    ev = {
        "eval_full": [0.95, 0.94, 0.96],
        "eval_batch1": [0.95, 0.94, 0.96],
        "train_batch1": [0.60, 0.70, 0.65],
        "train_sorted8": [0.20, 0.25, 0.30],
    }
    text = W.describe_eval_mode(ev, TIE)
    assert "same accuracy one image at a time on every seed" in text
    assert text.count("below its eval-mode accuracy on all 3 seeds") == 2


def test_compare_reads_fractions_in_points_and_keeps_one_image_a_tie():
    c = W.compare([0.50, 0.40, 0.30], [0.30, 0.30, 0.30 - TIE], TIE)
    assert c.values == pytest.approx((20.0, 10.0, 100 * TIE))
    assert (c.positive, c.negative) == (2, 0)  # one test image apart: a tie, not a win
    assert c.words("up", "down").startswith("no difference detectable with 3 seeds")


def test_the_t_table_is_students():
    from scipy.stats import t  # the reference, here only: importing it costs a CPU-second

    for df, q in R.T995.items():
        assert q == pytest.approx(float(t.ppf(0.995, df)), abs=1e-3)
