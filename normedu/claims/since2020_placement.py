"""Claims of the chapter "Where the norm goes in today's large models"
(book/since2020_placement.md), on its cached runs.

Also the sentences the page shows under its measurements (``describe_*``), built here from
the results so that every branch is unit-testable. The table of today's models and its
claims are in :mod:`.since2020_models` (re-exported here).
"""

from __future__ import annotations

import math

import numpy as np

from ..claim import Claim, cite, claims_for, device_for, verdict, verdict_by_parts
from .since2020_models import MODELS, UNVERIFIED, model_row

__all__ = ["CHAPTER", "MODELS", "UNVERIFIED", "check", "model_row"]

CHAPTER = "since2020_placement"
THIS_CHAPTER = "this course, chapter 'Where the norm goes in today's large models'"

#: A run "fails" when its final loss is above half the chance loss (``Run.trained`` is
#: False); below that it "learned partly", and below TRAINED_FRACTION of the chance loss it
#: "trained".
TRAINED_FRACTION = 0.1
#: DeepNorm's update "stays bounded" if growing by at most BOUNDED from the shallowest to the
#: deepest stack.
BOUNDED = 2.0
#: The group of parameters DeepNet's bound covers (the sub-layers' matrices).
BOUND_GROUP = "block matrices"
#: With float32 statistics the variance is "to float32 accuracy" below this relative error.
FLOAT32_ACCURACY = 1e-6

# --------------------------------------------------------------------------- page sentences


def _label(p: str) -> str:
    from ..experiments.since2020_placement import LABELS

    return LABELS[p]


def outcome(run, chance: float) -> str:
    """ "diverged", "failed" (final loss above half of ``chance``), "trained" (below
    TRAINED_FRACTION of it) or, in between, "learned partly"."""
    if run.diverged:
        return "diverged"
    if not run.trained:
        return "failed"
    return "trained" if run.final_loss < TRAINED_FRACTION * chance else "learned partly"


def outcome_rule(chance: float) -> str:
    """The thresholds of :func:`outcome`, in words, for a task of chance loss ``chance``."""
    return (
        f"'trained' means a final loss below {TRAINED_FRACTION:g} × chance "
        f"({TRAINED_FRACTION * chance:.2f}), 'learned partly' below half of chance "
        f"({0.5 * chance:.2f}), 'failed' above that"
    )


def describe_init(init) -> str:
    """The stream and gradient profiles at init (:class:`InitProfiles`), in words."""
    lof = {p: init.last_over_first(p) for p in init.grads}
    spread = {p: max(init.grads[p]) / min(init.grads[p]) for p in ("post", "deepnorm")}

    def ends(p: str) -> str:
        s = init.stream[p]
        return f"{s[0]:.2f} to {s[-1]:.2f} (×{init.growth(p):.1f})"

    return (
        f"From the first block to the last (block {init.depth}) the residual stream's RMS goes "
        "from "
        f"{ends('pre')} in Pre-LN, {ends('sandwich')} with the sandwich and {ends('olmo2')} "
        f"with OLMo 2's output norm; it goes from {ends('post')} in Post-LN and "
        f"{ends('deepnorm')} in DeepNorm, whose every sub-block ends in a norm. The "
        "last block's fc2 gradient over the first block's is "
        + ", ".join(f"{lof[p]:.2f} ({_label(p)})" for p in lof)
        + ": "
        + (
            "the placements that never normalize the stream give their early blocks the "
            "larger gradients"
            if all(lof[p] < 1 for p in ("pre", "sandwich", "olmo2"))
            else "the placements that never normalize the stream do **not** all give their "
            "early blocks the larger gradients"
        )
        + ", the two that normalize it show "
        + (
            "no trend from first to last"
            if all(0.5 <= lof[p] <= 2 for p in ("post", "deepnorm"))
            else "a trend from first to last"
        )
        + " (from block to block, the largest over the smallest is "
        + ", ".join(f"×{spread[p]:.1f} for {_label(p)}" for p in ("post", "deepnorm"))
        + ")."
    )


def deepnorm_bounded(upd) -> bool:
    """DeepNorm's change from the parameters the bound covers grows at most ×BOUNDED."""
    return upd.ratio("deepnorm", BOUND_GROUP) <= BOUNDED


def _series(values) -> str:
    return " / ".join(f"{v:.3g}" for v in values)


def describe_updates(upd) -> str:
    """The output change per SGD step (:class:`UpdateSizes`), in words."""
    depths = " / ".join(str(d) for d in upd.depths)
    c = upd.change
    smaller = min(c["post"][i] / c["deepnorm"][i] for i in range(len(upd.depths)))
    peak = int(np.argmax(c["post"]))
    post_shape = (
        f"Post-LN's change peaks at {c['post'][peak]:.3g} at {upd.depths[peak]} layers"
        if 0 < peak < len(upd.depths) - 1
        else f"Post-LN's change is largest at {upd.depths[peak]} layers"
    )
    first = (
        f"At {depths} layers, one SGD step with every parameter moved changes the output by "
        f"{_series(c['post'])} per unit learning rate in Post-LN, {_series(c['pre'])} in "
        f"Pre-LN and {_series(c['deepnorm'])} in DeepNorm: DeepNorm's change is "
        f"{smaller:.1f}× smaller than Post-LN's or more at every depth, and {post_shape}. "
        f"DeepNorm's total still grows ×{upd.ratio('deepnorm'):.1f}."
    )
    g = upd.groups["deepnorm"]
    m = g[BOUND_GROUP]
    split = (
        f" Split by what the step moves: the block matrices alone (the value, output and "
        f"feed-forward weights, which the bound covers, and the queries and keys, which it "
        f"assumes away) change DeepNorm's output by "
        f"{_series(m)} (×{upd.ratio('deepnorm', BOUND_GROUP):.2f}; Post-LN's by "
        f"{_series(upd.groups['post'][BOUND_GROUP])}); the norms' gains and biases by "
        f"{_series(g['norm gains and biases'])} "
        f"(×{upd.ratio('deepnorm', 'norm gains and biases'):.1f}); the blocks' biases by "
        f"{_series(g['block biases'])}; the embeddings by {_series(g['embeddings'])}."
    )
    grower = max(g, key=lambda k: upd.ratio("deepnorm", k))
    if deepnorm_bounded(upd):
        return (
            first
            + split
            + " **For the parameters the theorem bounds, the change does not grow with depth**; "
            + f"the growth of the total comes from the {grower}, which the bound leaves out."
        )
    return (
        first
        + split
        + " Even for the block matrices the change grows with depth here: the bound is "
        "**not** independent of depth in this model."
    )


def expected_training(res) -> bool:
    """Post-LN fails; every other placement trains."""
    return (not res.run("post").trained) and all(r.trained for r in res.runs if r.label != "post")


def describe_training(res) -> str:
    """The training runs at depth (:class:`TrainResult`), in words."""
    post = res.run("post")
    others = [r for r in res.runs if r.label != "post"]
    ch = res.chance_loss
    losses = ", ".join(f"{_label(r.label)} {r.final_loss:.3f} ({outcome(r, ch)})" for r in others)
    head = (
        f"At {res.depth} layers with Adam at learning rate {res.lr:g} from the first step, "
        f"Post-LN's loss after {res.steps} steps is {post.final_loss:.3f} (chance "
        f"{ch:.2f}): it {outcome(post, ch)}. The others: {losses} ({outcome_rule(ch)})."
    )
    if expected_training(res):
        partly = [_label(r.label) for r in others if outcome(r, ch) == "learned partly"]
        return head + (
            " **Every placement except Post-LN learns**, DeepNorm included, although its "
            "residual sum is normalized like Post-LN's: the α-weighted residual and the "
            "β-scaled initialization are the whole difference."
            + (
                f" {' and '.join(partly)} learned only partly in these {res.steps} steps."
                if partly
                else ""
            )
        )
    return head + " This is **not** the expected pattern (Post-LN alone failing)."


def qk_rescues(sweep) -> list[float]:
    """Learning rates at which the plain stack fails and the QK-norm stack trains."""
    return [
        lr for lr in sweep.lrs if not sweep.get(False, lr).trained and sweep.get(True, lr).trained
    ]


def logits_grow(sweep) -> bool:
    """Without QK-norm the peak logit at the largest rate is at least 100× the smallest's."""
    lo, hi = sweep.lrs[0], sweep.lrs[-1]
    return sweep.get(False, hi).peak_logit >= 100 * sweep.get(False, lo).peak_logit


def qk_bounded(sweep) -> bool:
    return all(
        v <= b * (1 + 1e-5)
        for r in sweep.runs
        if r.label == "qk_norm"
        for v, b in zip(r.max_logits, r.logit_bounds, strict=True)
    )


def describe_sweep(sweep) -> str:
    """The logit-growth sweep (:class:`SweepResult`), in words."""
    lo, hi = sweep.lrs[0], sweep.lrs[-1]
    plain = {lr: sweep.get(False, lr) for lr in sweep.lrs}
    qk = {lr: sweep.get(True, lr) for lr in sweep.lrs}
    parts = [
        f"Without QK-norm the largest attention logit peaks at {plain[lo].peak_logit:.3g} at "
        f"learning rate {lo:g} and at {plain[hi].peak_logit:.3g} at {hi:g}; with QK-norm at "
        f"{qk[lo].peak_logit:.3g} and {qk[hi].peak_logit:.3g}. "
        + (
            "**The logits grow with the learning rate when nothing bounds them**, "
            if logits_grow(sweep)
            else "The growth stays **below** a factor of 100 here, "
        )
        + (
            "and with QK-norm every recorded logit stays within its bound √Dh·max|g_q|·max|g_k|."
            if qk_bounded(sweep)
            else "and some QK-norm logit **exceeds** its bound: a bug."
        )
    ]
    rescued = qk_rescues(sweep)
    if rescued:
        parts.append(
            "At "
            + ", ".join(f"{lr:g}" for lr in rescued)
            + " the plain stack fails (final loss "
            + ", ".join(f"{plain[lr].final_loss:.2f}" for lr in rescued)
            + ") and the QK-norm stack "
            + ", ".join(
                f"{outcome(qk[lr], sweep.chance_loss)} (final loss {qk[lr].final_loss:.3f})"
                for lr in rescued
            )
            + f"; chance is {sweep.chance_loss:.2f}, and {outcome_rule(sweep.chance_loss)}. "
            "**QK-norm widens the range of learning rates at which the model learns**, as "
            "Wortsman et al. report."
        )
    else:
        parts.append(
            "But at no learning rate of this sweep does QK-norm turn a failing run into one "
            "that trains (final losses "
            + "; ".join(
                f"lr {lr:g}: {plain[lr].final_loss:.3f} without, {qk[lr].final_loss:.3f} with"
                for lr in sweep.lrs
            )
            + "): at this size the loss part of the effect is **not reproduced**."
        )
    return " ".join(parts)


def describe_precision(res) -> str:
    """The variance errors (:class:`PrecisionResult`), in words."""
    from ..halfprec import FLOAT32_STATS, LARGE_MEAN, WELFORD_M2_FLOAT32

    e = res.errors
    big = {d: e[d][str(LARGE_MEAN[d])] for d in e}
    half = [d for d in e if d != "float32"]

    def col(name: str, ds) -> str:
        return ", ".join(f"{big[d][name]:.1e} ({d})" for d in ds)

    one = {d: big[d]["one-pass"] for d in e}
    f32 = [e[d][m][FLOAT32_STATS] for d in half for m in e[d]]
    ratio = min(big[d]["two-pass, sums in dtype"] / big[d]["two-pass"] for d in half)
    z16 = e["bfloat16"]["0.0"]
    return (
        "At the large mean, the one-pass formula's relative error is "
        + ", ".join(f"{one[d]:.2g} in {d}" for d in one)
        + (
            ": **every digit lost** in every dtype. "
            if all(v >= 0.5 for v in one.values())
            else ": not every digit is lost. "
        )
        + f"Two-pass with torch's reductions keeps {col('two-pass', e)}; with its running "
        f"sums stored in the dtype, {col('two-pass, sums in dtype', half)}: at least "
        f"{ratio:.0f}× worse in half precision, the size of Welford/Chan's "
        f"{col('Welford/Chan', half)}. Near mean 0 Welford/Chan's error comes from its sum "
        f"of squared deviations: in bfloat16 it is {z16['Welford/Chan']:.1e}, and "
        f"{z16[WELFORD_M2_FLOAT32]:.1e} with only that sum kept in float32. With the row in "
        f"half precision and two-pass statistics in float32 the error is at most "
        f"{max(f32):.0e}: float32 statistics formed by a stable algorithm, not the algorithm "
        "alone, are why kernels keep their statistics in float32."
    )


# --------------------------------------------------------------------------- claims


@claims_for(CHAPTER)
def check(preset: str | None = None) -> list[Claim]:
    from ..device import preset_name
    from ..experiments import since2020_placement as E

    preset = preset or preset_name()
    dev = device_for(preset)
    cpu = device_for("cpu")
    out = [deepnorm_constants(cpu), deepnorm_update(E.update_sizes(preset), dev)]
    out += [post_fails(E.train_depth(preset), dev)]
    sweep = E.logit_sweep(preset)
    out += [logit_growth(sweep, dev), qk_bound(sweep, dev), qk_lr_range(sweep, dev)]
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
    )


def deepnorm_update(upd, dev: str) -> Claim:
    g = upd.groups["deepnorm"]
    depths = " / ".join(str(d) for d in upd.depths)
    norms = "norm gains and biases"
    return Claim(
        id="since2020_placement.deepnorm_update",
        chapter=CHAPTER,
        claim="With DeepNorm's α and β the change of the model's output per update, from the "
        "sub-layers' matrices the bound covers, is bounded independently of the depth",
        source=cite("wang2022deepnet", where="§4"),
        measured=f"RMS output change / lr after one SGD step at init, {depths} layers, "
        f"moving only the block matrices: DeepNorm {_series(g[BOUND_GROUP])} "
        f"(×{upd.ratio('deepnorm', BOUND_GROUP):.2f}), Post-LN "
        f"{_series(upd.groups['post'][BOUND_GROUP])}; DeepNorm moving only the norms' gains "
        f"and biases {_series(g[norms])}, all parameters {_series(upd.change['deepnorm'])}",
        verdict=verdict(deepnorm_bounded(upd)),
        device=dev,
        note=f"growing ×{BOUNDED:g} or less counts as bounded; the total still grows "
        f"×{upd.ratio('deepnorm'):.1f}, through the norms' gains and biases (×"
        f"{upd.ratio('deepnorm', norms):.1f}), which the bound leaves out",
    )


def post_fails(res, dev: str) -> Claim:
    parts = [not res.run("post").trained] + [
        r.trained for r in res.runs if r.label in ("pre", "deepnorm")
    ]
    return Claim(
        id="since2020_placement.post_fails",
        chapter=CHAPTER,
        claim="Without warm-up a deep Post-LN stack fails to train where Pre-LN and DeepNorm train",
        source=cite("wang2022deepnet"),
        measured=f"{res.depth} layers, Adam lr {res.lr:g}, {res.steps} steps, final losses: "
        + ", ".join(f"{r.label} {r.final_loss:.3f}" for r in res.runs)
        + f" (chance {res.chance_loss:.2f})",
        verdict=verdict_by_parts(parts),
        device=dev,
        note="a shallow stack at a high learning rate, not the paper's hundreds of layers",
    )


def logit_growth(sweep, dev: str) -> Claim:
    lo, hi = sweep.lrs[0], sweep.lrs[-1]
    return Claim(
        id="since2020_placement.logit_growth",
        chapter=CHAPTER,
        claim="Without QK-norm the largest attention logit grows during training at high "
        "learning rates, in small models too",
        source=cite("dehghani2023scaling") + "; " + cite("wortsman2024small"),
        measured=f"{sweep.depth}-layer Pre-LN stack, d_model {sweep.d_model}: peak |logit| "
        + ", ".join(f"{sweep.get(False, lr).peak_logit:.3g} at lr {lr:g}" for lr in sweep.lrs)
        + f" (with QK-norm {sweep.get(True, lo).peak_logit:.3g} to "
        f"{sweep.get(True, hi).peak_logit:.3g})",
        verdict=verdict(logits_grow(sweep)),
        device=dev,
    )


def qk_bound(sweep, dev: str) -> Claim:
    worst = max(
        v / b
        for r in sweep.runs
        if r.label == "qk_norm"
        for v, b in zip(r.max_logits, r.logit_bounds, strict=True)
    )
    return Claim(
        id="since2020_placement.qk_bound",
        chapter=CHAPTER,
        claim="With QK-norm every attention logit is at most √Dh·max|g_q|·max|g_k|",
        source=THIS_CHAPTER + " (Cauchy–Schwarz)",
        measured=f"largest recorded logit over its bound, every step of every QK-norm run: "
        f"{worst:.3f}",
        verdict=verdict(qk_bounded(sweep)),
        device=dev,
    )


def qk_lr_range(sweep, dev: str) -> Claim:
    rescued = qk_rescues(sweep)
    return Claim(
        id="since2020_placement.qk_lr_range",
        chapter=CHAPTER,
        claim="QK-norm lets a small model learn at learning rates where it otherwise fails",
        source=cite("wortsman2024small"),
        measured="final loss without / with QK-norm: "
        + "; ".join(
            f"lr {lr:g} {sweep.get(False, lr).final_loss:.3f} / "
            f"{sweep.get(True, lr).final_loss:.3f}"
            for lr in sweep.lrs
        ),
        verdict=verdict(bool(rescued)),
        device=dev,
        note="" if rescued else "not reproduced at this size; the GPU preset runs a larger one",
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

    e = {d: prec.errors[d][str(LARGE_MEAN[d])] for d in prec.errors}
    half = [d for d in e if d != "float32"]
    parts = [e[d]["one-pass"] >= 0.5 for d in e] + [
        e[d][FLOAT32_STATS] <= FLOAT32_ACCURACY and e[d][WELFORD_FLOAT32] <= FLOAT32_ACCURACY
        for d in half
    ]
    return Claim(
        id="since2020_placement.one_pass_cancels",
        chapter=CHAPTER,
        claim="E[x²] − E[x]² loses every digit of the variance when the mean is large against "
        "the spread; with float32 state, two-pass and Welford/Chan keep the variance to "
        f"float32 accuracy (relative error ≤ {FLOAT32_ACCURACY:g})",
        source=cite("welford1962note") + "; " + cite("chan1979updating"),
        measured="relative error at a large mean, one-pass in the row's dtype: "
        + "; ".join(f"{d} (mean {LARGE_MEAN[d]:g}) {e[d]['one-pass']:.2g}" for d in e)
        + ". The half-precision rows upcast to float32, two-pass / Welford-Chan: "
        + "; ".join(f"{d} {e[d][FLOAT32_STATS]:.1e} / {e[d][WELFORD_FLOAT32]:.1e}" for d in half),
        verdict=verdict_by_parts(parts),
        device=dev,
    )


def float32_state(prec, dev: str) -> Claim:
    from ..halfprec import FLOAT32_STATS, LARGE_MEAN

    errs = {
        d: prec.errors[d][str(m)][FLOAT32_STATS]
        for d in ("float16", "bfloat16")
        for m in (0.0, LARGE_MEAN[d])
    }
    worst = max(errs.values())
    return Claim(
        id="since2020_placement.float32_state",
        chapter=CHAPTER,
        claim="Half-precision inputs with float32 statistics give the variance to float32 accuracy",
        source=THIS_CHAPTER,
        measured=f"largest relative error, float16 and bfloat16 rows at mean 0 and at the large "
        f"mean, two-pass in float32: {worst:.1e}",
        verdict=verdict(worst <= FLOAT32_ACCURACY),
        device=dev,
    )
