"""Claims of the Pre-Norm vs Post-Norm chapter (book/prepost.md), on its cached runs.

The sentences the chapter shows under its measurements live in
:mod:`normedu.claims.prepost_words` and are re-exported here, where the chapter finds them.
"""

from __future__ import annotations

from ..claim import Claim, cite, claims_for, device_for, verdict, verdict_by_parts
from .prepost_warmup import (  # noqa: F401  (re-exported for the chapter and the tests)
    cell_losses,
    describe_grid,
    describe_stability,
    describe_sweep,
    learning_count,
    pre_spreads,
    trained_table,
    warmup_findings,
)
from .prepost_words import (  # noqa: F401  (re-exported for the chapter and the tests)
    DIRECTION_SEEDS,
    GROWS,
    SLOPE_TOL,
    _few_seeds,
    _seeds,
    agrees,
    describe_embedding_switch,
    describe_init,
    describe_scaling,
    describe_wide,
    matches_reference,
    num,
    post_grows_rule,
    post_wide_growth,
    post_wide_verdict,
    trend,
)

CHAPTER = "prepost"
#: A claim this course states without a primary source is attributed to its chapter.
THIS_CHAPTER = "this course, chapter 'Pre-Norm vs Post-Norm'"
XIONG = "Xiong et al., 2020 (ICML)"
#: Xiong et al.'s abstract, the words the Post-LN gradient claims rest on.
XIONG_POST_QUOTE = (
    "at initialization, for the original-designed Post-LN Transformer, which places the layer "
    "normalization between the residual blocks, the expected gradients of the parameters near "
    "the output layer are large"
)
TAKASE = "Takase et al., 2023 (Findings of ACL)"


@claims_for(CHAPTER)
def check(preset: str | None = None) -> list[Claim]:
    from ..device import preset_name
    from ..experiments.prepost import init_grad_norms, warmup_sweep, wide_check

    preset = preset or preset_name()
    dev = device_for(preset)
    init = init_grad_norms(preset)
    sweep = warmup_sweep(preset)
    stab = sweep.stability()
    out = [pre_flat_2x(init, stab, dev), post_grows(init, dev)]
    out += [stream_growth(init, dev), last_layer_scaling(init, dev)]
    out += [warmup(sweep, dev), shallow_fine(sweep, dev), post_depth_limit()]
    out += [ln_count(), post_quality(), who_uses()]
    wide = wide_check(preset)
    return out + [post_grows_wide(wide), pre_flat_wide(wide)]


def pre_flat_2x(init, stab, dev: str) -> Claim:
    """``init``, ``stab``: the chapter's :func:`~normedu.experiments.prepost.init_grad_norms`
    and :func:`~normedu.experiments.prepost.train_stability` results.

    The claim is about trained models, so the spread after training (one per seed, judged
    against 2 by :func:`normedu.seeding.compare`) decides the verdict; the spreads at
    initialization are reported beside it, not tested against it."""
    from ..seeding import compare

    pre_spreads_init = {d: init.spread("pre", d) for d in init.depths}
    ends = pre_spreads(stab)
    if len(ends) >= 2:
        sign = compare(ends, 2.0).sign
        found = {-1: "confirmed", 1: "not reproduced"}.get(sign, "depends")
    else:  # no gradients recorded after training, or one seed: nothing decides it
        found = "depends"
    return Claim(
        id="prepost.pre_flat_2x",
        chapter=CHAPTER,
        claim="In a trained Pre-Norm Transformer the per-layer gradient norm varies by less "
        "than a factor of 2 from the first layer to the last",
        source=THIS_CHAPTER,
        measured=f"max/min of the FFN-W2 gradient norm over layers after training "
        f"({stab.depth} layers, Pre-LN without warm-up, last step, {len(ends)} seeds): "
        + ", ".join(f"{x:.2f}" for x in ends)
        + "; at init: "
        + ", ".join(f"{d} layers {s:.1f}" for d, s in pre_spreads_init.items()),
        verdict=found,
        device=dev,
        note="tested by the spreads after training against 2, by the course's seed rule; the "
        "spreads at initialization are context, not the test: there the gradient shrinks from "
        "the input side to the output side, as NormFormer (Shleifer et al., 2021) also reports "
        "for Pre-LN",
        per_seed={"max/min after training": ends} if len(ends) >= 2 else {},
    )


def post_grows(init, dev: str) -> Claim:
    post_lof = {d: init.last_over_first("post", d) for d in init.depths}
    return Claim(
        id="prepost.post_grows",
        chapter=CHAPTER,
        claim="At initialization Post-LN gradients are largest near the output layers "
        "(grow with the layer index)",
        source=f"{XIONG}, Fig. 3",
        measured="last/first layer FFN-W2 gradient norm, Post-LN: "
        + ", ".join(f"{d} layers {post_lof[d]:.2f}" for d in init.depths)
        + f" (each the mean profile of {init.seeds} initializations)",
        verdict="confirmed" if post_grows_rule(list(post_lof.values())) else "not reproduced",
        device=dev,
        note="our small GELU stack with Xavier init; their model was a 6+6-layer "
        "translation Transformer; confirmed only if the ratios over the depths are above 1 by "
        "the course's seed rule",
        quote=XIONG_POST_QUOTE,
        quote_where="Abstract",
    )


def _expected():
    from ..experiments.prepost import EXPECTED_SLOPES

    return EXPECTED_SLOPES


def stream_growth(init, dev: str) -> Claim:
    """``init``: the chapter's :func:`~normedu.experiments.prepost.init_grad_norms` result."""
    exp = _expected()["stream"]
    deepest = max(init.depths)
    pre, post = init.stream_slope("pre"), init.stream_slope("post")
    return Claim(
        id="prepost.stream_growth",
        chapter=CHAPTER,
        claim="At initialization the squared norm of a Pre-LN residual stream grows linearly "
        "with the layer index (||x_l|| ~ l^0.5); in Post-LN every block ends at the norm's scale",
        source=f"{XIONG}, §3 (the lemma behind Theorem 1)",
        measured=f"log-log slope of ||x_l|| against l over the {deepest} blocks of the deepest "
        f"stack: Pre-LN {num(pre)} (predicted {exp['pre']:.1f}), Post-LN {num(post)} "
        f"(predicted {exp['post']:.1f})",
        verdict=verdict_by_parts([agrees(pre, exp["pre"]), agrees(post, exp["post"])]),
        device=dev,
        note=f"agreement: within {SLOPE_TOL} of the predicted exponent",
    )


def last_layer_scaling(init, dev: str) -> Claim:
    """Tested on the per-token gradient, the quantity the theorem bounds, when the sweep has
    it (older stored results do not: then on the batch gradient)."""
    exp = _expected()["last_layer"]
    pre, post = init.depth_slope("pre"), init.depth_slope("post")
    measured = (
        "log-log slope of the last layer's gradient against L ("
        + ", ".join(map(str, init.depths))
        + " layers)"
    )
    if init.has_tokens:
        t_pre, t_post = init.token_slope("pre"), init.token_slope("post")
        measured += (
            f", per token: Pre-LN {num(t_pre)} (predicted {exp['pre']:.1f}), Post-LN "
            f"{num(t_post)} (predicted {exp['post']:.1f}); batch gradient: Pre-LN {num(pre)}, "
            f"Post-LN {num(post)}"
        )
        tested = (t_pre, t_post)
    else:
        measured += (
            f": Pre-LN {num(pre)} (predicted {exp['pre']:.1f}), Post-LN {num(post)} "
            f"(predicted {exp['post']:.1f})"
        )
        tested = (pre, post)
    return Claim(
        id="prepost.last_layer_scaling",
        chapter=CHAPTER,
        claim="Last-layer FFN-W2 gradient at init: bounded independently of the depth L for "
        "Post-LN, shrinking like 1/√L for Pre-LN",
        source=f"{XIONG}, Theorem 1",
        quote=XIONG_POST_QUOTE,
        quote_where="Abstract (Theorem 1 in §3 states the bounds)",
        measured=measured,
        verdict=verdict_by_parts([agrees(tested[0], exp["pre"]), agrees(tested[1], exp["post"])]),
        device=dev,
        note=f"agreement: within {SLOPE_TOL} of the predicted exponent, "
        + ("for the per-token gradient the theorem is about; " if init.has_tokens else "")
        + "a Post-LN slope above 0 that went on would break a bound independent of L; the "
        "warm-up argument only needs the gradient not to shrink with L",
    )


def _k_of_n(sweep, placement: str, lr: float, warmup: int) -> str:
    return f"{sum(r.trained for r in sweep.seed_runs(placement, lr, warmup))} of {sweep.seeds}"


def warmup(sweep, dev: str) -> Claim:
    """``sweep``: the chapter's :func:`~normedu.experiments.prepost.warmup_sweep` result,
    judged at its headline learning rate over its seeds (:func:`warmup_findings`)."""
    f = warmup_findings(sweep)
    lr, w = sweep.lr, f.warmup
    k, m = learning_count([r for x in sweep.warmups for r in sweep.seed_runs("post", lr, x)])
    return Claim(
        id="prepost.warmup",
        chapter=CHAPTER,
        claim="Post-LN needs learning-rate warm-up to train at a high learning rate; Pre-LN "
        "trains without it",
        source=XIONG,
        measured=f"{sweep.depth} layers, Adam, {sweep.steps} steps (Post-LN's loss still "
        f"falling at the end in {k} of {m} runs), "
        f"{sweep.seeds} seeds, learning rate {lr:g}: Post-LN trained without warm-up on "
        f"{_k_of_n(sweep, 'post', lr, 0)} seeds, with {w} warm-up steps on "
        f"{_k_of_n(sweep, 'post', lr, w)}; Pre-LN without warm-up on "
        f"{_k_of_n(sweep, 'pre', lr, 0)}",
        verdict=verdict(f.pattern, otherwise="depends"),
        device=dev,
        note="by the course's seed rule: Post-LN without warm-up ends above half of chance, "
        "warm-up lowers its final loss, Pre-LN without warm-up ends below half of chance"
        + ("" if f.pattern else " (not all three shown)")
        + (
            f"; even with warm-up Post-LN still ends above Pre-LN without it after {sweep.steps} "
            "steps"
            if f.gap > 0
            else ""
        ),
        per_seed={
            "Post-LN final loss, no warm-up": cell_losses(sweep, "post", lr, 0),
            f"Post-LN final loss, warm-up {w}": cell_losses(sweep, "post", lr, w),
            "Pre-LN final loss, no warm-up": cell_losses(sweep, "pre", lr, 0),
        }
        if sweep.seeds >= 2
        else {},
        quote="using a large learning rate on those gradients makes the training unstable. The "
        "warm-up stage is practically helpful for avoiding this problem",
        quote_where="Abstract",
    )


def shallow_fine(sweep, dev: str) -> Claim:
    """Trained on every seed without warm-up at the headline learning rate, by the rule."""
    from ..seeding import compare

    lr, w = sweep.lr, sweep.warmup
    nw = cell_losses(sweep, "post", lr, 0)
    fine = compare(nw, 0.5 * sweep.chance_loss).sign < 0
    return Claim(
        id="prepost.shallow_fine",
        chapter=CHAPTER,
        claim="For shallow models (6–12 layers) both Post-Norm and Pre-Norm work fine",
        source=THIS_CHAPTER,
        measured=f"{sweep.depth}-layer Post-LN at lr {lr:g}, {sweep.steps} steps, "
        f"{sweep.seeds} seeds: trained without warm-up on {_k_of_n(sweep, 'post', lr, 0)}, with "
        f"{w} warm-up steps on {_k_of_n(sweep, 'post', lr, w)}",
        verdict=verdict(fine, otherwise="depends"),
        device=dev,
        note="confirmed only if Post-LN trains without warm-up by the course's seed rule; at "
        "this learning rate it needs warm-up",
        per_seed={"Post-LN final loss, no warm-up": nw} if len(nw) >= 2 else {},
    )


def post_depth_limit() -> Claim:
    return Claim(
        id="prepost.post_depth_limit",
        chapter=CHAPTER,
        claim="Plain Post-LN Transformers stop training beyond about 32 layers",
        source=cite("liu2020understanding", "wang2022deepnet")
        + "; "
        + cite("takase2023b2t", where="Fig. 1"),
        measured="not measured here (needs deep translation models trained at full size); the "
        "sources report plain Post-LN failing at 12 encoder + 12 decoder layers (Liu et al., "
        "WMT'14 En-De) and at 18 + 18 (Takase et al.), but training at 18 + 18 and diverging "
        "at 50 + 50 (Wang et al., WMT-17 En-De)",
        verdict="cited",
        device="—",
        note="no source we checked names 32 layers; the depth at which plain Post-LN fails "
        "depends on the setup (data, learning rate, batch size)",
        quote="the training in Post-LN with deep Transformers, e.g., ten or more layers, often "
        "becomes unstable, resulting in useless models",
        quote_where=f"{TAKASE}, Abstract",
    )


def ln_count() -> Claim:
    from ..transformer import GPTConfig, TinyGPT, count_norms

    n12_pre = count_norms(TinyGPT(GPTConfig(n_layers=12, placement="pre")))
    n12_post = count_norms(TinyGPT(GPTConfig(n_layers=12, placement="post")))
    return Claim(
        id="prepost.ln_count",
        chapter=CHAPTER,
        claim="A 12-layer Pre-Norm Transformer has 25 LayerNorms: 2 per block plus a final one",
        source="Radford et al., 2019 (GPT-2: a norm per sub-block and a final one)",
        measured=f"normedu TinyGPT, 12 layers: Pre-LN {n12_pre}, Post-LN {n12_post} "
        "(no final norm)",
        verdict=verdict(n12_pre == 25),
        quote="Layer normalization [...] was moved to the input of each sub-block [...] and an "
        "additional layer normalization was added after the final self-attention block",
        quote_where="§2.3 (Model)",
    )


def post_quality() -> Claim:
    return Claim(
        id="prepost.post_quality",
        chapter=CHAPTER,
        claim="When its training is stable, Post-LN can reach slightly better final quality",
        source="Liu et al., 2020 (EMNLP); Takase et al., 2023 (Findings of ACL)",
        measured="not measured here (needs full-size training to convergence)",
        verdict="cited",
        device="—",
        quote="Post-LN has also consistently achieved better performance than Pre-LN in "
        "relatively shallow Transformers, e.g., six or fewer layers",
        quote_where=f"{TAKASE}, Abstract",
    )


def who_uses() -> Claim:
    return Claim(
        id="prepost.who_uses",
        chapter=CHAPTER,
        claim="GPT-2, GPT-3 and LLaMA use Pre-Norm (LLaMA with RMSNorm)",
        source="Radford et al., 2019; Brown et al., 2020 (NeurIPS); " + cite("touvron2023llama"),
        measured="architecture descriptions in the papers",
        verdict="cited",
        device="—",
        quote="we normalize the input of each transformer sub-layer, instead of normalizing the "
        "output. We use the RMSNorm normalizing function",
        quote_where="Touvron et al., 2023, §2.2 (Pre-normalization [GPT3])",
    )


def _wide_setting(wide) -> str:
    return f"d_model {wide.size.d_model}, {wide.size.n_layers} layers, {wide.size.seeds} seeds: "


def post_grows_wide(wide) -> Claim:
    """``wide``: the chapter's :func:`~normedu.experiments.prepost.wide_check` result."""
    ref_row, ours_row = wide.get("nn.TransformerEncoderLayer", "post"), wide.get("TinyGPT", "post")
    return Claim(
        id="prepost.post_grows_wide",
        chapter=CHAPTER,
        claim="At initialization Post-LN's FFN-W2 gradient grows toward the output layers, "
        "at the paper's width",
        source=f"{XIONG}, Fig. 3",
        measured=_wide_setting(wide)
        + f"last/first {ref_row.last_over_first:.2f} in torch.nn.TransformerEncoderLayer (seeds "
        + _seeds(ref_row)
        + f"), {ours_row.last_over_first:.2f} in TinyGPT (seeds {_seeds(ours_row)})",
        verdict=post_wide_verdict(wide),
        device=device_for("cpu"),
        note=f"{n} seeds per stack: the direction is not fixed"
        if (n := _few_seeds(wide))
        else "confirmed only if the seeds' ratios of both stacks together are above 1 by the "
        "course's seed rule",
        per_seed={
            "last/first, nn.TransformerEncoderLayer": list(ref_row.seed_ratios),
            "last/first, TinyGPT": list(ours_row.seed_ratios),
        }
        if min(len(ref_row.seed_ratios), len(ours_row.seed_ratios)) >= 2
        else {},
        quote=XIONG_POST_QUOTE,
        quote_where="Abstract",
    )


def pre_flat_wide(wide) -> Claim:
    ref = wide.get("nn.TransformerEncoderLayer", "pre").last_over_first
    ours = wide.get("TinyGPT", "pre").last_over_first
    flat = [trend(ref) == "is flat", trend(ours) == "is flat"]
    return Claim(
        id="prepost.pre_flat_wide",
        chapter=CHAPTER,
        claim="At initialization Pre-LN's gradient norm is the same at every layer",
        source=f"{XIONG}, Fig. 3",
        measured=_wide_setting(wide)
        + f"last/first {ref:.2f} in torch.nn.TransformerEncoderLayer, {ours:.2f} in TinyGPT",
        verdict=verdict_by_parts(flat),
        device=device_for("cpu"),
        note="" if all(flat) else "the gradient shrinks toward the output",
        quote="if the layer normalization is put inside the residual blocks (recently proposed "
        "as Pre-LN Transformer), the gradients are well-behaved at initialization",
        quote_where="Abstract",
    )
