"""Claims of the chapter "Where the norm goes in today's large models"
(book/since2020_placement.md), on its cached runs.

Also the sentences the page shows under its measurements (``describe_*``), built here from
the results so that every branch is unit-testable. The table of today's models and its
claims are in :mod:`.since2020_models` (re-exported here).
"""

from __future__ import annotations

import math

from ..claim import Claim, cite, claims_for, verdict, verdict_by_parts
from .since2020_models import MODELS, UNVERIFIED, model_row

__all__ = ["CHAPTER", "MODELS", "UNVERIFIED", "check", "model_row"]

CHAPTER = "since2020_placement"
THIS_CHAPTER = "this course, chapter 'Where the norm goes in today's large models'"

#: A run "fails" when its final loss is above half the chance loss (it did not train).
#: Stream and update ratios: DeepNorm's update "stays bounded" if growing by at most BOUNDED
#: from the shallowest to the deepest stack.
BOUNDED = 2.0

# --------------------------------------------------------------------------- page sentences


def _label(p: str) -> str:
    from ..experiments.since2020_placement import LABELS

    return LABELS[p]


def _outcome(run) -> str:
    return "diverged" if run.diverged else ("trained" if run.trained else "failed")


def describe_init(init) -> str:
    """The stream and gradient profiles at init (:class:`InitProfiles`), in words."""
    growth = {p: init.growth(p) for p in init.stream}
    lof = {p: init.last_over_first(p) for p in init.grads}
    return (
        f"Over {init.depth} blocks the residual stream's RMS grows ×{growth['pre']:.1f} in "
        f"Pre-LN, ×{growth['sandwich']:.1f} with the sandwich and ×{growth['olmo2']:.1f} with "
        f"OLMo 2's output norm, and is ×{growth['post']:.2f} in Post-LN and "
        f"×{growth['deepnorm']:.2f} in DeepNorm, whose every sub-block ends in a norm. The "
        "last block's FFN-W2 gradient over the first block's is "
        + ", ".join(f"{lof[p]:.2f} ({_label(p)})" for p in lof)
        + ": "
        + (
            "the placements that never normalize the stream give their early blocks the "
            "larger gradients"
            if all(lof[p] < 1 for p in ("pre", "sandwich", "olmo2"))
            else "the placements that never normalize the stream do **not** all give their "
            "early blocks the larger gradients"
        )
        + ", the two that normalize it keep them "
        + ("level." if all(0.5 <= lof[p] <= 2 for p in ("post", "deepnorm")) else "uneven.")
    )


def deepnorm_bounded(upd) -> bool:
    return upd.ratio("deepnorm") <= BOUNDED


def describe_updates(upd) -> str:
    """The output change per SGD step (:class:`UpdateSizes`), in words."""
    lo, hi = upd.depths[0], upd.depths[-1]
    c = upd.change
    smaller = min(c["post"][i] / c["deepnorm"][i] for i in range(len(upd.depths)))
    first = (
        f"From {lo} to {hi} layers, one SGD step changes Post-LN's output by "
        f"{c['post'][0]:.3g} to {c['post'][-1]:.3g} per unit learning rate, Pre-LN's by "
        f"{c['pre'][0]:.3g} to {c['pre'][-1]:.3g} and DeepNorm's by {c['deepnorm'][0]:.3g} to "
        f"{c['deepnorm'][-1]:.3g}: DeepNorm's change is at least {smaller:.0f}× smaller than "
        "Post-LN's at every depth."
    )
    if deepnorm_bounded(upd):
        return first + (
            f" It grows by only ×{upd.ratio('deepnorm'):.2f} over that range: **bounded**, as "
            "the theorem says."
        )
    return first + (
        f" But it still grows ×{upd.ratio('deepnorm'):.1f} over that range: in this model the "
        "bound is **not** independent of depth. The derivation leaves out the parameters "
        "that are not β-scaled (embeddings, queries, keys, norm gains, biases), which the "
        "step updates too, and everything beyond first order; which of these makes the "
        "difference is not measured here."
    )


def expected_training(res) -> bool:
    """Post-LN fails; every other placement trains."""
    return (not res.run("post").trained) and all(r.trained for r in res.runs if r.label != "post")


def describe_training(res) -> str:
    """The training runs at depth (:class:`TrainResult`), in words."""
    post = res.run("post")
    others = [r for r in res.runs if r.label != "post"]
    losses = ", ".join(f"{_label(r.label)} {r.final_loss:.3f} ({_outcome(r)})" for r in others)
    head = (
        f"At {res.depth} layers with Adam at learning rate {res.lr:g} from the first step, "
        f"Post-LN's loss after {res.steps} steps is {post.final_loss:.3f} (chance "
        f"{res.chance_loss:.2f}): it {_outcome(post)}. The others: {losses}."
    )
    if expected_training(res):
        return head + (
            " **Every placement except Post-LN trains**, DeepNorm included, although its "
            "residual sum is normalized like Post-LN's: the α-weighted residual and the "
            "β-scaled initialization are the whole difference."
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
            + ") and the QK-norm stack trains ("
            + ", ".join(f"{qk[lr].final_loss:.3f}" for lr in rescued)
            + "): **QK-norm widens the range of learning rates that train**, as Wortsman et "
            "al. report."
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
    from ..experiments.since2020_placement import LARGE_MEAN

    e = res.errors
    one = {d: e[d][str(LARGE_MEAN[d])]["one-pass"] for d in e}
    two = {d: e[d][str(LARGE_MEAN[d])]["two-pass"] for d in e}
    wel = {d: e[d][str(LARGE_MEAN[d])]["Welford/Chan"] for d in e}
    f32 = [e[d][str(LARGE_MEAN[d])]["float32 state"] for d in e if d != "float32"]
    return (
        "At the large mean, the one-pass formula's relative error is "
        + ", ".join(f"{one[d]:.2g} in {d}" for d in one)
        + (
            ": **every digit lost** in every dtype. "
            if all(v >= 0.5 for v in one.values())
            else ": not every digit is lost. "
        )
        + "Two-pass keeps "
        + ", ".join(f"{two[d]:.1e} ({d})" for d in two)
        + "; Welford/Chan, whose running mean is rounded at every step, "
        + ", ".join(f"{wel[d]:.1e} ({d})" for d in wel)
        + f". With the row kept in half precision and the statistics in float32 the error "
        f"is at most {max(f32):.0e}: that, not the algorithm alone, is why kernels keep their "
        "statistics in float32."
    )


# --------------------------------------------------------------------------- claims


def _device(preset: str) -> str:
    from ..provenance import device_name

    return device_name("cuda" if preset == "cuda" else "cpu")


@claims_for(CHAPTER)
def check(preset: str | None = None) -> list[Claim]:
    from ..device import preset_name
    from ..experiments import since2020_placement as E

    preset = preset or preset_name()
    dev = _device(preset)
    out = [deepnorm_constants(), deepnorm_update(E.update_sizes(preset), dev)]
    out += [post_fails(E.train_depth(preset), dev)]
    sweep = E.logit_sweep(preset)
    out += [logit_growth(sweep, dev), qk_bound(sweep, dev), qk_lr_range(sweep, dev)]
    prec = E.precision_errors()
    out += [fp16_overflow(prec), one_pass_cancels(prec), float32_state(prec)]
    return out + [model_row(row) for row in MODELS]


def deepnorm_constants() -> Claim:
    from ..placements import deepnorm_alpha, deepnorm_beta
    from ..transformer import GPTConfig, TinyGPT

    depths = (6, 48, 1000)
    sums = [4 * n * deepnorm_beta(n) ** 2 / deepnorm_alpha(n) ** 2 for n in depths]
    # the init scale on the weights: DeepNorm's fc2 std over Post-LN's (same seed)
    n = 12
    deep = TinyGPT(GPTConfig(n_layers=n, placement="deepnorm", d_model=32))
    post = TinyGPT(GPTConfig(n_layers=n, placement="post", d_model=32))
    ratio = float(deep.blocks[0].mlp.fc2.weight.std() / post.blocks[0].mlp.fc2.weight.std())
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
    )


def deepnorm_update(upd, dev: str) -> Claim:
    return Claim(
        id="since2020_placement.deepnorm_update",
        chapter=CHAPTER,
        claim="With DeepNorm's α and β the change of the model's output per update is bounded "
        "independently of the depth",
        source=cite("wang2022deepnet", where="§4"),
        measured=f"RMS output change / lr after one SGD step at init, {upd.depths[0]} → "
        f"{upd.depths[-1]} layers: DeepNorm ×{upd.ratio('deepnorm'):.2f} "
        f"({upd.change['deepnorm'][0]:.3g} → {upd.change['deepnorm'][-1]:.3g}), Post-LN "
        f"({upd.change['post'][0]:.3g} → {upd.change['post'][-1]:.3g})",
        verdict=verdict(deepnorm_bounded(upd), otherwise="depends"),
        device=dev,
        note=""
        if deepnorm_bounded(upd)
        else "much smaller than Post-LN's at every depth, but growing with it: the step also "
        "moves parameters the bound leaves out",
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
        claim="QK-norm lets a small model train at learning rates where it otherwise fails",
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


def fp16_overflow(prec) -> Claim:
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
    )


def one_pass_cancels(prec) -> Claim:
    from ..experiments.since2020_placement import LARGE_MEAN

    e = {d: prec.errors[d][str(LARGE_MEAN[d])] for d in prec.errors}
    parts = [
        v["one-pass"] >= 0.5 and v["two-pass"] < 1e-2 and v["Welford/Chan"] < 0.5
        for v in e.values()
    ]
    return Claim(
        id="since2020_placement.one_pass_cancels",
        chapter=CHAPTER,
        claim="E[x²] − E[x]² loses every digit of the variance when the mean is large against "
        "the spread; the two-pass and Welford/Chan forms do not",
        source=cite("welford1962note") + "; " + cite("chan1979updating"),
        measured="relative error at a large mean (one-pass / two-pass / Welford-Chan): "
        + "; ".join(
            f"{d} (mean {LARGE_MEAN[d]:g}) {v['one-pass']:.2g} / {v['two-pass']:.1e} / "
            f"{v['Welford/Chan']:.1e}"
            for d, v in e.items()
        ),
        verdict=verdict_by_parts(parts),
    )


def float32_state(prec) -> Claim:
    from ..experiments.since2020_placement import LARGE_MEAN

    errs = {
        d: prec.errors[d][str(m)]["float32 state"]
        for d in ("float16", "bfloat16")
        for m in (0.0, LARGE_MEAN[d])
    }
    worst = max(errs.values())
    return Claim(
        id="since2020_placement.float32_state",
        chapter=CHAPTER,
        claim="Half-precision inputs with float32 statistics give the variance to float32 accuracy",
        source=THIS_CHAPTER,
        measured=f"largest relative error, float16 and bfloat16 rows, two-pass in float32: "
        f"{worst:.1e}",
        verdict=verdict(worst < 1e-5),
    )
