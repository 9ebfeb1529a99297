"""Claims of the chapter "Training without normalization" (book/since2020_nonorm.md).

The verdicts over seeds read the multi-seed record (``nonorm_seeds``, :mod:`normedu.records`),
the speed claim the speed record timed alone (``nonorm_step_speed``); the sentences the page
shows under its measurements are built in :mod:`.since2020_nonorm_words` by rules that can
fail, and every seed-dependent verdict goes through :func:`normedu.seeding.compare`.
"""

from __future__ import annotations

import numpy as np

from ..claim import Claim, cite, claims_for, measured_on, verdict
from ..seeding import compare, seeds
from .since2020_nonorm_words import (
    BEND,
    MATCH,
    SPEED,
    below_half,
    bends,
    dyt_verdict,
    none_verdict,
    norm_share,
    speed_ratios,
    speed_word,
    spread_text,
    values,
)

CHAPTER = "since2020_nonorm"
THIS_CHAPTER = "this course, chapter 'Training without normalization'"
DYT = "zhu2025transformers"
REZERO = "bachlechner2021rezero"
#: The log-scale spreads of the synthetic demo (the chapter's and the claims').
DEMO_SPREADS = (0.0, 0.5, 1.0, 1.5)
#: Seeds of the cheap checks (the ReZero identity, the synthetic demo): a run costs far
#: below 2 CPU-s, so five.
CHEAP_SEEDS = seeds(5)

__all__ = ["BEND", "MATCH", "SPEED", "DEMO_SPREADS", "CHEAP_SEEDS", "bends", "check"]


# --------------------------------------------------------------------------- claims


@claims_for(CHAPTER)
def check(preset: str | None = None) -> list[Claim]:
    from ..experiments import since2020_nonorm as E
    from ..experiments.since2020_nonorm_seeds import SPEED_RECORD, seeds_record
    from ..records import read

    D = seeds_record()
    T = read(SPEED_RECORD)["data"]
    demos = {s: [E.token_scale_demo(x, seed=s) for x in DEMO_SPREADS] for s in CHEAP_SEEDS}
    return [
        rezero_identity([E.rezero_identity(seed=s) for s in CHEAP_SEEDS]),
        skipinit_bn(),
        s_curve(D),
        s_curve_mechanism(demos),
        none_slow_claim(D),
        rezero_trains(D),
        dyt_matches_claim(D),
        dyt_embedding_scalar(D),
        dyt_speed(T),
        fixup_depth(),
    ]


def rezero_identity(rzs) -> Claim:
    """``rzs``: :func:`~normedu.experiments.since2020_nonorm.rezero_identity` at each seed."""
    stream = [r.max_stream_change for r in rzs]
    grads = [r.max_grad_change for r in rzs]
    return Claim(
        id="nonorm.rezero_identity",
        chapter=CHAPTER,
        claim="A residual stack whose branches are each multiplied by a scalar initialized at "
        "zero computes the identity at initialization, so every block receives the same "
        "gradient",
        source=cite(REZERO) + "; " + cite("de2020batch"),
        measured=f"TinyGPT, {rzs[0].depth} ReZero blocks, {len(rzs)} seeds: max |stream out − "
        f"stream in| = {max(stream):g}; max difference between two blocks' output gradients "
        f"= {max(grads):g}",
        verdict=verdict(max(stream) == 0 and max(grads) == 0),
        device="float32 arithmetic",
        per_seed={"max stream change": stream, "max gradient difference": grads},
        quote="gating each residual connection using a single zero-initialized parameter "
        "satisfies initial dynamical isometry",
        quote_where="Bachlechner et al., abstract",
        note="TinyGPT gives each branch its own gate (two per block); ReZero's Transformer "
        "layer has one gate shared by its attention and MLP branches",
    )


def skipinit_bn() -> Claim:
    return Claim(
        id="nonorm.skipinit",
        chapter=CHAPTER,
        claim="At initialization BatchNorm shrinks each residual branch relative to the skip "
        "connection by a factor of the order of the square root of the depth, so a deep "
        "normalized ResNet starts close to the identity; a scalar at zero on each branch "
        "(SkipInit) does the same without normalization",
        source=cite("de2020batch"),
        measured="not measured here (the page measures ReZero's identity, the same mechanism)",
        verdict="cited",
        device="—",
        quote="at initialization, batch normalization downscales the residual branch relative "
        "to the skip connection, by a normalizing factor on the order of the square root of "
        "the network depth",
        quote_where="De and Smith, abstract",
    )


def s_curve(D) -> Claim:
    gaps = [s["curve"]["r2_tanh"] - s["curve"]["r2_line"] for s in D["per_seed"]]
    c = compare(gaps, BEND)
    sig = [s["curve"]["sigma_spread"] for s in D["per_seed"]]
    return Claim(
        id="nonorm.s_curve",
        chapter=CHAPTER,
        claim="In trained ViT, wav2vec 2.0 and DiT models, the deeper LayerNorms' "
        "input-output maps, element by element, are S-shaped curves close to a scaled tanh "
        "(the earlier layers' are mostly linear)",
        source=cite(DYT, where="§3, Figure 2"),
        measured=f"final LayerNorm of the chapter's TinyGPT after {D['steps']} steps: R² of "
        "tanh minus R² of a line "
        + spread_text(gaps, ".3f")
        + f" over {len(gaps)} seeds ("
        + c.words(f"above {BEND}", f"below {BEND}")
        + f"); per-token σ spread ×{min(sig):.2f} to ×{max(sig):.2f}",
        verdict="confirmed" if c.sign > 0 else "depends",
        device=measured_on(),
        per_seed={"R² tanh − R² line": gaps},
        quote="most of these curves' shapes highly resemble full or partial S-shaped curves "
        "represented by a tanh function",
        quote_where="Zhu et al., §3",
        note=""
        if c.sign > 0
        else "a small language model trained briefly, not one of the paper's three: its "
        "tokens' σ differ little and the cloud is straight, like the paper's earlier layers; "
        "the synthetic demo shows the bend once they differ",
    )


def s_curve_mechanism(demos) -> Claim:
    """``demos``: ``{seed: [token_scale_demo(spread, seed) for spread in DEMO_SPREADS]}``."""
    gaps = {s: [d.fit.r2_tanh - d.fit.r2_line for d in ds] for s, ds in demos.items()}
    grows = [bool(np.all(np.diff(g) > 0)) and g[0] < BEND for g in gaps.values()]
    widest = [g[-1] for g in gaps.values()]
    return Claim(
        id="nonorm.s_mechanism",
        chapter=CHAPTER,
        claim="The S-shape comes from normalizing per token: each token is mapped linearly "
        "(slope 1/σ), and the extreme inputs belong to the tokens of large σ, whose slopes "
        "are smallest",
        source=cite(DYT, where="§3, Figure 4"),
        measured=f"synthetic tokens, {len(gaps)} seeds: R² of tanh minus R² of a line below "
        f"{BEND} at spread {DEMO_SPREADS[0]:g} and growing with the spread on "
        f"{sum(grows)} of {len(grows)} seeds; at spread {DEMO_SPREADS[-1]:g}: "
        + spread_text(widest, ".3f"),
        verdict=verdict(all(grows)),
        device="float64 arithmetic",
        per_seed={f"gap at spread {DEMO_SPREADS[-1]:g}": widest},
        quote="As tokens have different mean and standard deviation values, the linearity "
        "does not hold collectively on all activations of the input tensor.",
        quote_where="Zhu et al., §3",
    )


def none_slow_claim(D) -> Claim:
    nv = none_verdict(D)
    none, ln = values(D, "none"), values(D, "layernorm")
    slower = compare(none, ln)
    return Claim(
        id="nonorm.none_slow",
        chapter=CHAPTER,
        claim="Without normalization (and without an initialization made for it) the "
        "chapter's 8-block Transformer trains much more slowly than its normalized twin at "
        "the same learning rate",
        source=THIS_CHAPTER,
        measured=f"{len(none)} seeds, Adam, no warm-up; after {D['steps']} steps: no norm "
        f"{spread_text(none)}, LayerNorm {spread_text(ln, '.3f')} ("
        + slower.words("no norm higher", "no norm lower")
        + f"); no norm after {D['long_steps']} steps: "
        + spread_text(values(D, "none", "final_long")),
        verdict=verdict(nv != "trains" and below_half(D, "layernorm").sign < 0),
        device=measured_on(),
        per_seed={f"no norm after {D['steps']}": none, f"LayerNorm after {D['steps']}": ln},
        note={
            "slower": "slower, not failed: given more steps it trains; "
            "measured at this depth only, and the page's try-it runs shallower stacks",
            "fails": "it did not train even given the longer budget",
            "trains": "at this size leaving the norm out does not slow training enough to show",
        }[nv],
    )


def rezero_trains(D) -> Claim:
    short, long = values(D, "rezero"), values(D, "rezero", "final_long")
    c = below_half(D, "rezero", "final_long")
    return Claim(
        id="nonorm.rezero_trains",
        chapter=CHAPTER,
        claim="ReZero trains deep Transformers without any normalization layer",
        source=cite(REZERO),
        measured=f"8 blocks, {len(short)} seeds: ReZero's loss after {D['steps']} steps "
        f"{spread_text(short)}, after {D['long_steps']} steps {spread_text(long)} (trained: "
        f"below {0.5 * D['chance']:.2f}; " + c.words("not trained", "trained") + ")",
        verdict=verdict(c.sign < 0),
        device=measured_on(),
        per_seed={f"after {D['steps']}": short, f"after {D['long_steps']}": long},
        quote="We apply this technique to language modeling and find that we can easily "
        "train 120-layer Transformers.",
        quote_where="Bachlechner et al., abstract",
        note=f"the verdict is the one after {D['long_steps']} steps; TinyGPT gates each "
        "branch separately, where ReZero's Transformer layer shares one gate between its two "
        "branches",
    )


def dyt_matches_claim(D) -> Claim:
    word = dyt_verdict(D)
    dyt, ln = values(D, "dyt"), values(D, "layernorm")
    long = values(D, "dyt", "final_long")
    return Claim(
        id="nonorm.dyt_matches",
        chapter=CHAPTER,
        claim="Replacing every LayerNorm of a Transformer with DyT, keeping the normalized "
        "model's hyperparameters and α₀ = 0.5 outside large language models, matches its "
        "performance",
        source=cite(DYT, where="§5"),
        measured=f"{len(dyt)} seeds, after {D['steps']} steps: DyT {spread_text(dyt)}, "
        f"LayerNorm {spread_text(ln, '.3f')}; DyT after {D['long_steps']} steps: "
        + spread_text(long, ".3f"),
        verdict=verdict(word == "matches", otherwise="depends"),
        device=measured_on(),
        per_seed={f"DyT after {D['steps']}": dyt, f"LayerNorm after {D['steps']}": ln},
        quote="we use hyperparameters identical to those utilized by the normalized counterparts",
        quote_where="Zhu et al., §5",
        note=""
        if word == "matches"
        else f"DyT {word} LayerNorm here: with LayerNorm's learning rate, it got within "
        f"{MATCH} of LayerNorm's loss only given the longer run; the paper compares trained "
        "models, and its LLaMA runs add a scalar after the embedding (the next row)",
    )


def dyt_embedding_scalar(D) -> Claim:
    dyt, scaled = values(D, "dyt"), values(D, "dyt_scaled")
    c = compare(scaled, dyt)
    return Claim(
        id="nonorm.dyt_embedding_scalar",
        chapter=CHAPTER,
        claim="With DyT in place of the norms, a learnable scalar after the embedding, "
        "initialized at √d, lets training start: without it the activations are too small",
        source=cite(DYT, where="Appendix A"),
        measured=f"{len(dyt)} seeds, after {D['steps']} steps: DyT {spread_text(dyt)}, DyT "
        f"with the scalar {spread_text(scaled)} ("
        + c.words("higher with it", "lower with it")
        + ")",
        verdict=verdict(c.sign < 0),
        device=measured_on(),
        per_seed={"DyT": dyt, "DyT + scalar": scaled},
        quote="Without this scaling scalar, we find that the magnitudes of model activations "
        "at the beginning of training are too small, and the training struggles to progress.",
        quote_where="Zhu et al., Appendix A (LLaMA)",
    )


def dyt_speed(T) -> Claim:
    vs_rms = speed_ratios(T, "dyt", "rmsnorm")
    word = speed_word(vs_rms)
    return Claim(
        id="nonorm.dyt_speed",
        chapter=CHAPTER,
        claim="Uncompiled, DyT cuts a LLaMA 7B training step by about 8% against RMSNorm (H100, "
        "BF16); compiled, the two run equally fast",
        source=cite(DYT, where="§9, Appendix C, Tables 14-15"),
        measured=f"a whole eager training step of the chapter's TinyGPT, one thread, "
        f"{len(vs_rms)} interleaved rounds timed alone: DyT's speed over RMSNorm's "
        f"{min(vs_rms):.2f}–{max(vs_rms):.2f} (median {np.median(vs_rms):.2f}): DyT {word} "
        f"RMSNorm by the rule; the norms take {norm_share(T):.0%} of a LayerNorm step",
        verdict="depends",
        device=measured_on(),
        quote="we find that DyT offers no speedup over models with normalization layers when "
        "properly compiled/optimized",
        quote_where="Zhu et al., §9 Limitations",
        note="a speed claim is about an implementation: the course's norms are written out of "
        "elementary tensor operations and nothing is compiled here",
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
        quote="We find training residual networks with Fixup to be as stable as training with "
        "normalization -- even for networks with 10,000 layers.",
        quote_where="Zhang et al., abstract",
    )
