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
    fit_slopes,
    matches_reference,
    num,
    post_grows_by_depth,
    post_grows_rule,
    post_wide_growth,
    post_wide_verdict,
    seeds_above,
    slope_status,
    slope_verdict,
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
#: The version of Takase et al. whose abstract the quotes were read in: the first arXiv
#: version (2022), titled "On Layer Normalizations and Residual Connections in Transformers";
#: the words were checked against that version, not against the Findings of ACL one.
TAKASE_QUOTED = "Takase et al., arXiv:2206.00330v1 (2022), Abstract"


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
    """Confirmed only if, at every depth, Post-LN's last/first ratios over the seeds are above
    1 by the course's rule (:func:`post_grows_by_depth`)."""
    signs = post_grows_by_depth(init)
    up = sum(x > 0 for x in signs.values())
    if init.has_seeds:
        measured = (
            "last/first layer FFN-W2 gradient norm, Post-LN, per seed: "
            + "; ".join(
                f"{d} layers " + ", ".join(f"{x:.2f}" for x in init.seed_last_over_first("post", d))
                for d in init.depths
            )
            + f"; above 1 by the seed rule at {up} of {len(signs)} depths"
        )
        per_seed = (
            {f"last/first, {d} layers": init.seed_last_over_first("post", d) for d in init.depths}
            if init.seeds >= 2
            else {}
        )
    else:
        measured = (
            "last/first layer FFN-W2 gradient norm, Post-LN: "
            + ", ".join(f"{d} layers {init.last_over_first('post', d):.2f}" for d in init.depths)
            + f" (each the mean profile of {init.seeds} initializations)"
        )
        per_seed = {}
    return Claim(
        id="prepost.post_grows",
        chapter=CHAPTER,
        claim="At initialization Post-LN gradients are largest near the output layers "
        "(grow with the layer index)",
        source=f"{XIONG}, Fig. 3",
        measured=measured,
        verdict="confirmed" if up == len(signs) else "not reproduced",
        device=dev,
        note="our small GELU stack with Xavier init; their model was a 6+6-layer "
        "translation Transformer; confirmed only if at every depth the seeds' ratios are above "
        "1 by the course's seed rule",
        per_seed=per_seed,
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
    slopes = {p: fit_slopes(init, "stream", p) for p in ("pre", "post")}
    pre, post = (sum(slopes[p]) / len(slopes[p]) for p in ("pre", "post"))
    above, n = seeds_above(slopes["pre"], exp["pre"]), len(slopes["pre"])
    return Claim(
        id="prepost.stream_growth",
        chapter=CHAPTER,
        claim="At initialization the squared norm of a Pre-LN residual stream grows linearly "
        "with the layer index (||x_l|| ~ l^0.5); in Post-LN every block ends at the norm's scale",
        source=f"{XIONG}, §3 (the lemma behind Theorem 1)",
        measured=f"log-log slope of ||x_l|| against l over the {deepest} blocks of the deepest "
        f"stack{f', mean over {n} seeds' if n > 1 else ''}: Pre-LN {num(pre)} (predicted "
        f"{exp['pre']:.1f}{f'; above it on {above} of {n} seeds' if n > 1 else ''}), Post-LN "
        f"{num(post)} (predicted {exp['post']:.1f})",
        verdict=slope_verdict(slope_status(slopes[p], exp[p]) for p in ("pre", "post")),
        device=dev,
        note=f"agreement: the seeds do not place the slope more than {SLOPE_TOL} from the "
        "predicted exponent, by the course's seed rule; a slope can agree within that and "
        "still sit on one side of the prediction on every seed",
        per_seed={f"stream slope, {p}-LN": slopes[p] for p in ("pre", "post")}
        if len(slopes["pre"]) >= 2
        else {},
    )


def last_layer_scaling(init, dev: str) -> Claim:
    """Tested on the per-token gradient, the quantity the theorem bounds, when the sweep has
    it (older stored results do not: then on the batch gradient)."""
    exp = _expected()["last_layer"]
    batch = {p: fit_slopes(init, "batch", p) for p in ("pre", "post")}
    pre, post = (sum(batch[p]) / len(batch[p]) for p in ("pre", "post"))
    measured = (
        "log-log slope of the last layer's gradient against L ("
        + ", ".join(map(str, init.depths))
        + " layers)"
    )
    if init.has_tokens:
        token = {p: fit_slopes(init, "token", p) for p in ("pre", "post")}
        t_pre, t_post = (sum(token[p]) / len(token[p]) for p in ("pre", "post"))
        measured += (
            f", per token: Pre-LN {num(t_pre)} (predicted {exp['pre']:.1f}), Post-LN "
            f"{num(t_post)} (predicted {exp['post']:.1f}); batch gradient: Pre-LN {num(pre)}, "
            f"Post-LN {num(post)}"
        )
        tested = token
    else:
        measured += (
            f": Pre-LN {num(pre)} (predicted {exp['pre']:.1f}), Post-LN {num(post)} "
            f"(predicted {exp['post']:.1f})"
        )
        tested = batch
    n = len(tested["pre"])
    if n > 1:
        measured += f" (means over {n} seeds, each seed fitted on its own)"
    return Claim(
        id="prepost.last_layer_scaling",
        chapter=CHAPTER,
        claim="Last-layer FFN-W2 gradient at init: bounded independently of the depth L for "
        "Post-LN, shrinking like 1/√L for Pre-LN",
        source=f"{XIONG}, Theorem 1",
        quote=XIONG_POST_QUOTE,
        quote_where="Abstract (Theorem 1 in §3 states the bounds)",
        measured=measured,
        verdict=slope_verdict(slope_status(tested[p], exp[p]) for p in ("pre", "post")),
        device=dev,
        per_seed={f"last-layer slope, {p}-LN": tested[p] for p in ("pre", "post")}
        if n >= 2
        else {},
        note=f"agreement: the seeds do not place the slope more than {SLOPE_TOL} from the "
        "predicted exponent, by the course's seed rule, "
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
        verdict=verdict(f.pattern and bool(f.trains_without), otherwise="depends"),
        device=dev,
        note="confirmed only if, by the course's seed rule, Post-LN without warm-up ends above "
        "half of chance and with warm-up below it, Pre-LN without warm-up ends below it, and "
        "Post-LN trains without warm-up at a lower learning rate of the grid (the contrast "
        "'at a high learning rate' needs)"
        + ("" if f.pattern else "; Post-LN training with warm-up is not shown")
        + (
            ""
            if f.trains_without
            else "; no learning rate of the grid has Post-LN training without warm-up"
        )
        + ("; warm-up lowers Post-LN's final loss" if f.helped else "")
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
    """Not measurable on this page: the claim is about 6-12 layers trained to the end, the grid
    trains 4 layers for a few dozen steps (its cells are reported as context)."""
    f = warmup_findings(sweep)
    lo = min(sweep.lrs)
    k, m = learning_count(sweep.seed_runs("post", lo, 0))
    return Claim(
        id="prepost.shallow_fine",
        chapter=CHAPTER,
        claim="For shallow models (6–12 layers) both Post-Norm and Pre-Norm work fine",
        source=THIS_CHAPTER,
        measured=f"not measured: the claim is about 6–12 layers trained until they work; this "
        f"page trains {sweep.depth} layers for {sweep.steps} steps, too short for that (without "
        "warm-up Post-LN ends below half of chance by the seed rule at "
        + (", ".join(f"lr {x:g}" for x in f.trains_without) if f.trains_without else "no lr")
        + f" of the grid; at lr {lo:g} it trained on {_k_of_n(sweep, 'post', lo, 0)} seeds, its "
        f"loss still falling at the end in {k} of {m})",
        verdict="cited",
        device="—",
        note="Takase et al. (2023) report Post-LN ahead of Pre-LN in Transformers of six or "
        "fewer layers (prepost.post_quality), which presumes both train there",
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
        quote_where=TAKASE_QUOTED,
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
        quote_where=TAKASE_QUOTED,
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
