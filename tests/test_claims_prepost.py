"""The sentences of the Pre/Post-Norm chapter: each branch on hand-built results."""

from __future__ import annotations

import dataclasses
import math

import pytest

from normedu.claims import prepost as C
from normedu.experiments import prepost as E


def _run(placement, warmup, trained, diverged=False, loss=0.1, grads=(2.0, 1.0)):
    return E.TrainRun(placement, warmup, [loss], loss, 1.0, diverged, trained, list(grads))


def _stab(post_nw_trained: bool, grads=(2.0, 1.0)) -> E.StabilityResult:
    runs = [
        _run("post", 0, post_nw_trained, loss=0.2 if post_nw_trained else 2.7, grads=grads),
        _run("post", 30, True),
        _run("pre", 0, True, grads=grads),
        _run("pre", 30, True),
    ]
    return E.StabilityResult(runs, 8, 32, 120, 5e-3, "reverse", math.log(16))


def test_stability_sentence_expected_pattern():
    text = C.describe_stability(_stab(post_nw_trained=False))
    assert C.expected_stability(_stab(False))
    assert "Post-LN stack without warm-up stalls** at a loss of 2.70" in text
    assert "Pre-LN trains either way" in text
    assert "varies by 2.00×" in text and "more than a factor of 2" in text


def test_stability_sentence_other_outcome_is_a_sentence_not_characters():
    """The bug this replaces: the fallback appended single characters to a stale list."""
    stab = _stab(post_nw_trained=True, grads=(1.5, 1.0))
    assert not C.expected_stability(stab)
    text = C.describe_stability(stab)
    assert isinstance(text, str) and text.startswith("This run did **not** show")
    assert "Post-LN trained without warm-up (final loss 0.20)" in text
    assert "within a factor of 2" in text
    # no trained Pre-LN gradients: only the first paragraph
    stab.runs[2].grad_norms_end = []
    assert "\n\n" not in C.describe_stability(stab)


def test_trend_thresholds():
    assert [C.trend(r) for r in (1.3, 1.0, 0.4)] == ["grows", "is flat", "shrinks"]


def _wide(post_ref, post_tiny, switches, pre_ref, pre_tiny, seeds=C.DIRECTION_SEEDS):
    """A hand-built check whose every stack has ``seeds`` seeds, all at the stack's ratio."""

    def prof(model, placement, changes, ratio):
        return E.WideProfile(
            model, placement, changes, [1.0, (1 + ratio) / 2, ratio], [ratio] * seeds
        )

    rows = [
        prof("nn.TransformerEncoderLayer", "post", "", post_ref),
        prof("nn.TransformerEncoderLayer", "pre", "", pre_ref),
        prof("TinyGPT", "post", "", post_tiny),
        *[prof("TinyGPT", "post", name, r) for name, r in switches.items()],
        prof("TinyGPT", "post", "all switches", post_ref),
        prof("TinyGPT", "pre", "", pre_tiny),
        prof("TinyGPT", "pre", "no final norm", pre_tiny),
        prof("TinyGPT", "pre", "all switches", pre_ref),
    ]
    return E.WideCheck(rows, dataclasses.replace(E.WIDE, seeds=seeds))


@pytest.mark.parametrize(
    ("post_tiny", "switches", "want"),
    [
        (1.2, {"no causal mask": 1.25, "ReLU instead of GELU": 1.3}, "no switch alone changes"),
        (0.8, {"no causal mask": 1.25, "ReLU instead of GELU": 0.85}, "**no causal mask** alone"),
    ],
)
def test_wide_sentence_names_the_switch_that_flips(post_tiny, switches, want):
    text = C.describe_wide(_wide(1.3, post_tiny, switches, 0.4, 0.25))
    assert want in text
    assert ("**reproduces**" in text) == (post_tiny > C.GROWS)
    assert "our measurement contradicts them" in text  # Pre-LN shrinks in both
    assert "only Pre-LN has, no final norm" in text and "the same direction" in text


def test_wide_sentence_pre_flat_agrees():
    text = C.describe_wide(_wide(1.3, 1.3, {}, 1.0, 0.95))
    assert "as Xiong et al. predict" in text and "contradicts" not in text


def test_init_sentence_both_branches():
    grow = {str(d): [1.0] * (d - 1) + [2.0] for d in (2, 4)}
    shrink = {str(d): [2.0] + [1.0] * (d - 1) for d in (2, 4)}
    init = E.InitGradNorms([2, 4], {"post": grow, "pre": shrink}, d_model=8, seeds=1)
    text = C.describe_init(init)
    assert "grows toward the output at every depth" in text and "**disagrees**" in text
    init = E.InitGradNorms([2, 4], {"post": shrink, "pre": grow}, d_model=8, seeds=1)
    text = C.describe_init(init)
    assert "does **not** reproduce" in text
    assert "the profile grows toward the output at every depth" in text


def test_wide_sentence_seed_disagreement_is_not_a_flip():
    res = _wide(1.3, 1.2, {"no causal mask": 0.85}, 0.4, 0.25)
    res.get("TinyGPT", "post", "no causal mask").seed_ratios = [0.7, 1.2] * 2
    text = C.describe_wide(res)
    assert "no switch alone changes" in text


def test_wide_sentence_when_the_seeds_of_the_model_disagree():
    res = _wide(1.3, 1.2, {"no causal mask": 0.8}, 0.4, 0.25)
    res.get("TinyGPT", "post").seed_ratios = [1.35, 1.05] * 2
    text = C.describe_wide(res)
    assert "no switch can be said to flip" in text and "**only weakly**" in text
    assert C.post_wide_verdict(res) == "depends"


def test_wide_sentence_two_seeds_fix_no_direction():
    """Two seeds that agree are still too few: no direction, no flip, verdict "depends"."""
    res = _wide(1.3, 0.8, {"no causal mask": 1.25}, 0.4, 0.25, seeds=2)
    res.get("nn.TransformerEncoderLayer", "post").seed_ratios = [1.2, 1.4]
    text = C.describe_wide(res)
    assert "its seeds 1.20, 1.40" in text and "differ by up to 0.20" in text
    assert "2 seeds per stack cannot fix the direction" in text
    assert "**reproduces**" not in text and "alone changes" not in text
    assert "no switch can be said to flip" in text
    assert "shrinks toward the output, in every seed" in text  # Pre-LN: 0.4 and 0.25
    assert C.post_wide_verdict(res) == "depends"
    assert C.post_grows_wide(res).note == "2 seeds per stack: the direction is not fixed"
