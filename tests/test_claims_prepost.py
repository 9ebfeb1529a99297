"""The sentences of the Pre/Post-Norm chapter: each branch on hand-built results."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from normedu.claims import prepost as C
from normedu.experiments import prepost as E


def _stab(spreads) -> E.StabilityResult:
    """Headline runs whose Pre-LN runs without warm-up, one per seed, end with per-layer
    gradients of max/min ``spreads``."""
    runs = [
        E.TrainRun(p, w, [0.1], 0.1, 1.0, False, True, [s, 1.0], 1e-2, seed)
        for seed, s in enumerate(spreads)
        for p in ("post", "pre")
        for w in (0, 30)
    ]
    return E.StabilityResult(runs, 8, 32, 120, 1e-2, "reverse", math.log(16))


@pytest.mark.parametrize(
    ("spreads", "words", "verdict"),
    [
        ((3.0, 2.5, 2.8), "more than a factor of 2 by the rule", "not reproduced"),
        ((1.5, 1.2, 1.8), "within a factor of 2 by the rule", "confirmed"),
        # 2 - mean = 0.03, twice its standard error 0.58: the seeds cannot tell
        ((1.5, 2.5, 1.9), "not distinguishable from a factor of 2 by the rule", "depends"),
    ],
)
def test_stability_sentence_judges_the_seeds_spreads(spreads, words, verdict):
    stab = _stab(spreads)
    text = C.describe_stability(stab)
    assert ", ".join(f"{s:.2f}×" for s in spreads) + " on the 3 seeds: " + words in text
    init = E.InitGradNorms([2], {"pre": {"2": [2.0, 1.0]}, "post": {"2": [1.0, 1.0]}}, 8, 1)
    claim = C.pre_flat_2x(init, stab, "cpu")
    assert claim.verdict == verdict and claim.per_seed["max/min after training"] == list(spreads)
    for r in stab.runs:  # no gradients recorded after training: no sentence, no test
        r.grad_norms_end = []
    assert C.describe_stability(stab) == ""
    assert C.pre_flat_2x(init, stab, "cpu").verdict == "depends"


def test_trend_thresholds():
    assert [C.trend(r) for r in (1.3, 1.0, 0.4)] == ["grows", "is flat", "shrinks"]


def _wide(post_ref, post_tiny, pre_ref, pre_tiny, every=None, seeds=C.DIRECTION_SEEDS, alone=None):
    """A hand-built check whose every stack has ``seeds`` seeds, all at the stack's ratio.

    ``every``: (Post-LN, Pre-LN) ratios of TinyGPT with all switches (default: the
    reference's); ``alone``: {switch: ratio} rows of single switches on Post-LN.
    """

    def prof(model, placement, changes, ratio):
        return E.WideProfile(
            model, placement, changes, [1.0, (1 + ratio) / 2, ratio], [ratio] * seeds
        )

    every = every or (post_ref, pre_ref)
    rows = [
        prof("nn.TransformerEncoderLayer", "post", "", post_ref),
        prof("nn.TransformerEncoderLayer", "pre", "", pre_ref),
        prof("TinyGPT", "post", "", post_tiny),
        *[prof("TinyGPT", "post", name, r) for name, r in (alone or {}).items()],
        prof("TinyGPT", "post", "all switches", every[0]),
        prof("TinyGPT", "pre", "", pre_tiny),
        prof("TinyGPT", "pre", "all switches", every[1]),
    ]
    return E.WideCheck(rows, dataclasses.replace(E.WIDE, seeds=seeds))


@pytest.mark.parametrize(
    ("post_ref", "post_tiny", "verdict", "words"),
    [
        (1.3, 1.25, "confirmed", "**reproduces**"),
        (1.0, 0.95, "not reproduced", "0 of 8 ratios are above 1 (mean 0.97)"),
        # mean 1.05, its standard error 0.094: growth in one stack, not beyond the spread
        (1.3, 0.8, "not reproduced", "4 of 8 ratios are above 1 (mean 1.05)"),
    ],
)
def test_wide_sentence_follows_the_seeds(post_ref, post_tiny, verdict, words):
    res = _wide(post_ref, post_tiny, 0.4, 0.25)
    assert C.post_wide_verdict(res) == verdict
    text = C.describe_wide(res)
    assert words in text
    assert "our measurement contradicts the figure" in text  # Pre-LN shrinks in both
    assert "**inside the range of the reference's seeds** for both placements" in text
    assert "Each switch alone" not in text


def test_wide_sentence_all_switches_against_the_reference():
    """TinyGPT with every switch is compared with the spread of the reference's seeds."""
    res = _wide(1.0, 0.95, 0.6, 0.37, every=(1.0, 0.37))  # Pre-LN all switches = as is
    assert C.matches_reference(res, "post") and not C.matches_reference(res, "pre")
    text = C.describe_wide(res)
    assert "gives 1.00 (Post-LN) and 0.37 (Pre-LN), against 1.00 and 0.60" in text
    assert "**outside the range of the reference's seeds** for at least one placement" in text
    # one seed of the reference at 0.40 widens its range down to TinyGPT's 0.37 ... almost
    res.get("nn.TransformerEncoderLayer", "pre").seed_ratios = [0.6, 0.6, 0.6, 0.40]
    assert not C.matches_reference(res, "pre")
    # ... and TinyGPT's own spread of seeds (0.33 to 0.41) is the slack that closes the gap
    res.get("TinyGPT", "pre", "all switches").seed_ratios = [0.33, 0.37, 0.37, 0.41]
    assert C.matches_reference(res, "pre")


def test_wide_sentence_lists_single_switches_and_pre_flat():
    res = _wide(1.3, 1.3, 1.0, 0.95, alone={"no causal mask": 0.9, "ReLU instead of GELU": 1.2})
    text = C.describe_wide(res)
    assert "Each switch alone: no causal mask 0.90; ReLU instead of GELU 1.20." in text
    assert "as in Xiong et al.'s Fig. 3" in text and "contradicts" not in text


def test_init_sentence_both_branches():
    grow = {str(d): [1.0] * (d - 1) + [2.0] for d in (2, 4)}
    shrink = {str(d): [2.0] + [1.0] * (d - 1) for d in (2, 4)}
    init = E.InitGradNorms([2, 4], {"post": grow, "pre": shrink}, d_model=8, seeds=1)
    text = C.describe_init(init)
    assert "(each the mean of 1 initializations): the gradient grows toward the output" in text
    assert "**disagrees**" in text
    assert C.post_grows(init, "cpu").verdict == "confirmed"
    init = E.InitGradNorms([2, 4], {"post": shrink, "pre": grow}, d_model=8, seeds=1)
    text = C.describe_init(init)
    assert "does **not** reproduce" in text
    assert "the profile grows toward the output at every depth" in text
    assert C.post_grows(init, "cpu").verdict == "not reproduced"
    assert C.post_grows(init, "cpu").quote_where == "Abstract"


def test_post_growth_judged_over_seeds_at_each_depth():
    """Per-seed profiles: each depth's last/first ratios go to the seed rule on their own."""
    post = {str(d): [1.0] * d for d in (2, 4)}
    # 2 layers: 1.5, 1.2, 1.3 above 1 on every seed; 4 layers: 0.5, 1.7, 0.9, mean 1.03
    seed_norms = {
        "post": {
            "2": [[1.0, r] for r in (1.5, 1.2, 1.3)],
            "4": [[1.0] * 3 + [r] for r in (0.5, 1.7, 0.9)],
        },
        "pre": {"2": [[2.0, 1.0]] * 3, "4": [[2.0, 1.0, 1.0, 1.0]] * 3},
    }
    pre = {str(d): [2.0] + [1.0] * (d - 1) for d in (2, 4)}
    init = E.InitGradNorms([2, 4], {"post": post, "pre": pre}, 8, 3, seed_norms=seed_norms)
    assert init.seed_last_over_first("post", 4) == [0.5, 1.7, 0.9]
    assert C.post_grows_by_depth(init) == {2: 1, 4: 0}
    text = C.describe_init(init)
    assert "ranges from 0.50 to 1.70 over the 3 seeds and 2 depths" in text
    assert "above 1 at 1 of the 2 depths and below 1 at 0" in text and "does **not**" in text
    claim = C.post_grows(init, "cpu")
    assert claim.verdict == "not reproduced" and claim.per_seed["last/first, 2 layers"] == [
        1.5,
        1.2,
        1.3,
    ]
    seed_norms["post"]["4"] = [[1.0] * 3 + [r] for r in (1.1, 1.7, 1.2)]
    assert C.post_grows(init, "cpu").verdict == "confirmed"


def test_slope_status_reads_the_seeds_against_the_band():
    # band 0.35 .. 0.65 around 0.5
    assert C.slope_status([0.52, 0.54, 0.53, 0.55], 0.5) == "agrees"  # one side, still inside
    assert C.slope_status([0.7, 0.8, 0.75], 0.5) == "off"  # every seed above the top
    # mean 0.27 below the bottom 0.35 by 0.08, twice its standard error 0.04: off
    assert C.slope_status([0.25, 0.27, 0.29, 0.28, 0.26], 0.5) == "off"
    # 0.3 .. 1.0 over the edge: mean 0.6, standard error 0.15, the seeds do not place it out
    assert C.slope_status([0.3, 0.5, 1.0, 0.6], 0.5) == "agrees"
    assert C.slope_status([0.7], 0.5) == "off" and C.slope_status([0.6], 0.5) == "agrees"
    assert C.seeds_above([0.52, 0.504, 1e-16, 0.49], 0.5) == 1  # at the printed decimals
    assert C.seeds_above([1e-16, -1e-16, 0.01], 0.0) == 1
    assert C.slope_verdict(["agrees", "off"]) == "depends"
    assert C.slope_verdict(["off", "off"]) == "not reproduced"


def test_wide_sentence_two_seeds_fix_no_direction():
    """Two seeds that agree are still too few: no direction, verdict "depends"."""
    res = _wide(1.3, 0.8, 0.4, 0.25, seeds=2)
    res.get("nn.TransformerEncoderLayer", "post").seed_ratios = [1.2, 1.4]
    text = C.describe_wide(res)
    assert "its seeds" not in text and "(seeds 1.20, 1.40)" in text
    assert "2 seeds per stack cannot fix the direction" in text
    assert "**reproduces**" not in text
    assert "shrinks toward the output in every seed" in text  # Pre-LN: 0.4 and 0.25
    assert C.post_wide_verdict(res) == "depends"
    assert C.post_grows_wide(res).note == "2 seeds per stack: the direction is not fixed"


def _init_power_laws(stream_k: dict, grad_k: dict, token_k: dict | None = None):
    """A sweep whose stream norms and last-layer gradients (batch and, with ``token_k``, per
    token, the batch weight gradient equal to the total one) are exact power laws."""
    depths = [6, 12, 24, 48]
    norms = {p: {str(d): [1.0] * (d - 1) + [d ** grad_k[p]] for d in depths} for p in grad_k}
    stream = {
        p: {str(d): list(np.arange(1, d + 1) ** stream_k[p]) for d in depths} for p in stream_k
    }
    token = {p: {str(d): 4.0 * d ** token_k[p] for d in depths} for p in token_k or {}}
    batch = {p: {str(d): d ** grad_k[p] for d in depths} for p in token_k or {}}
    return E.InitGradNorms(depths, norms, 8, 1, stream=stream, token=token, batch=batch)


def test_scaling_sentence_and_claims_follow_the_fits():
    init = _init_power_laws({"pre": 0.5, "post": 0.0}, {"pre": -0.5, "post": 0.0})
    text = C.describe_scaling(init, E.EXPECTED_SLOPES)
    assert text.count("**not shown to be off** by more than 0.15") == 4
    assert "rises with depth" not in text
    assert "a fit agrees when its slope is within 0.15 of the predicted exponent" in text
    assert C.stream_growth(init, "cpu").verdict == "confirmed"
    assert C.last_layer_scaling(init, "cpu").verdict == "confirmed"
    # Pre-LN's gradient flat with depth, Post-LN's rising: both outside the fit's tolerance (a
    # rise that went on would break a bound independent of L)
    init = _init_power_laws({"pre": 0.3, "post": 0.0}, {"pre": 0.0, "post": 0.3})
    text = C.describe_scaling(init, E.EXPECTED_SLOPES)
    assert "slope +0.30, predicted +0.5: **off by more than 0.15**" in text
    assert "slope +0.00, predicted -0.5: **off by more than 0.15**" in text
    assert "rises with depth by more than the tolerance" in text
    assert "the warm-up argument only needs the gradient not to shrink" in text
    assert C.stream_growth(init, "cpu").verdict == "depends"
    assert C.last_layer_scaling(init, "cpu").verdict == "not reproduced"
    assert "Pre-LN 0.30 (predicted 0.5)" in C.stream_growth(init, "cpu").measured
    assert "upper bound" not in C.last_layer_scaling(init, "cpu").note


def test_per_token_slopes_decide_and_alignment_explains_the_batch():
    """Per token as the theorem predicts, batch Post-LN rising: the claim follows the per-token
    fit, and the sentence gives the alignment's slope, the batch's minus the per-token's."""
    init = _init_power_laws(
        {"pre": 0.5, "post": 0.0}, {"pre": -0.6, "post": 0.3}, {"pre": -0.5, "post": 0.0}
    )
    claim = C.last_layer_scaling(init, "cpu")
    assert claim.verdict == "confirmed"
    assert "per token: Pre-LN -0.50 (predicted -0.5), Post-LN 0.00" in claim.measured
    assert "batch gradient: Pre-LN -0.60, Post-LN 0.30" in claim.measured
    text = C.describe_scaling(init, E.EXPECTED_SLOPES)
    said = "$L^{0.00}$ in Post-LN (slope +0.00, predicted +0.0: **not shown to be off** by more"
    assert said in text
    # alignment = batch / per-token: 6^0.3 / 4 = 0.43 at L = 6, slope +0.30 = 0.30 - 0.00
    assert "0.43 at $L = 6$ and 0.80 at $L = 48$ in Post-LN (slope +0.30)" in text
    assert "(slope -0.10)" in text  # Pre-LN: -0.6 - (-0.5)
    # the per-token fit off: the claim says so even where the batch fit agrees
    init = _init_power_laws(
        {"pre": 0.5, "post": 0.0}, {"pre": -0.5, "post": 0.0}, {"pre": -0.5, "post": 0.4}
    )
    assert C.last_layer_scaling(init, "cpu").verdict == "depends"


def test_embedding_switch_sentence():
    res = _wide(1.0, 1.0, 0.58, 0.36)
    assert "**most of the way to the reference**" in C.describe_embedding_switch(res, 0.62)
    assert "less than half of the way" in C.describe_embedding_switch(res, 0.44)
    assert "does **not** move" in C.describe_embedding_switch(res, 0.30)


def _grid(post, pre, lrs=(3e-3, 1e-2, 3e-2), warmups=(0, 9, 27), learning=True):
    """A 3 x 3 sweep from tables of per-seed final losses (rows: learning rates; each cell a
    tuple, one loss per seed, NaN for a diverged run); every run's loss curve falls to its
    final loss (``learning``) or ends flat."""
    chance = math.log(14)
    runs = []
    seeds = len(post[0][0])
    for placement, table in (("post", post), ("pre", pre)):
        for i, lr in enumerate(lrs):
            for j, w in enumerate(warmups):
                for seed, loss in enumerate(table[i][j]):
                    gone = not np.isfinite(loss)
                    curve = list(np.linspace(chance, loss, 20)) if learning else [loss] * 20
                    ok = (not gone) and loss < 0.5 * chance
                    runs.append(E.TrainRun(placement, w, curve, loss, 1.0, gone, ok, [], lr, seed))
    return E.WarmupSweep(
        runs, list(lrs), list(warmups), 1e-2, 9, 4, 32, 45, "reverse", chance, seeds
    )


#: Three seeds per cell (half of chance: 1.32). At 1e-2 Post-LN fails without warm-up on every
#: seed and 27 warm-up steps lower its loss on every seed; Pre-LN trains without warm-up.
POST = [
    [(1.1, 1.2, 1.0), (1.3, 1.4, 1.2), (1.6, 1.7, 1.5)],
    [(2.6, 2.5, 2.4), (0.6, 2.2, 1.7), (0.5, 1.0, 1.6)],
    [(2.6, 2.7, 2.6), (2.6, 2.6, 2.5), (2.5, 2.4, 2.5)],
]
PRE = [
    [(0.4, 0.5, 0.6), (0.8, 0.9, 1.0), (1.4, 1.5, 1.6)],
    [(0.1, 0.2, 0.1), (0.1, 0.1, 0.1), (0.2, 0.1, 0.1)],
    [(0.8, 2.3, 0.6), (0.1, 0.1, 0.1), (0.0, 0.1, 0.0)],
]


def test_sweep_sentence_and_claims_judge_the_seeds():
    sweep = _grid(POST, PRE)
    assert sweep.trained_counts("post").tolist() == [[3, 2, 0], [0, 1, 2], [0, 0, 0]]
    text = C.describe_sweep(sweep)
    assert (
        "Post-LN without warm-up trained on 0 of 3 (final losses 2.40 to 2.60; chance 2.64), "
        "with 9 warm-up steps on 1 of 3, with 27 warm-up steps on 2 of 3; Pre-LN without "
        "warm-up trained on 3 of 3." in text
    )
    # 27 warm-up steps lower Post-LN's loss on every seed, but 0.5, 1.0, 1.6 against half of
    # chance 1.32: mean 1.03, twice its standard error 0.64, one seed above: not trained
    assert "but with 27 warm-up steps Post-LN does not end below half of chance" in text
    assert "that warm-up makes Post-LN train within 45 steps is not shown" in text
    assert "learns only with warm-up" not in text
    # at 3e-3 Post-LN without warm-up ends at 1.1, 1.2, 1.0: below 1.32 on every seed
    assert (
        "Without warm-up Post-LN ends below half of chance by the rule at learning rate 0.003"
        in text
    )
    # 27 warm-up steps: 0.5, 1.0, 1.6 against Pre-LN's 0.1, 0.2, 0.1 without: above on all
    assert "Even with 27 warm-up steps Post-LN ends above Pre-LN without any, by the rule" in text
    assert "still falling in 9 of the 9 Post-LN runs at this rate" in text
    # 19 failing Post-LN runs of the grid (4 at 3e-3, 6 at 1e-2, 9 at 3e-2), 13 of them above
    # 0.8 x 2.64 = 2.11 (4 at 1e-2, 9 at 3e-2)
    assert "Of the 19 Post-LN runs of the grid that did not train, 13 ended near chance" in text
    claim = C.warmup(sweep, "cpu")
    assert claim.verdict == "depends" and claim.quote_where == "Abstract"
    assert "Post-LN training with warm-up is not shown" in claim.note
    assert "on 0 of 3 seeds, with 27 warm-up steps on 2 of 3" in claim.measured
    assert claim.per_seed["Post-LN final loss, warm-up 27"] == [0.5, 1.0, 1.6]
    shallow = C.shallow_fine(sweep, "cpu")
    assert shallow.verdict == "cited" and shallow.measured.startswith("not measured")
    assert "at lr 0.003 of the grid; at lr 0.003 it trained on 3 of 3 seeds" in shallow.measured
    # Post-LN with 27 warm-up steps at 0.5, 1.0, 0.9: below 1.32 on every seed, Xiong et al.'s
    # pattern, with 3e-3 as the rate where it trains without warm-up: confirmed
    post = [POST[0], [POST[1][0], POST[1][1], (0.5, 1.0, 0.9)], POST[2]]
    sweep = _grid(post, PRE)
    text = C.describe_sweep(sweep)
    assert (
        "**at this learning rate Post-LN learns only with warm-up, and Pre-LN needs none**" in text
    )
    assert C.warmup(sweep, "cpu").verdict == "confirmed"
    # ... but with Post-LN failing at 3e-3 too (1.3, 1.4, 1.5: above 1.32 on average, not every
    # seed below), no rate of the grid sets off the high one: not confirmed
    post = [[(1.3, 1.4, 1.5), *POST[0][1:]], post[1], POST[2]]
    sweep = _grid(post, PRE)
    assert "at **none** of the grid's learning rates (0.003, 0.01, 0.03)" in C.describe_sweep(sweep)
    claim = C.warmup(sweep, "cpu")
    assert claim.verdict == "depends"
    assert "no learning rate of the grid has Post-LN training without warm-up" in claim.note
    assert "at no lr of the grid" in C.shallow_fine(sweep, "cpu").measured
    table = C.trained_table(_grid(POST, PRE))
    assert "| 0.01 | Post-LN | 0/3 | 1/3 | 2/3 |" in table


def test_sweep_sentence_says_what_the_seeds_do_not_show():
    pre = [row[:] for row in PRE]
    # Pre-LN without warm-up: 1.22, 0.68 and 1.12 from half of chance on each side, mean -0.55,
    # twice its standard error 1.24: not below half of chance by the rule
    pre[1] = [(0.1, 2.0, 0.2), *PRE[1][1:]]
    post = [row[:] for row in POST]
    post[1] = [(2.6, float("nan"), 2.4), *POST[1][1:]]  # a diverged run counts at chance
    sweep = _grid(post, pre)
    text = C.describe_sweep(sweep)
    assert "these seeds do **not** show Post-LN needing warm-up" in text
    assert "missing is Post-LN training with 27 warm-up steps and Pre-LN training without" in text
    assert "Some Post-LN runs diverged (NaN)." in text
    # 0.5, 1.0, 1.6 against 0.1, 2.0, 0.2: 2 of 3 above, mean 0.27, standard error 0.6
    assert "ends level with Pre-LN without any: no difference the rule can detect" in text
    assert C.warmup(sweep, "cpu").verdict == "depends"
    assert C.cell_losses(sweep, "post", 1e-2, 0) == [2.6, sweep.chance_loss, 2.4]


def test_grid_sentence_reads_the_corners():
    text = C.describe_grid(_grid(POST, PRE))
    assert "below half of chance, 1.32" in text and "$V = 16$" in text
    assert "27 warm-up steps make **both placements end higher** than none" in text
    assert "still falling at the end in 18 of the 18 runs there" in text
    assert "Post-LN fails even with 27 warm-up steps (trained on 0 of 3 seeds)" in text
    assert "Pre-LN without warm-up trained there on 2 of 3 seeds; 27 warm-up steps lower" in text
    # flat curves: none still learning
    assert "in 0 of the 18 runs there" in C.describe_grid(_grid(POST, PRE, learning=False))
    # Post-LN trains at the top rate with warm-up; warm-up does not raise the lowest rate's
    post = [
        [(1.1, 1.2, 1.0), (1.1, 1.0, 1.2), (1.0, 1.3, 1.0)],
        POST[1],
        [(2.6,) * 3, (0.5,) * 3, (0.4, 0.5, 0.3)],
    ]
    pre = [[(0.4, 0.5, 0.6), (0.5, 0.4, 0.6), (0.6, 0.3, 0.5)], PRE[1], [(0.1, 0.2, 0.1)] * 3]
    text = C.describe_grid(_grid(post, pre))
    assert "the seeds do not show 27 warm-up steps raising both" in text
    assert "Post-LN with 27 warm-up steps trained on 3 of 3 seeds" in text
    assert "warm-up made no difference the rule can detect" in text


def test_scaling_sentence_fits_every_seed_on_its_own():
    """Three seeds whose exponents differ: each fitted on its own, the mean printed, the seeds
    judged against the band by the rule."""
    depths = [6, 12, 24, 48]
    stream_k = {"pre": (0.52, 0.54, 0.56), "post": (0.0, 0.0, 0.0)}
    batch_k = {"pre": (-0.5, -0.45, -0.55), "post": (0.3, 0.35, 0.4)}

    def per_seed(ks, make):
        return {p: {str(d): [make(d, k) for k in ks[p]] for d in depths} for p in ks}

    seed_stream = per_seed(stream_k, lambda d, k: list(np.arange(1.0, d + 1) ** k))
    seed_norms = per_seed(batch_k, lambda d, k: [1.0] * (d - 1) + [d**k])
    mean = {
        p: {str(d): list(np.mean(v, axis=0)) for d, v in q.items()} for p, q in seed_norms.items()
    }
    init = E.InitGradNorms(depths, mean, 8, 3, seed_norms=seed_norms, seed_stream=seed_stream)
    assert init.seed_slopes("stream", "pre") == pytest.approx([0.52, 0.54, 0.56])
    text = C.describe_scaling(init, E.EXPECTED_SLOPES)
    # Pre-LN stream: 0.52 .. 0.56, above 0.5 on every seed but inside 0.35 .. 0.65
    assert (
        "slope +0.54 (seeds +0.52 to +0.56, 3 of 3 above the prediction), "
        "predicted +0.5: **not shown to be off**" in text
    )
    # Post-LN batch: 0.30 .. 0.40, every seed above 0 + 0.15
    assert (
        "slope +0.35 (seeds +0.30 to +0.40, 3 of 3 above the prediction), "
        "predicted +0.0: **off by more than 0.15**" in text
    )
    assert "rises with depth by more than the tolerance" in text
    assert "Each slope is fitted on every one of 3 initializations" in text
    claim = C.stream_growth(init, "cpu")
    assert claim.verdict == "confirmed" and "above it on 3 of 3 seeds" in claim.measured
    assert claim.per_seed["stream slope, pre-LN"] == pytest.approx([0.52, 0.54, 0.56])
    assert C.last_layer_scaling(init, "cpu").verdict == "depends"  # Pre-LN in, Post-LN off
