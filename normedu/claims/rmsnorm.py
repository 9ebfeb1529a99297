"""Claims of the RMSNorm chapter (book/rmsnorm.md), checked on the chapter's own runs.

Also :func:`describe_ablation`, the page's sentence on the re-centring ablation, built here
from the result so both of its branches are unit-tested.
"""

from __future__ import annotations

import math

from .. import seeding
from ..claim import Claim, cite, claims_for, verdict, verdict_by_parts

CHAPTER = "rmsnorm"
#: A claim this course states without a primary source is attributed to its chapter.
ARTICLE = "this course, chapter 'RMSNorm'"
NOTES = ARTICLE
PAPER = cite("zhang2019root")
#: Zhang and Sennrich's abstract (arXiv 1910.07467 / NeurIPS 2019): their own words for the
#: three claims the page attributes to them.
ZS_HYPOTHESIS = (
    "we hypothesize that re-centering invariance in LayerNorm is dispensable and propose root "
    "mean square layer normalization, or RMSNorm"
)
ZS_SPEED = (
    "RMSNorm achieves comparable performance against LayerNorm but reduces the running time by "
    "7%∼64% on different models"
)
ZS_PRMS = (
    "We also present partial RMSNorm, or pRMSNorm where the RMS is estimated from p% of the "
    "summed inputs without breaking the above properties"
)

#: Which models use RMSNorm, per each model's paper and, where the paper does not name its
#: norm, the reference code the model was trained or released with: (id, model, source,
#: verdict, what the source says). "cited": the source names or computes RMSNorm; "not
#: reproduced": the source does not support the claim (it describes the norm without saying
#: RMSNorm, nor whether the mean is subtracted); the last field says what it does say. The
#: source's own words, where this course has read them, are in :data:`MODEL_QUOTES`.
MODELS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "llama",
        "LLaMA",
        cite("touvron2023llama"),
        "cited",
        "pre-normalization with the RMSNorm function of Zhang & Sennrich",
    ),
    (
        "llama2",
        "LLaMA 2",
        cite("touvron2023llama2"),
        "cited",
        "keeps LLaMA's pre-normalization with RMSNorm",
    ),
    (
        "t5",
        "T5",
        cite("raffel2020exploring") + "; " + cite("mesh_tensorflow", where="transformer.py"),
        "cited",
        "the paper: a simplified layer norm that only rescales the activations and adds no "
        "bias, without the name RMSNorm; the Mesh TensorFlow code it was trained with computes "
        "x·rsqrt(mean(x²) + ε)·scale, no mean, no bias (sublayer_rms_norm), and keeps the "
        "older scope name layer_norm for checkpoint compatibility (sublayer_legacy_rms_norm)",
    ),
    (
        "palm",
        "PaLM",
        cite("chowdhery2023palm"),
        "not reproduced",
        "layer norms without biases; the paper never says RMSNorm, nor whether the mean is "
        "subtracted",
    ),
    (
        "gemma",
        "Gemma",
        cite("gemma2024", "gemma_pytorch", "gemma2_2024"),
        "cited",
        "the report: RMSNorm on both the input and the output of each sub-layer in its first "
        "arXiv version, on the input in a later one; the "
        "reference code (GemmaDecoderLayer) normalizes only the sub-layer inputs (before "
        "attention, before the MLP) and the final output; norms on the sub-layer outputs come "
        "with Gemma 2 (Gemma2DecoderLayer)",
    ),
    (
        "mistral",
        "Mistral 7B",
        cite("jiang2023mistral") + "; " + cite("mistral_inference", where="one_file_ref.py"),
        "cited",
        "the paper does not name its norm; the reference code applies RMSNorm "
        "(x·rsqrt(mean(x²) + ε)·weight) before attention (attention_norm), before the "
        "feed-forward layer (ffn_norm) and to the final output (norm)",
    ),
    (
        "deepseek",
        "DeepSeek LLM",
        cite("deepseek2024llm"),
        "cited",
        "follows LLaMA: Pre-Norm with RMSNorm",
    ),
)

#: model id -> (quote, where it stands) for the rows of :data:`MODELS` whose source's exact
#: words this course has read; a row without one shows none (no paraphrase in quotes).
MODEL_QUOTES: dict[str, tuple[str, str]] = {
    "llama": (
        "we normalize the input of each transformer sub-layer, instead of normalizing the "
        "output. We use the RMSNorm normalizing function",
        "§2.2, Pre-normalization",
    ),
    "llama2": (
        "We adopt most of the pretraining setting and model architecture from Llama 1.",
        "§2.2",
    ),
    # The rows that cite code quote the code (its words are what the row rests on).
    "t5": (
        'def sublayer_rms_norm(x, layer_stack, context, epsilon=1e-6, name="rms_norm"): '
        '"""RMS normalization.',
        "Mesh TensorFlow, transformer.py, sublayer_rms_norm",
    ),
    "mistral": (
        "self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps) "
        "self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)",
        "one_file_ref.py, TransformerBlock.__init__",
    ),
}


#: The ablation's verdict: the re-centring norm "trails" the re-scaling norms when it is
#: below both by the seed rule (:func:`normedu.seeding.compare`) and by WORSE (a fraction of
#: test accuracy) or more on average.
WORSE = 0.10
#: The seed rule in words, as the page states it.
RULE = (
    "a difference counts only if every seed agrees in sign or the mean difference exceeds "
    "twice its standard error"
)
#: A run's training loss is "still falling" when its last epoch's mean is more than this
#: fraction below the epoch before.
STILL_FALLING = 0.01


def _points(values) -> str:
    return ", ".join(f"{100 * v:+.1f}" for v in values)


def describe_ablation(res) -> str:
    """The re-centring ablation (:class:`AblationResult`) in words, for the page: the means,
    how long the runs trained, and the verdicts of :func:`ablation_verdicts`, each with its
    per-seed differences. Every verdict is worded by the seed rule, so the words are the same
    for any seeds that give the same conclusion (only numbers differ)."""
    good, bad = min(res.size.gains), max(res.size.gains)
    n = len(res.size.seeds)
    parts = []
    for gain, when in ((good, "well-scaled"), (bad, "badly scaled")):
        m = {k: res.mean(gain, k) for k in ("layernorm", "rmsnorm", "center", "none")}
        parts.append(
            f"With the {when} initialization (gain {gain:.2g}), mean test accuracy over {n} "
            f"seeds is {m['layernorm']:.1%} with LayerNorm, {m['rmsnorm']:.1%} with RMSNorm, "
            f"{m['center']:.1%} with the norm that only re-centres and {m['none']:.1%} with "
            "no norm."
        )
    parts.append(training_length(res))
    v = ablation_verdicts(res)
    rms = v["rms_vs_ln"]
    diffs = "; ".join(f"gain {g:.2g}: {_points(c.values)}" for g, c in rms.items())
    if v["recentre_harmless"]:
        parts.append(
            "Dropping the re-centring (RMSNorm) costs nothing here: by the seed rule ("
            + RULE
            + f"), RMSNorm's accuracy is not below LayerNorm's at either gain with {n} seeds "
            f"(RMSNorm − LayerNorm per seed, in points: {diffs})."
        )
    else:
        worse = [g for g, c in rms.items() if c.clear and c.sign < 0]
        parts.append(
            "Dropping the re-centring (RMSNorm) **does** cost accuracy here: at gain "
            + " and ".join(f"{g:.2g}" for g in worse)
            + " RMSNorm's accuracy is below LayerNorm's by the seed rule ("
            + RULE
            + f"; RMSNorm − LayerNorm per seed, in points: {diffs})."
        )
    to_ln, to_none = v["center_vs_ln"], v["center_vs_none"]
    if v["rescale_needed"]:
        parts.append(
            f"Dropping the re-scaling is what hurts: at gain {bad:.2g} the re-centring norm "
            "trails both re-scaling norms by the same rule, by at least "
            f"{100 * v['center_gap']:.1f} points on average (re-centre only − LayerNorm per "
            f"seed: {_points(to_ln.values)}), and it stays closer to no norm at all "
            f"(re-centre only − no norm: {_points(to_none.values)}). This matches Zhang and "
            "Sennrich's hypothesis that the re-scaling is what a norm must keep."
        )
    else:
        parts.append(
            "Dropping the re-scaling does **not** hurt clearly here: at gain "
            f"{bad:.2g} the re-centring norm does not trail both re-scaling norms by the seed "
            f"rule and by {100 * WORSE:.0f} points (re-centre only − LayerNorm per seed, in "
            f"points: {_points(to_ln.values)}), so this run does not support Zhang and Sennrich's "
            "hypothesis."
        )
    return " ".join(parts)


def training_length(res) -> str:
    """How long each ablation run trained and whether its training loss had stopped falling
    (:data:`STILL_FALLING`), in words."""
    runs = [h for by_norm in res.loss.values() for per_seed in by_norm.values() for h in per_seed]
    steps = f"{res.size.epochs} epochs of Adam ({res.steps} steps)"
    if not runs or any(len(h) < 2 for h in runs):
        return f"Each run trained for {steps}."
    falling = [h[-1] < (1 - STILL_FALLING) * h[-2] for h in runs]
    if all(falling):
        state = (
            "every run's training loss was still falling in its last epoch, so these are "
            f"accuracies after {res.steps} steps, not at convergence"
        )
    elif not any(falling):
        state = "every run's training loss had stopped falling by its last epoch"
    else:
        state = (
            f"the training loss was still falling in the last epoch for {sum(falling)} of "
            f"{len(runs)} runs, so these are accuracies after {res.steps} steps"
        )
    return f"Each run trained for {steps}; {state}."


def ablation_verdicts(res) -> dict:
    """The ablation's verdicts by the seed rule (:func:`normedu.seeding.compare`, seeds
    paired: every variant of a seed starts from the same Linear weights).

    - ``rms_vs_ln``: {gain: compare(RMSNorm, LayerNorm)}; ``recentre_harmless``: at no gain is
      RMSNorm clearly below LayerNorm.
    - ``center_vs_ln``, ``center_vs_rms``, ``center_vs_none``: the re-centring norm against
      each, at the largest gain; ``center_gap``: its smaller mean shortfall against the two
      re-scaling norms; ``rescale_needed``: it is clearly below both, by :data:`WORSE` or more
      on average, and closer to no norm than to the re-scaling norms.
    """
    acc = res.acc
    rms_vs_ln = {g: seeding.compare(acc[g]["rmsnorm"], acc[g]["layernorm"]) for g in res.size.gains}
    bad = max(res.size.gains)
    center_vs_ln = seeding.compare(acc[bad]["center"], acc[bad]["layernorm"])
    center_vs_rms = seeding.compare(acc[bad]["center"], acc[bad]["rmsnorm"])
    center_vs_none = seeding.compare(acc[bad]["center"], acc[bad]["none"])
    center_gap = min(-center_vs_ln.mean, -center_vs_rms.mean)
    below_both = all(c.clear and c.sign < 0 for c in (center_vs_ln, center_vs_rms))
    return {
        "rms_vs_ln": rms_vs_ln,
        "recentre_harmless": not any(c.clear and c.sign < 0 for c in rms_vs_ln.values()),
        "center_vs_ln": center_vs_ln,
        "center_vs_rms": center_vs_rms,
        "center_vs_none": center_vs_none,
        "center_gap": center_gap,
        "rescale_needed": below_both
        and center_gap >= WORSE
        and abs(center_vs_none.mean) < center_gap,
    }


def _speed_verdict(savings: dict[str, float], lo: float, hi: float) -> str:
    """confirmed if every implementation saves lo..hi (5 points slack), not reproduced if
    none saves anything, depends otherwise."""
    vals = list(savings.values())
    if all(lo - 0.05 <= s <= hi + 0.05 for s in vals):
        return "confirmed"
    if all(s <= 0 for s in vals):
        return "not reproduced"
    return "depends"


def speed_savings() -> tuple[dict[str, float], tuple[int, int], str]:
    """``({impl: 1 - t_RMS / t_LN}, (N, D), device)`` at the widest shape of the speed record
    (``rmsnorm_layernorm_speed``, :mod:`normedu.experiments.rmsnorm_speed`), which every page
    that states the ratio reads."""
    from ..experiments.rmsnorm import SPEED_SHAPES, speed_run

    res = speed_run(progress=False)
    n, d = max(SPEED_SHAPES, key=lambda s: s[1])
    return (
        {i: 1.0 - res.ratio(i, n, d) for i in ("eager", "textbook", "compiled")},
        (n, d),
        res.device,
    )


@claims_for(CHAPTER)
def check() -> list[Claim]:
    from ..experiments.rmsnorm import worked_example

    ex = worked_example()
    out = [example_rms(ex), example_out(ex), example_mean(ex), params(), *speed(), paper_7_64()]
    out += [recentering(), backward_orthogonal(), mean_square(), *uses()]
    return out + [prms(), torch_eps()]


def example_rms(ex: dict) -> Claim:
    """``ex``: :func:`normedu.experiments.rmsnorm.worked_example`."""
    return Claim(
        id="rmsnorm.example_rms",
        chapter=CHAPTER,
        claim="For x = [2, 4, −1, 3] the RMS is √7.5 ≈ 2.7386",
        source=ARTICLE,
        measured=f"RMS = {ex['rms']:.6f}; √7.5 = {math.sqrt(7.5):.6f}",
        verdict=verdict(abs(ex["rms"] - math.sqrt(7.5)) < 1e-12),
    )


def example_out(ex: dict) -> Claim:
    out4 = [round(float(v), 4) for v in ex["rms_out"]]
    return Claim(
        id="rmsnorm.example_out",
        chapter=CHAPTER,
        claim="RMSNorm([2, 4, −1, 3]) ≈ [0.7303, 1.4606, −0.3651, 1.0954]",
        source=ARTICLE,
        measured=f"{out4} (torch.nn.functional.rms_norm agrees: "
        f"{bool(abs(ex['torch_rms'] - ex['rms_out']).max() < 1e-12)})",
        verdict=verdict(out4 == [0.7303, 1.4606, -0.3651, 1.0954]),
    )


def example_mean(ex: dict) -> Claim:
    return Claim(
        id="rmsnorm.example_mean",
        chapter=CHAPTER,
        claim="The RMSNorm output of that vector is not centred: its mean is 0.7303",
        source=ARTICLE,
        measured=f"mean {ex['rms_out_mean']:.4f} (LayerNorm: {ex['ln_mean']:.1e})",
        verdict=verdict(round(ex["rms_out_mean"], 4) == 0.7303),
    )


def params() -> Claim:
    import torch

    from ..experiments.rmsnorm import param_counts

    pc = param_counts(768)
    return Claim(
        id="rmsnorm.params",
        chapter=CHAPTER,
        claim="torch.nn.RMSNorm has no shift β: D parameters per layer instead of "
        "torch.nn.LayerNorm's 2D",
        source=NOTES,
        measured=f"torch.nn at D = 768: LayerNorm {pc['layernorm']}, RMSNorm {pc['rmsnorm']}",
        verdict=verdict((pc["layernorm"], pc["rmsnorm"]) == (1536, 768)),
        device=f"torch {torch.__version__}",
    )


def speed() -> list[Claim]:
    """rmsnorm.speed_10_15 and rmsnorm.speed_25, on the speed record (measured alone and
    stored, ``make timings``; the fast appendix states the same record)."""
    savings, (n, d), device = speed_savings()
    text = "; ".join(f"{k} {100 * v:+.0f}%" for k, v in savings.items())
    note = (
        "saving = 1 − t_RMS/t_LN, forward, float32, one thread; eager F.rms_norm is not "
        "fused on CPU"
        if "CPU" in device
        else "saving = 1 − t_RMS/t_LN, forward, float32, one thread"
    )
    return [
        Claim(
            id="rmsnorm.speed_10_15",
            chapter=CHAPTER,
            claim="RMSNorm is 10–15% faster than LayerNorm",
            source=ARTICLE,
            measured=f"{n}×{d}: {text}",
            verdict=_speed_verdict(savings, 0.10, 0.15),
            device=device,
            note=note,
        ),
        Claim(
            id="rmsnorm.speed_25",
            chapter=CHAPTER,
            claim="RMSNorm is about 25% cheaper than LayerNorm",
            source=NOTES,
            measured=f"{n}×{d}: {text}",
            verdict=_speed_verdict(savings, 0.20, 0.30),
            device=device,
            note=note,
        ),
    ]


def paper_7_64() -> Claim:
    return Claim(
        id="rmsnorm.paper_7_64",
        chapter=CHAPTER,
        claim="RMSNorm cuts whole-model running time by 7%–64% across models, at quality "
        "comparable to LayerNorm's",
        source=PAPER,
        measured="whole-model training not reproduced here",
        verdict="cited",
        device="—",
        quote=ZS_SPEED,
        quote_where="Abstract",
    )


def recentering() -> Claim:
    from ..experiments.rmsnorm import recentre_ablation

    abl = recentre_ablation()
    v = ablation_verdicts(abl)
    bad = max(abl.size.gains)
    n = len(abl.size.seeds)
    per_seed = {
        f"{k} accuracy, gain {g:.2g}": [round(a, 4) for a in abl.acc[g][k]]
        for g in abl.size.gains
        for k in abl.acc[g]
    }
    return Claim(
        id="rmsnorm.recentering",
        chapter=CHAPTER,
        claim="Re-centring can be dropped at no cost; re-scaling is what a norm must keep",
        # The paper hypothesizes this; the test of it is this chapter's own ablation.
        # (the paper's part last: the ledger shows the quote right after the source)
        source="this course's ablation, {doc}`"
        + CHAPTER
        + "` (measurement); "
        + cite("zhang2019root")
        + " (hypothesis)",
        measured=f"{abl.size.depth}-layer ReLU MLP on digits, {abl.steps} Adam steps, {n} "
        f"seeds, mean at gain {bad:.2g}: "
        + ", ".join(f"{k} {abl.mean(bad, k):.1%}" for k in abl.acc[bad])
        + "; RMSNorm below LayerNorm by the seed rule at "
        + (
            "no gain"
            if v["recentre_harmless"]
            else "gain "
            + ", ".join(f"{g:.2g}" for g, c in v["rms_vs_ln"].items() if c.clear and c.sign < 0)
        )
        + f"; re-centre only {'below' if v['rescale_needed'] else 'not clearly below'} both "
        f"re-scaling norms at gain {bad:.2g}",
        verdict=verdict_by_parts([v["recentre_harmless"], v["rescale_needed"]]),
        device=_device(),
        note=f"seed rule: {RULE}; 'below both' also needs a mean shortfall of "
        f"{100 * WORSE:.0f} percentage points or more; accuracies after the steps stated, not "
        "at convergence",
        per_seed=per_seed if n > 1 else {},
        quote=ZS_HYPOTHESIS,
        quote_where="Abstract",
    )


def backward_orthogonal() -> Claim:
    from ..experiments.rmsnorm import backward_check

    bc0, bc5 = backward_check(eps=0.0), backward_check(eps=1e-5)
    orth = abs(bc0["x_dot_dx"]).max()
    return Claim(
        id="rmsnorm.backward_orthogonal",
        chapter=CHAPTER,
        claim="RMSNorm's dx does not sum to zero (unlike LayerNorm's); it is orthogonal to x",
        source=ARTICLE,
        measured=f"random x, gamma, dout (D = 8): sum(dx) = {bc0['sum_dx'][0]:.3f}; "
        f"x·dx = {orth:.1e} at eps = 0, {abs(bc5['x_dot_dx']).max():.1e} at eps = 1e-5 "
        f"(closed form {abs(bc5['predicted_x_dot_dx']).max():.1e}); autograd agrees to "
        f"{max(bc0['err_walk'], bc0['err_compact']):.0e}",
        verdict=verdict(orth < 1e-12 and abs(bc0["sum_dx"]).min() > 1e-3),
        device="float64",
        note="exact for eps = 0; with eps > 0, x·dx = rho (g·x) eps / (s + eps)",
    )


def mean_square() -> Claim:
    from ..experiments.rmsnorm import gamma_mean_square

    gm = gamma_mean_square()
    return Claim(
        id="rmsnorm.mean_square",
        chapter=CHAPTER,
        claim="RMSNorm's output has mean square 1",
        source=ARTICLE,
        measured=f"x/RMS(x): {gm['ms_xhat']:.4f}; gamma ⊙ x/RMS(x) with gamma ~ U(0.5, 2): "
        f"{gm['ms_out']:.3f} (mean of gamma² {gm['mean_gamma_sq']:.3f})",
        verdict="depends",
        device="float64",
        note="holds for x/RMS(x), not for the output gamma ⊙ x/RMS(x)",
    )


def uses() -> list[Claim]:
    """rmsnorm.uses.<model>: what the sources of :data:`MODELS` say about each model's norm."""
    return [
        Claim(
            id=f"rmsnorm.uses.{key}",
            chapter=CHAPTER,
            claim=f"{model} uses RMSNorm",
            source=source,
            measured=f"what the source says: {says}",
            verdict=found,
            device="—",
            note=""
            if found == "cited"
            else "not reproduced from the source: it does not say RMSNorm, which is not "
            "the same as saying the model does not use it",
            quote=MODEL_QUOTES.get(key, ("", ""))[0],
            quote_where=MODEL_QUOTES.get(key, ("", ""))[1],
        )
        for key, model, source, found, says in MODELS
    ]


def prms() -> Claim:
    from ..experiments.rmsnorm import prms_check

    pr = prms_check()
    i6 = int(abs(pr.ps - 0.0625).argmin())
    return Claim(
        id="rmsnorm.prms",
        chapter=CHAPTER,
        claim="pRMSNorm estimates the RMS from p% of the summed inputs (here the first p%) "
        "without breaking RMSNorm's properties",
        source=PAPER,
        measured=f"p = 6.25%: median RMS error {100 * pr.rel_err_equal[i6]:.1f}% for features "
        f"of equal scale, {100 * pr.rel_err_unequal[i6]:.0f}% for unequal scales; time "
        f"{pr.time_ratio[i6]:.2f}× the full reduction (eager torch)",
        verdict="depends",
        device=_device(),
        note="the re-scaling invariance holds for any p; how close the output is to "
        "RMSNorm's depends on how representative the first p% of features are",
        quote=ZS_PRMS,
        quote_where="Abstract",
    )


def half_eps_check(d: int = 64, rms: float = 1e-3, seed: int = 0) -> dict[str, dict]:
    """Which eps ``torch.rms_norm(x, (d,), eps=None)`` adds, for float16 and bfloat16 ``x``.

    ``x``: seeded N(0, 1) rows rescaled to RMS ``rms``, then cast. Small enough that the eps
    matters: ``rms² = 1e-6`` against ``finfo(float32).eps ≈ 1.2e-7`` and
    ``finfo(float16).eps ≈ 9.8e-4``. Returns, per dtype name: ``out_rms`` (of torch's
    output), ``module_diff`` (largest difference of ``torch.nn.RMSNorm(d)``'s output from
    it), and for each candidate eps (``"float32"``: ``finfo(float32).eps``, ``"input"``:
    ``finfo(x.dtype).eps``) the output RMS of ``x·rsqrt(mean(x²) + eps)`` computed in float32
    and cast back (``rms_<name>``) and its largest difference from torch's output
    (``diff_<name>``).
    """
    import torch

    gen = seeding.generator(seed)
    z = torch.randn(8, d, generator=gen, dtype=torch.float64)
    z = z / z.pow(2).mean(-1, keepdim=True).sqrt()
    out = {}
    for dt in (torch.float16, torch.bfloat16):
        x = (rms * z).to(dt)
        got = torch.rms_norm(x, (d,), eps=None).double()
        xf = x.float()
        with torch.no_grad():
            module = torch.nn.RMSNorm(d, dtype=dt)(x).double()
        row = {
            "out_rms": float(got.pow(2).mean().sqrt()),
            "module_diff": float((module - got).abs().max()),
        }
        for name, eps in (
            ("float32", torch.finfo(torch.float32).eps),
            ("input", torch.finfo(dt).eps),
        ):
            ref = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dt).double()
            row[f"rms_{name}"] = float(ref.pow(2).mean().sqrt())
            row[f"diff_{name}"] = float((got - ref).abs().max())
        out[str(dt).removeprefix("torch.")] = row
    return out


def torch_eps() -> Claim:
    import torch

    from ..experiments.rmsnorm import eps_check

    tiny = next(r for r in eps_check() if r["scale"] == 1e-3)
    eps_default = torch.finfo(torch.float32).eps
    predicted = 1e-3 / math.sqrt(1e-6 + eps_default)
    half = half_eps_check()
    # A float16 output is exact to ~1e-3 near 1: torch's output must match the float32-eps
    # formula to that, and differ from the finfo(input dtype) formula by far more.
    half_ok = all(
        r["diff_float32"] < 1e-2 and r["diff_input"] > 0.5 and r["module_diff"] < 1e-2
        for r in half.values()
    )
    return Claim(
        id="rmsnorm.torch_eps",
        chapter=CHAPTER,
        claim="torch.nn.RMSNorm's default eps (eps=None) is the machine epsilon of the type it "
        "computes in: torch.finfo(float32).eps ≈ 1.19e-7 for float32, float16 and bfloat16 "
        "inputs (not finfo of the input dtype), not the 1e-5/1e-6 of model configs",
        source="PyTorch documentation, torch.nn.RMSNorm (torch ≥ 2.4)",
        quote="a value added to the denominator for numerical stability. Default: "
        "torch.finfo(x.dtype).eps",
        quote_where="Parameters, eps",
        measured=f"float32 input of RMS 1e-3 → output RMS {tiny['default']:.3f} (default), "
        f"{tiny['1e-6']:.3f} (1e-6), {tiny['1e-5']:.3f} (1e-5); predicted for the default: "
        f"{predicted:.3f}. "
        + "; ".join(
            f"{name} input of RMS 1e-3: torch.rms_norm(eps=None) output RMS {r['out_rms']:.3f}; "
            f"with finfo(float32).eps {r['rms_float32']:.3f} (max difference "
            f"{r['diff_float32']:.1e}), with finfo({name}).eps {r['rms_input']:.3f}"
            for name, r in half.items()
        )
        + " (torch.nn.RMSNorm's output equals torch.rms_norm's to "
        + f"{max(r['module_diff'] for r in half.values()):.1e})",
        verdict=verdict(abs(tiny["default"] - predicted) < 1e-3 and half_ok),
        device=f"torch {torch.__version__}",
        note="the documentation writes torch.finfo(x.dtype).eps; float16 and bfloat16 inputs "
        "are computed in float32 and get float32's eps (float64 inputs get float64's)",
    )


def _device() -> str:
    from ..provenance import device_name

    return device_name("cpu")
