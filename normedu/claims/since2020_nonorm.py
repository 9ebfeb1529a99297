"""Claims of the chapter "Training without normalization" (book/since2020_nonorm.md), on its
cached runs.

Also the sentences the chapter shows under its measurements (:func:`describe_curve`,
:func:`describe_comparison`): built here from the results, so that every branch is unit-tested.
"""

from __future__ import annotations

import numpy as np

from ..claim import Claim, cite, claims_for, measured_on, verdict

CHAPTER = "since2020_nonorm"
THIS_CHAPTER = "this course, chapter 'Training without normalization'"
DYT = "zhu2025transformers"

#: The tanh fit "bends" the cloud when it explains this much more of its variance than a line.
BEND = 0.02
#: DyT "matches" LayerNorm when both train and their final losses differ by less than this
#: (nats per answer token).
MATCH = 0.1
#: A speed ratio beyond 1 ± SPEED counts as faster or slower; within it, as the same.
SPEED = 0.05


def bends(fit) -> bool:
    """True when the tanh fit explains :data:`BEND` more of the variance than a line."""
    return fit.r2_tanh - fit.r2_line > BEND


def _outcome(run) -> str:
    return "diverged" if run.diverged else ("trained" if run.trained else "did not train")


def speed_word(ratio: float) -> str:
    """``"faster than"``, ``"slower than"`` or ``"as fast as"``, for a speed ratio."""
    if ratio > 1 + SPEED:
        return "faster than"
    return "slower than" if ratio < 1 - SPEED else "as fast as"


def dyt_matches(res) -> bool:
    ln, dyt = res.run("layernorm"), res.run("dyt")
    return ln.trained and dyt.trained and abs(dyt.final_loss - ln.final_loss) < MATCH


# --------------------------------------------------------------------------- page sentences


def describe_curve(res, demos) -> str:
    """What the trained LayerNorm's cloud and the synthetic demo show, in words."""
    curve = res.curve
    fit = curve.fit()
    i = curve.names.index(curve.shown)
    n_bent = sum(bends(curve.fit(n)) for n in curve.names)
    lo, hi = min(demos, key=lambda d: d.log_spread), max(demos, key=lambda d: d.log_spread)
    first = (
        f"In the trained model, the final LayerNorm's cloud is fitted by "
        f"{fit.c:.2f}·tanh({fit.alpha:.3g}x) with R² {fit.r2_tanh:.3f}, and by a straight line "
        f"with R² {fit.r2_line:.3f}. "
    )
    if bends(fit):
        first += "The tanh **fits clearly better**: the cloud bends, as Zhu et al. report. "
    else:
        first += (
            f"The two fits are as good as each other: at this size **the cloud is a straight "
            f"line, not an S**. Its fitted α, {fit.alpha:.3g}, keeps αx inside tanh's linear "
            "part. The reason is in the tokens: their σ differs by a factor of only "
            f"{curve.sigma_spread[i]:.2f} from the smallest to the largest in this batch. "
        )
    first += (
        f"Over all {len(curve.names)} LayerNorms of the model, the tanh fit is clearly better "
        f"(by more than {BEND} in R²) in {n_bent}."
    )
    second = (
        f"With synthetic tokens the bend appears as the tokens' scales spread: at spread "
        f"{lo.log_spread:g} the R² of tanh and line are {lo.fit.r2_tanh:.3f} and "
        f"{lo.fit.r2_line:.3f}, at spread {hi.log_spread:g} {hi.fit.r2_tanh:.3f} and "
        f"{hi.fit.r2_line:.3f}."
    )
    return first + "\n\n" + second


def none_fails(res) -> bool:
    return not res.run("none").trained


def describe_comparison(res) -> str:
    """The verdict of the five-way comparison, in words."""
    size = res.size
    ln, dyt, rz, none = (res.run(n) for n in ("layernorm", "dyt", "rezero", "none"))
    rms = res.run("rmsnorm")
    parts = [
        f"At {size['depth']} blocks, learning rate {size['lr']:g} and no warm-up, "
        + (
            f"**the stack without normalization {_outcome(none)}** "
            f"(final loss {none.final_loss:.2f}, chance {res.chance_loss:.2f}), "
            if none_fails(res)
            else f"**even the stack without any normalization trained** (final loss "
            f"{none.final_loss:.2f}, chance {res.chance_loss:.2f}): at this CPU size 'none' "
            "does not fail, "
        )
        + f"while LayerNorm ({ln.final_loss:.3f}) and RMSNorm ({rms.final_loss:.3f}) "
        + ("trained." if ln.trained and rms.trained else "did not both train.")
    ]
    parts.append(
        f"ReZero, with no norm at all, {_outcome(rz)} ({rz.final_loss:.3f}): "
        + (
            "starting every block as the identity was enough here to replace the norm."
            if rz.trained
            else "starting as the identity was not enough here."
        )
    )
    if dyt_matches(res):
        parts.append(
            f"DyT trained to {dyt.final_loss:.3f}, within {MATCH} of LayerNorm: it **matches** "
            "it here."
        )
    else:
        parts.append(
            f"DyT {_outcome(dyt)} in these {size['steps']} steps (final loss "
            f"{dyt.final_loss:.2f} against LayerNorm's {ln.final_loss:.3f}): at this size and "
            "learning rate, with the default α₀ = 0.5, it **does not match** LayerNorm."
        )
    return " ".join(parts)


# --------------------------------------------------------------------------- claims


@claims_for(CHAPTER)
def check(preset: str | None = None) -> list[Claim]:
    from ..device import preset_name
    from ..experiments import since2020_nonorm as E

    preset = preset or preset_name()
    res = E.compare(preset)
    demos = [E.token_scale_demo(s) for s in DEMO_SPREADS]
    return [
        rezero_identity(E.rezero_identity()),
        s_curve(res),
        s_curve_mechanism(demos),
        none_fails_claim(res),
        rezero_trains(res),
        dyt_matches_claim(res),
        dyt_speed(res),
        fixup_depth(),
    ]


#: The log-scale spreads of the synthetic demo (the chapter's and the claims').
DEMO_SPREADS = (0.0, 0.5, 1.0, 1.5)


def rezero_identity(rz) -> Claim:
    """``rz``: :func:`~normedu.experiments.since2020_nonorm.rezero_identity`'s result."""
    return Claim(
        id="nonorm.rezero_identity",
        chapter=CHAPTER,
        claim="A residual stack whose branches are each multiplied by a scalar initialized at "
        "zero computes the identity at initialization, so every block receives the same "
        "gradient",
        source=cite("bachlechner2021rezero") + "; " + cite("de2020batch"),
        measured=f"TinyGPT, {rz.depth} ReZero blocks: max |stream out − stream in| = "
        f"{rz.max_stream_change:g}; max difference between two blocks' output gradients = "
        f"{rz.max_grad_change:g}",
        verdict=verdict(rz.max_stream_change == 0 and rz.max_grad_change == 0),
        device="float32 arithmetic",
    )


def s_curve(res) -> Claim:
    curve = res.curve
    fit = curve.fit()
    i = curve.names.index(curve.shown)
    return Claim(
        id="nonorm.s_curve",
        chapter=CHAPTER,
        claim="In trained Transformers, LayerNorm's input-output map, element by element, is "
        "an S-shaped curve close to a scaled tanh",
        source=cite(DYT),
        measured=f"final LayerNorm of a {res.size['depth']}-block TinyGPT after "
        f"{res.size['steps']} steps: R² {fit.r2_tanh:.3f} for {fit.c:.2f}·tanh({fit.alpha:.3g}x), "
        f"{fit.r2_line:.3f} for a line; per-token σ spread ×{curve.sigma_spread[i]:.2f}",
        verdict=verdict(bends(fit)),
        device=measured_on(),
        note=""
        if bends(fit)
        else "a small model trained briefly: its tokens' σ differ little, and the cloud is "
        "straight; the synthetic demo shows the bend once they differ",
    )


def s_curve_mechanism(demos) -> Claim:
    gaps = [d.fit.r2_tanh - d.fit.r2_line for d in demos]
    grows = bool(np.all(np.diff(gaps) > 0))
    return Claim(
        id="nonorm.s_mechanism",
        chapter=CHAPTER,
        claim="The S-shape comes from normalizing per token: each token is mapped linearly "
        "(slope 1/σ), and the extreme inputs belong to the tokens of large σ, whose slopes "
        "are smallest",
        source=cite(DYT),
        measured="synthetic tokens, R² of tanh minus R² of a line at log-scale spreads "
        + ", ".join(f"{d.log_spread:g}: {g:.3f}" for d, g in zip(demos, gaps, strict=True)),
        verdict=verdict(grows and gaps[0] < BEND),
        device="float64 arithmetic",
    )


def none_fails_claim(res) -> Claim:
    none, ln = res.run("none"), res.run("layernorm")
    return Claim(
        id="nonorm.none_fails",
        chapter=CHAPTER,
        claim="Without normalization (and without an initialization made for it) a deep "
        "Transformer does not train at a learning rate its normalized twin handles",
        source=THIS_CHAPTER,
        measured=f"{res.size['depth']} blocks, Adam lr {res.size['lr']:g}, "
        f"{res.size['steps']} steps: no norm {_outcome(none)} ({none.final_loss:.2f}; chance "
        f"{res.chance_loss:.2f}), LayerNorm {_outcome(ln)} ({ln.final_loss:.3f})",
        verdict=verdict(none_fails(res) and ln.trained),
        device=measured_on(),
    )


def rezero_trains(res) -> Claim:
    rz = res.run("rezero")
    return Claim(
        id="nonorm.rezero_trains",
        chapter=CHAPTER,
        claim="ReZero trains a deep Transformer without any normalization layer",
        source=cite("bachlechner2021rezero"),
        measured=f"{res.size['depth']} blocks: ReZero {_outcome(rz)} (final loss "
        f"{rz.final_loss:.3f}); no norm without ReZero: {_outcome(res.run('none'))}",
        verdict=verdict(rz.trained),
        device=measured_on(),
    )


def dyt_matches_claim(res) -> Claim:
    ln, dyt = res.run("layernorm"), res.run("dyt")
    return Claim(
        id="nonorm.dyt_matches",
        chapter=CHAPTER,
        claim="Replacing every LayerNorm of a Transformer with DyT gives the same quality, "
        "with the default α₀ = 0.5 outside large language models",
        source=cite(DYT),
        measured=f"{res.size['depth']} blocks, {res.size['steps']} steps: final loss DyT "
        f"{dyt.final_loss:.3f}, LayerNorm {ln.final_loss:.3f}",
        verdict=verdict(dyt_matches(res), otherwise="depends"),
        device=measured_on(),
        note=""
        if dyt_matches(res)
        else "DyT learns more slowly in this short run; the paper trains to convergence, "
        "with learning rates and α₀ tuned per model",
    )


def dyt_speed(res) -> Claim:
    ratio = res.speed_vs_layernorm("dyt")
    word = speed_word(ratio)
    return Claim(
        id="nonorm.dyt_speed",
        chapter=CHAPTER,
        claim="A model with DyT in place of its norm layers runs faster",
        source=cite(DYT),
        measured=f"whole training step of TinyGPT, variants interleaved: DyT {ratio:.2f}× "
        "LayerNorm's tokens per second",
        verdict="confirmed" if word == "faster than" else "depends",
        device=measured_on(),
        note="the course's LayerNorm is written out of elementary tensor ops; the paper times "
        "a large model on a GPU",
    )


def fixup_depth() -> Claim:
    return Claim(
        id="nonorm.fixup_depth",
        chapter=CHAPTER,
        claim="With Fixup, residual networks train without normalization as stably as with "
        "it, even at 10,000 layers",
        source=cite("zhang2019fixup"),
        measured="not measured here (explained with its derivation)",
        verdict="cited",
        device="—",
    )
