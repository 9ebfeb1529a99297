"""Claims of the Pre-Norm vs Post-Norm chapter (book/prepost.md), on its cached runs.

The sentences the chapter shows under its measurements live in
:mod:`normedu.claims.prepost_words` and are re-exported here, where the chapter finds them.
"""

from __future__ import annotations

import math

from ..claim import Claim, cite, claims_for, device_for, verdict, verdict_by_parts
from .prepost_words import (  # noqa: F401  (re-exported for the chapter and the tests)
    DIRECTION_SEEDS,
    GROWS,
    SLOPE_TOL,
    _few_seeds,
    _seeds,
    agrees,
    describe_embedding_switch,
    describe_grid,
    describe_init,
    describe_scaling,
    describe_stability,
    describe_sweep,
    describe_wide,
    expected_stability,
    matches_reference,
    needs_warmup,
    num,
    post_wide_verdict,
    trained_lrs,
    trend,
)

CHAPTER = "prepost"
#: A claim this course states without a primary source is attributed to its chapter.
THIS_CHAPTER = "this course, chapter 'Pre-Norm vs Post-Norm'"
XIONG = "Xiong et al., 2020 (ICML)"


def _outcome(run) -> str:
    return run.outcome


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
    out += [warmup(sweep, dev), shallow_fine(stab, dev), post_depth_limit()]
    out += [ln_count(), post_quality(), who_uses()]
    wide = wide_check(preset)
    return out + [post_grows_wide(wide), pre_flat_wide(wide)]


def pre_flat_2x(init, stab, dev: str) -> Claim:
    """``init``, ``stab``: the chapter's :func:`~normedu.experiments.prepost.init_grad_norms`
    and :func:`~normedu.experiments.prepost.train_stability` results.

    The claim is about trained models, so the spread after training decides the verdict; the
    spreads at initialization are reported beside it, not tested against it."""
    pre_spreads = {d: init.spread("pre", d) for d in init.depths}
    trained_pre = stab.run("pre", warmup=False)
    end_spread = (
        max(trained_pre.grad_norms_end) / min(trained_pre.grad_norms_end)
        if trained_pre.grad_norms_end
        else math.nan
    )
    return Claim(
        id="prepost.pre_flat_2x",
        chapter=CHAPTER,
        claim="In a trained Pre-Norm Transformer the per-layer gradient norm varies by less "
        "than a factor of 2 from the first layer to the last",
        source=THIS_CHAPTER,
        measured=f"max/min of the FFN-W2 gradient norm over layers after training "
        f"({stab.depth} layers, Pre-LN without warm-up, last step): {end_spread:.2f}; at init: "
        + ", ".join(f"{d} layers {s:.1f}" for d, s in pre_spreads.items()),
        # no gradients recorded after training (NaN): nothing tests the claim, "depends"
        verdict="depends" if math.isnan(end_spread) else verdict(end_spread < 2),
        device=dev,
        note="tested by the spread after training (one run); the spreads at initialization are "
        "context, not the test: there the gradient shrinks from the input side to the output "
        "side, as NormFormer (Shleifer et al., 2021) also reports for Pre-LN",
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
        + ", ".join(f"{d} layers {post_lof[d]:.2f}" for d in init.depths),
        verdict=verdict_by_parts(post_lof[d] > 1.5 for d in init.depths),
        device=dev,
        note="our small GELU stack with Xavier init; their model was a 6+6-layer "
        "translation Transformer",
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
        measured=measured,
        verdict=verdict_by_parts([agrees(tested[0], exp["pre"]), agrees(tested[1], exp["post"])]),
        device=dev,
        note=f"agreement: within {SLOPE_TOL} of the predicted exponent, "
        + ("for the per-token gradient the theorem is about; " if init.has_tokens else "")
        + "a Post-LN slope above 0 that went on would break a bound independent of L; the "
        "warm-up argument only needs the gradient not to shrink with L",
    )


def warmup(sweep, dev: str) -> Claim:
    """``sweep``: the chapter's :func:`~normedu.experiments.prepost.warmup_sweep` result."""
    need = needs_warmup(sweep)
    pre_nw = trained_lrs(sweep, "pre", False)
    pattern = bool(need) and all(lr in pre_nw for lr in need)
    diverged = any(r.diverged for r in sweep.runs if r.placement == "post" and not r.trained)
    return Claim(
        id="prepost.warmup",
        chapter=CHAPTER,
        claim="Post-LN needs learning-rate warm-up to train at a high learning rate; Pre-LN "
        "trains without it",
        source=XIONG,
        measured=f"{sweep.depth} layers, Adam, {sweep.steps} steps, learning rates "
        + ", ".join(f"{x:g}" for x in sweep.lrs)
        + " x warm-up "
        + ", ".join(map(str, sweep.warmups))
        + " steps: Post-LN trains without warm-up at "
        + (", ".join(f"{x:g}" for x in trained_lrs(sweep, "post", False)) or "none")
        + ", with warm-up at "
        + (", ".join(f"{x:g}" for x in trained_lrs(sweep, "post", True)) or "none")
        + "; Pre-LN without warm-up at "
        + (", ".join(f"{x:g}" for x in pre_nw) or "none"),
        verdict=verdict(pattern, otherwise="depends"),
        device=dev,
        note="without warm-up Post-LN stalls on a plateau rather than producing NaNs"
        if pattern and not diverged
        else "",
    )


def shallow_fine(stab, dev: str) -> Claim:
    post_nw, post_w = stab.run("post", False), stab.run("post", True)
    return Claim(
        id="prepost.shallow_fine",
        chapter=CHAPTER,
        claim="For shallow models (6–12 layers) both Post-Norm and Pre-Norm work fine",
        source=THIS_CHAPTER,
        measured=f"{stab.depth}-layer Post-LN at lr {stab.lr:g}: {_outcome(post_nw)} without "
        f"warm-up, {_outcome(post_w)} with it",
        verdict=verdict(post_nw.trained, otherwise="depends"),
        device=dev,
        note="" if post_nw.trained else "fine with warm-up (or a lower learning rate)",
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
    )


def _wide_setting(wide) -> str:
    return f"d_model {wide.size.d_model}, {wide.size.n_layers} layers, {wide.size.seeds} seeds: "


def post_grows_wide(wide) -> Claim:
    """``wide``: the chapter's :func:`~normedu.experiments.prepost.wide_check` result."""
    ref = wide.get("nn.TransformerEncoderLayer", "post").last_over_first
    ours = wide.get("TinyGPT", "post").last_over_first
    return Claim(
        id="prepost.post_grows_wide",
        chapter=CHAPTER,
        claim="At initialization Post-LN's FFN-W2 gradient grows toward the output layers, "
        "at the paper's width",
        source=f"{XIONG}, Fig. 3",
        measured=_wide_setting(wide)
        + f"last/first {ref:.2f} in torch.nn.TransformerEncoderLayer (seeds "
        + _seeds(wide.get("nn.TransformerEncoderLayer", "post"))
        + f"), {ours:.2f} in TinyGPT (seeds {_seeds(wide.get('TinyGPT', 'post'))})",
        verdict=post_wide_verdict(wide),
        device=device_for("cpu"),
        note=f"{n} seeds per stack: the direction is not fixed" if (n := _few_seeds(wide)) else "",
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
    )
