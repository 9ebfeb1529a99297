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


def _outcome(run, long: bool = False) -> str:
    """A run's verdict at ``steps`` (``long``: at ``long_steps``; "—" if it did not go on)."""
    if run.diverged or (long and run.final_loss_long is not None and np.isnan(run.final_loss_long)):
        return "diverged"
    trained = run.trained_long if long else run.trained
    if trained is None:
        return "—"
    return "trained" if trained else "did not train"


def trained_rule(res) -> str:
    """The page's definition of "trained", with the threshold computed."""
    v = res.size["vocab"]
    return (
        "A run counts as **trained** when its final loss, the mean over the last tenth of its "
        f"steps, is below half of chance. Chance is ln(V−2) = {res.chance_loss:.2f} for "
        f"V = {v}: a model that has learned only which tokens can answer (the V−2 content "
        "tokens, never the separator or the padding) and guesses uniformly among them scores "
        f"that; half of it is {0.5 * res.chance_loss:.2f}."
    )


def speed_word(ratio: float) -> str:
    """``"faster than"``, ``"slower than"`` or ``"as fast as"``, for a speed ratio."""
    if ratio > 1 + SPEED:
        return "faster than"
    return "slower than" if ratio < 1 - SPEED else "as fast as"


def dyt_matches(res) -> bool:
    ln, dyt = res.run("layernorm"), res.run("dyt")
    return ln.trained and dyt.trained and abs(dyt.final_loss - ln.final_loss) < MATCH


def dyt_catches_up(res) -> bool:
    """DyT, given ``long_steps``, ends within :data:`MATCH` of LayerNorm's loss at ``steps``."""
    ln, dyt = res.run("layernorm"), res.run("dyt")
    return bool(
        ln.trained
        and dyt.trained_long
        and dyt.final_loss_long is not None
        and dyt.final_loss_long < ln.final_loss + MATCH
    )


def dyt_verdict(res) -> str:
    """The one word for DyT against LayerNorm, used in the prose and the ledger."""
    if dyt_matches(res):
        return "matches"
    return "learns more slowly than" if dyt_catches_up(res) else "does not match"


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
        f"(by more than {BEND} in R²) in {n_bent} of them."
    )
    second = (
        f"With synthetic tokens the bend appears as the tokens' scales spread: at spread "
        f"{lo.log_spread:g} the R² of tanh and line are {lo.fit.r2_tanh:.3f} and "
        f"{lo.fit.r2_line:.3f}, at spread {hi.log_spread:g} {hi.fit.r2_tanh:.3f} and "
        f"{hi.fit.r2_line:.3f}."
    )
    return first + "\n\n" + second


def none_verdict(res) -> str:
    """``"trains"`` (within ``steps``), ``"slower"`` (only given ``long_steps``) or ``"fails"``,
    for the stack without any normalization."""
    none = res.run("none")
    if none.trained:
        return "trains"
    return "slower" if none.trained_long else "fails"


def _falling(losses) -> bool:
    """The last tenth of the steps is lower, on average, than the tenth before it."""
    n = max(1, len(losses) // 10)
    return len(losses) >= 2 * n and np.mean(losses[-n:]) < np.mean(losses[-2 * n : -n])


def describe_comparison(res) -> str:
    """The verdict of the five-way comparison, in words."""
    size = res.size
    steps, long = size["steps"], size.get("long_steps", 0)
    ln, dyt, rz, none = (res.run(n) for n in ("layernorm", "dyt", "rezero", "none"))
    rms = res.run("rmsnorm")
    normed = f"LayerNorm's {ln.final_loss:.3f} and RMSNorm's {rms.final_loss:.3f}" + (
        "" if ln.trained and rms.trained else " (they did not both train)"
    )
    head = f"At {size['depth']} blocks, learning rate {size['lr']:g} and no warm-up, "
    nv = none_verdict(res)
    if nv == "trains":
        first = (
            head + f"**even the stack without any normalization trained** in {steps} steps "
            f"(final loss {none.final_loss:.2f}, chance {res.chance_loss:.2f}), against "
            f"{normed}: at this CPU size 'none' does not fail."
        )
    else:
        whole = none.losses + none.long_losses
        first = (
            head + "**the stack without normalization learns far more slowly**: after "
            f"{steps} steps its loss is still {none.final_loss:.2f} (chance "
            f"{res.chance_loss:.2f}), against {normed}. "
        )
        if nv == "slower":
            tail = whole[-max(1, len(whole) // 10) :]
            first += (
                f"Given {long} steps on the same stream of batches it does train, to "
                f"{none.final_loss_long:.2f} (its loss over the last {len(tail)} steps "
                f"ranges from {min(tail):.2f} to {max(tail):.2f}): leaving the norm out slowed "
                "training badly at this depth; it did not stop it."
            )
        elif none.long_losses:
            first += f"Even given {long} steps it {_outcome(none, long=True)}."
    parts = [first]
    parts.append(
        f"ReZero, with no norm at all, {_outcome(rz)} ({rz.final_loss:.3f}): "
        + (
            "starting every block as the identity was enough here for the stack to train "
            "without a norm"
            + (
                f", though its loss after {steps} steps is "
                f"{rz.final_loss / ln.final_loss:.0f} times LayerNorm's ({ln.final_loss:.3f})."
                if rz.final_loss > ln.final_loss
                else f", as low as LayerNorm's ({ln.final_loss:.3f})."
            )
            if rz.trained
            else "starting as the identity was not enough here."
        )
    )
    verdict_word = dyt_verdict(res)
    if verdict_word == "matches":
        parts.append(
            f"DyT trained to {dyt.final_loss:.3f}, within {MATCH} of LayerNorm: it **matches** "
            "it here."
        )
    else:
        text = (
            f"DyT {_outcome(dyt)} in these {steps} steps (final loss {dyt.final_loss:.2f} "
            f"against LayerNorm's {ln.final_loss:.3f})"
            + (", and its loss was still falling" if _falling(dyt.losses) else "")
            + ". "
        )
        if dyt.final_loss_long is not None:
            text += f"Given {long} steps it reaches {dyt.final_loss_long:.3f}" + (
                f", within {MATCH} of LayerNorm's loss after {steps}. "
                if dyt_catches_up(res)
                else ". "
            )
        text += (
            "At this size and learning rate, with the default α₀ = 0.5, DyT "
            f"**{verdict_word}** LayerNorm"
            + (
                f": it needed at most {long / steps:.0f}× the steps."
                if dyt_catches_up(res)
                else "."
            )
        )
        parts.append(text)
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
        none_slow_claim(res),
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


def none_slow_claim(res) -> Claim:
    none, ln = res.run("none"), res.run("layernorm")
    size = res.size
    measured = (
        f"{size['depth']} blocks, Adam lr {size['lr']:g}, no warm-up; after {size['steps']} "
        f"steps: no norm {_outcome(none)} ({none.final_loss:.2f}; chance "
        f"{res.chance_loss:.2f}), LayerNorm {_outcome(ln)} ({ln.final_loss:.3f})"
    )
    if none.final_loss_long is not None:
        measured += (
            f"; after {size['long_steps']} steps: no norm {_outcome(none, long=True)} "
            f"({none.final_loss_long:.2f})"
        )
    nv = none_verdict(res)
    return Claim(
        id="nonorm.none_slow",
        chapter=CHAPTER,
        claim=f"Without normalization (and without an initialization made for it) a "
        f"{size['depth']}-block Transformer trains much more slowly than its normalized twin "
        "at the same learning rate",
        source=THIS_CHAPTER,
        measured=measured,
        verdict=verdict(nv != "trains" and ln.trained),
        device=measured_on(),
        note={
            "slower": "slower, not failed: given more steps it trains, with loss spikes; "
            "measured at this depth only, and the page's try-it runs shallower stacks",
            "fails": "it did not train even given the longer budget",
            "trains": "at this size leaving the norm out does not slow training enough to show",
        }[nv],
    )


def rezero_trains(res) -> Claim:
    rz = res.run("rezero")
    return Claim(
        id="nonorm.rezero_trains",
        chapter=CHAPTER,
        claim="ReZero trains a deep Transformer without any normalization layer",
        source=cite("bachlechner2021rezero"),
        measured=f"{res.size['depth']} blocks: ReZero {_outcome(rz)} (final loss "
        f"{rz.final_loss:.3f}) in {res.size['steps']} steps; no norm without ReZero: "
        f"{_outcome(res.run('none'))} in as many",
        verdict=verdict(rz.trained),
        device=measured_on(),
    )


def dyt_matches_claim(res) -> Claim:
    ln, dyt = res.run("layernorm"), res.run("dyt")
    size = res.size
    measured = (
        f"{size['depth']} blocks, after {size['steps']} steps: final loss DyT "
        f"{dyt.final_loss:.3f}, LayerNorm {ln.final_loss:.3f}"
    )
    if dyt.final_loss_long is not None:
        measured += f"; DyT after {size['long_steps']} steps: {dyt.final_loss_long:.3f}"
    word = dyt_verdict(res)
    return Claim(
        id="nonorm.dyt_matches",
        chapter=CHAPTER,
        claim="Replacing every LayerNorm of a Transformer with DyT gives the same quality, "
        "with the default α₀ = 0.5 outside large language models",
        source=cite(DYT),
        measured=measured,
        verdict=verdict(word == "matches", otherwise="depends"),
        device=measured_on(),
        note=""
        if word == "matches"
        else f"DyT {word} LayerNorm here"
        + (
            f": it needed at most {size['long_steps'] / size['steps']:.0f}× the steps to reach "
            "LayerNorm's loss; its small inputs at initialization keep tanh in its linear part"
            if word == "learns more slowly than"
            else ""
        )
        + "; the paper trains to convergence, with learning rates and α₀ tuned per model",
    )


def dyt_speed(res) -> Claim:
    ratio, vs_rms = res.speed_vs_layernorm("dyt"), res.speed_vs("dyt", "rmsnorm")
    return Claim(
        id="nonorm.dyt_speed",
        chapter=CHAPTER,
        claim="A model with DyT in place of its norm layers runs faster (timed in the paper "
        "against RMSNorm, in LLaMA-2 7B on a GPU)",
        source=cite(DYT),
        measured=f"whole training step of TinyGPT, variants interleaved: DyT {vs_rms:.2f}× "
        f"RMSNorm's and {ratio:.2f}× LayerNorm's tokens per second",
        verdict="confirmed" if speed_word(vs_rms) == "faster than" else "depends",
        device=measured_on(),
        note="the course's norms are written out of elementary tensor ops; the paper times "
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
