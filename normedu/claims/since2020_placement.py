"""Claims of the chapter "Where the norm goes in today's large models"
(book/since2020_placement.md), on its cached runs.

The sentences the page shows under its measurements (``describe_*``) and the rules that word
them are in :mod:`.since2020_placement_words` (re-exported here); the table of today's models
and its claims in :mod:`.since2020_models` (re-exported here). The expensive experiments'
claims rest on the committed multi-seed record of
:mod:`normedu.experiments.since2020_seeds`.
"""

from __future__ import annotations

import math

from ..claim import Claim, cite, claims_for, device_for, verdict, verdict_by_parts
from ..seeding import compare
from .since2020_models import MODELS, UNVERIFIED, model_row

__all__ = [
    "BOUND_GROUP",
    "BOUNDED",
    "CHAPTER",
    "MODELS",
    "TRAINED_FRACTION",
    "UNVERIFIED",
    "check",
    "deepnorm_bounded",
    "describe_fc2_ratio",
    "describe_init",
    "describe_precision",
    "describe_stream_end",
    "describe_sweep",
    "describe_training",
    "describe_updates",
    "expected_training",
    "learns",
    "live_in_record",
    "logits_grow",
    "model_row",
    "outcome",
    "outcome_rule",
    "qk_bounded",
    "qk_learned",
    "qk_rescues",
]

CHAPTER = "since2020_placement"
THIS_CHAPTER = "this course, chapter 'Where the norm goes in today's large models'"

#: With float32 statistics the variance is "to float32 accuracy" below this relative error:
#: the worst-case rounding of a float32 running sum over one chunk's 128 numbers, 128 · 2^-24
#: (Welford/Chan's states run over N_ROW / 32 = 128 numbers each).
FLOAT32_ACCURACY = 128 * 2.0**-24

# The page's sentences and the rules that word them live in .since2020_placement_words
# (and .halfprec_words for the half-precision table).
from .halfprec_words import describe_precision  # noqa: E402
from .since2020_placement_words import (  # noqa: E402
    BOUND_GROUP,
    BOUNDED,
    TRAINED_FRACTION,
    deepnorm_bounded,
    describe_fc2_ratio,
    describe_init,
    describe_stream_end,
    describe_sweep,
    describe_training,
    describe_updates,
    expected_training,
    learns,
    live_in_record,
    logits_grow,
    outcome,
    outcome_rule,
    qk_bounded,
    qk_learned,
    qk_rescues,
)

# --------------------------------------------------------------------------- claims


@claims_for(CHAPTER)
def check(preset: str | None = None) -> list[Claim]:
    """The chapter's claims: the expensive experiments' from the committed multi-seed record
    (CPU sizes), the rest computed here."""
    from ..experiments import since2020_placement as E
    from ..experiments.since2020_seeds import seed_record

    cpu = device_for("cpu")
    rec = seed_record()
    out = [deepnorm_constants(cpu), deepnorm_update(rec, cpu), post_fails(rec, cpu)]
    out += [logit_growth(rec, cpu), qknorm_origin(), qk_bound(rec, cpu), qk_lr_range(rec, cpu)]
    prec = E.precision_errors()
    out += [fp16_overflow(prec, cpu), one_pass_cancels(prec, cpu), float32_state(prec, cpu)]
    return out + [model_row(row) for row in MODELS]


def deepnorm_constants(dev: str) -> Claim:
    from ..placements import deepnorm_alpha, deepnorm_beta
    from ..transformer import GPTConfig, TinyGPT

    depths = (6, 48, 1000)
    sums = [4 * n * deepnorm_beta(n) ** 2 / deepnorm_alpha(n) ** 2 for n in depths]
    # the init scale on the weights: DeepNorm's fc2 std over Post-LN's (same seed)
    n = 12
    deep = TinyGPT(GPTConfig(n_layers=n, placement="deepnorm", d_model=32))
    post = TinyGPT(GPTConfig(n_layers=n, placement="post", d_model=32))
    ratio = float(
        deep.blocks[0].mlp.fc2.weight.detach().std() / post.blocks[0].mlp.fc2.weight.detach().std()
    )
    ok = all(abs(s - 1) < 1e-12 for s in sums) and abs(ratio - deepnorm_beta(n)) < 1e-6
    return Claim(
        id="since2020_placement.deepnorm_constants",
        chapter=CHAPTER,
        claim="For an N-layer decoder, α = (2N)^¼ and β = (8N)^−¼ make the bound on the model "
        "update independent of depth: 2N(v² + w²)/α² = 1 with v = w = β",
        source=cite("wang2022deepnet", where="§4"),
        measured="4Nβ²/α² = "
        + ", ".join(f"{s:.15f} (N = {d})" for s, d in zip(sums, depths, strict=True))
        + f"; TinyGPT's fc2 weight std, DeepNorm over Post-LN at N = {n}: {ratio:.6f}, "
        f"β = {deepnorm_beta(n):.6f}",
        verdict=verdict(ok),
        device=dev,
        quote="In-depth theoretical analysis shows that model updates can be bounded in a "
        "stable way.",
        quote_where="Abstract",
    )


def _seeds_note(rec) -> str:
    return (
        f"{rec.n} seeds, from the committed record measured on {rec.measured}; verdict by the "
        "course's rule (every seed agrees, or the mean beyond twice its standard error)"
    )


def _series(values) -> str:
    return " / ".join(f"{v:.3g}" for v in values)


def deepnorm_update(rec, dev: str) -> Claim:
    import math

    ups = rec.update
    depths = " / ".join(str(d) for d in ups[0].depths)
    mats = [u.ratio("deepnorm", BOUND_GROUP) for u in ups]
    norms = "norm gains and biases"
    return Claim(
        id="since2020_placement.deepnorm_update",
        chapter=CHAPTER,
        claim="With DeepNorm's α and β the change of the model's output per update, from the "
        "sub-layers' matrices the bound covers, is bounded independently of the depth",
        source=cite("wang2022deepnet", where="§4"),
        measured=f"RMS output change / lr after one SGD step at init, {depths} layers, moving "
        f"only the block matrices: DeepNorm's growth from the shallowest to the deepest "
        f"{_series(mats)} per seed (seed 0: {_series(ups[0].groups['deepnorm'][BOUND_GROUP])}; "
        f"Post-LN {_series(ups[0].groups['post'][BOUND_GROUP])}); moving only the norms' gains "
        f"and biases it grows {_series([u.ratio('deepnorm', norms) for u in ups])}, all "
        f"parameters {_series([u.ratio('deepnorm') for u in ups])}",
        verdict=verdict(deepnorm_bounded(rec)),
        device=dev,
        note=f"growing clearly less than ×{BOUNDED:g} counts as bounded; {_seeds_note(rec)}",
        per_seed={"log growth, block matrices": [math.log(m) for m in mats]},
        quote="In-depth theoretical analysis shows that model updates can be bounded in a "
        "stable way.",
        quote_where="Abstract",
    )


def post_fails(rec, dev: str) -> Claim:
    from ..experiments.since2020_placement import PLACEMENTS

    t0 = rec.train[0]
    parts = [learns(rec, "post") < 0] + [learns(rec, p) > 0 for p in ("pre", "deepnorm")]
    losses = {p: [t["runs"][p]["final_loss"] for t in rec.train] for p in PLACEMENTS}
    return Claim(
        id="since2020_placement.post_fails",
        chapter=CHAPTER,
        claim="Without warm-up a deep Post-LN stack fails to train where Pre-LN and DeepNorm train",
        source=cite("wang2022deepnet"),
        measured=f"{t0['depth']} layers, Adam lr {t0['lr']:g}, {t0['steps']} steps, final losses "
        "per seed: "
        + "; ".join(f"{p} {_series(v)}" for p, v in losses.items())
        + f" (chance {t0['chance_loss']:.2f}; fails: clearly above half of it)",
        verdict=verdict_by_parts(parts),
        device=dev,
        note="a shallow stack at a high learning rate, not the paper's hundreds of layers; "
        + _seeds_note(rec),
        per_seed={f"final loss, {p}": losses[p] for p in ("post", "pre", "deepnorm")},
        quote="The proposed method combines the best of two worlds, i.e., good performance of "
        "Post-LN and stable training of Pre-LN",
        quote_where="Abstract",
    )


def _peaks(rec, label: str, lr: float) -> list[float]:
    return [next(r["peak_logit"] for r in s["runs"] if r["label"] == label and r["lr"] == lr)
            for s in rec.sweep]  # fmt: skip


def logit_growth(rec, dev: str) -> Claim:
    s0 = rec.sweep[0]
    lo, hi = s0["lrs"][0], s0["lrs"][-1]
    return Claim(
        id="since2020_placement.logit_growth",
        chapter=CHAPTER,
        claim="Without QK-norm the largest attention logit grows during training until the "
        "softmax saturates; it appears at high learning rates in small models too",
        source=cite("dehghani2023scaling") + "; " + cite("wortsman2024small"),
        measured=f"{s0['depth']}-layer Pre-LN stack, d_model {s0['d_model']}, {s0['steps']} "
        f"steps, peak |logit| per seed: {_series(_peaks(rec, 'plain', lo))} at lr {lo:g}, "
        f"{_series(_peaks(rec, 'plain', hi))} at lr {hi:g} (with QK-norm "
        f"{_series(_peaks(rec, 'qk_norm', hi))} at lr {hi:g}); grows means clearly at least "
        "100×",
        verdict=verdict(logits_grow(rec)),
        device=dev,
        note=_seeds_note(rec),
        per_seed={
            f"peak logit, lr {hi:g}": _peaks(rec, "plain", hi),
            f"peak logit, lr {lo:g}": _peaks(rec, "plain", lo),
        },  # fmt: skip
        quote="It was caused by extremely large values in attention logits, which lead to "
        "(almost one-hot) attention weights with near-zero entropy.",
        quote_where="Dehghani et al., §2, 'QK Normalization'",
    )


def qknorm_origin() -> Claim:
    return Claim(
        id="since2020_placement.qknorm_origin",
        chapter=CHAPTER,
        claim="Henry et al.'s QKNorm ℓ2-normalizes each head's queries and keys and scales "
        "their dot product by one learned parameter g instead of 1/√Dh, so every logit is at "
        "most |g| in size; the later QK-norms (Dehghani et al., Wortsman et al.) are LayerNorms",
        source=cite("henry2020qknorm"),
        measured="not measured: for unit vectors the dot product is at most 1 in size "
        "(Cauchy–Schwarz); this page's QK-norm is the RMSNorm form, whose bound is checked in "
        "the next row",
        verdict="cited",
        device="—",
        quote="we apply ℓ2 normalization along the head dimension of each query and key matrix "
        "prior to multiplying them and then scale up by a learnable parameter",
        quote_where="Abstract",
    )


def qk_bound(rec, dev: str) -> Claim:
    worst = max(r["worst_over_bound"] for s in rec.sweep for r in s["runs"]
                if r["label"] == "qk_norm")  # fmt: skip
    return Claim(
        id="since2020_placement.qk_bound",
        chapter=CHAPTER,
        claim="With QK-norm every attention logit is at most √Dh·max|g_q|·max|g_k|",
        source=THIS_CHAPTER + " (Cauchy–Schwarz)",
        measured=f"largest recorded logit over its bound, every step of every QK-norm run of "
        f"{rec.n} seeds: {worst:.3f}",
        verdict=verdict(qk_bounded(rec)),
        device=dev,
        note="a bound, not a statistic: one logit above it on any seed would refute it",
    )


def qk_lr_range(rec, dev: str) -> Claim:
    rescued = qk_rescues(rec)

    def losses(label, lr):
        return [next(r["final_loss"] for r in s["runs"] if r["label"] == label and r["lr"] == lr)
                for s in rec.sweep]  # fmt: skip

    lrs = rec.sweep[0]["lrs"]
    return Claim(
        id="since2020_placement.qk_lr_range",
        chapter=CHAPTER,
        claim="QK-norm lowers a small model's final loss at learning rates where without it "
        "the model fails (the loss side of the mitigation; whether the QK-norm runs then learn, "
        "a wider range of usable learning rates, is not tested)",
        source=cite("wortsman2024small"),
        measured="final loss per seed without / with QK-norm: "
        + "; ".join(
            f"lr {lr:g} {_series(losses('plain', lr))} / {_series(losses('qk_norm', lr))}"
            for lr in lrs
        )  # fmt: skip
        + f" (fails: clearly above half of chance, {0.5 * rec.sweep[0]['chance_loss']:.2f}; "
        "lowers: the paired difference clear); QK-norm runs below half of chance: "
        + "; ".join("lr {2:g} {0} of {1}".format(*qk_learned(rec, lr), lr) for lr in lrs),
        verdict=verdict(bool(rescued)),
        device=dev,
        note=_seeds_note(rec),
        per_seed={
            f"final loss, lr {lrs[-1]:g}, without": losses("plain", lrs[-1]),
            f"final loss, lr {lrs[-1]:g}, with": losses("qk_norm", lrs[-1]),
        },  # fmt: skip
        quote="these instabilities also appear in small models when training at high learning "
        "rates, and that mitigations previously employed at large scales are equally effective",
        quote_where="Abstract",
    )


def fp16_overflow(prec, dev: str) -> Claim:
    s = prec.sumsq
    return Claim(
        id="since2020_placement.fp16_overflow",
        chapter=CHAPTER,
        claim="A float16 sum of squares overflows for ordinary activations (65504 is the "
        "largest float16)",
        source=THIS_CHAPTER,
        measured=f"{prec.n} numbers of std {prec.sumsq_std:g}: float16 {s['float16']}, float32 "
        f"{s['float32']:.6g}, float64 {s['float64']:.6g}",
        verdict=verdict(math.isinf(s["float16"]) and math.isfinite(s["float32"])),
        device=dev,
    )


def one_pass_cancels(prec, dev: str) -> Claim:
    from ..halfprec import FLOAT32_STATS, LARGE_MEAN, WELFORD_FLOAT32

    e = {d: prec.per_row[d][str(LARGE_MEAN[d])] for d in prec.per_row}
    half = [d for d in e if d != "float32"]
    parts = [compare(e[d]["one-pass"], 0.5).sign > 0 for d in e] + [
        max(e[d][FLOAT32_STATS]) <= FLOAT32_ACCURACY
        and max(e[d][WELFORD_FLOAT32]) <= FLOAT32_ACCURACY
        for d in half
    ]
    return Claim(
        id="since2020_placement.one_pass_cancels",
        chapter=CHAPTER,
        claim="E[x²] − E[x]² loses every digit of the variance when the mean is large against "
        "the spread; with float32 state, two-pass and Welford/Chan keep the variance to "
        f"float32 accuracy (relative error ≤ {FLOAT32_ACCURACY:.1e}, the worst-case rounding of "
        "a 128-term float32 sum)",
        source=cite("welford1962note") + "; " + cite("chan1979updating"),
        measured=f"{prec.rows} rows; relative error at a large mean, one-pass in the row's dtype: "
        + "; ".join(f"{d} (mean {LARGE_MEAN[d]:g}) {min(e[d]['one-pass']):.2g} or more" for d in e)
        + ". The half-precision rows upcast to float32, largest over the rows, two-pass / "
        "Welford-Chan: "
        + "; ".join(
            f"{d} {max(e[d][FLOAT32_STATS]):.1e} / {max(e[d][WELFORD_FLOAT32]):.1e}" for d in half
        ),
        verdict=verdict_by_parts(parts),
        device=dev,
        note="every digit lost: relative error clearly ≥ 0.5 over the rows; float32 accuracy: "
        "on every row",
        per_seed={f"one-pass error, {d}": e[d]["one-pass"] for d in e},
        quote="This formula is used in the construction of a pairwise algorithm for computing "
        "the variance.",
        quote_where="Chan, Golub and LeVeque, Abstract (Stanford CS-TR-79-773)",
    )


def float32_state(prec, dev: str) -> Claim:
    from ..halfprec import FLOAT32_STATS, LARGE_MEAN

    errs = [
        v
        for d in ("float16", "bfloat16")
        for m in (0.0, LARGE_MEAN[d])
        for v in prec.per_row[d][str(m)][FLOAT32_STATS]
    ]
    worst = max(errs)
    return Claim(
        id="since2020_placement.float32_state",
        chapter=CHAPTER,
        claim="Half-precision inputs with float32 statistics give the variance to float32 accuracy",
        source=THIS_CHAPTER,
        measured=f"largest relative error over {prec.rows} rows, float16 and bfloat16 rows at "
        f"mean 0 and at the large mean, two-pass in float32: {worst:.1e} (threshold "
        f"{FLOAT32_ACCURACY:.1e})",
        verdict=verdict(worst <= FLOAT32_ACCURACY),
        device=dev,
    )
