"""The sentences of the chapter "Training without normalization" (book/since2020_nonorm.md),
built from its measurements by rules that can fail, so that every branch is unit-tested.

Every verdict over seeds goes through :func:`normedu.seeding.compare` (a difference only when
every seed agrees in sign, or the mean exceeds twice its standard error). The inputs:

- ``D``: the multi-seed record's data (:func:`~normedu.experiments.since2020_nonorm_seeds.
  measure_seeds`): ``D["per_seed"][i]["runs"][variant]["final"]`` and so on.
- ``T``: the speed record's data (:func:`~normedu.experiments.since2020_nonorm_seeds.
  step_speed`): seconds per step of every variant, one value per interleaved round.
"""

from __future__ import annotations

import numpy as np

from ..seeding import compare

#: The tanh fit "bends" the cloud when it explains this much more of its variance than a line.
BEND = 0.02
#: DyT "matches" LayerNorm when its final loss is within this of LayerNorm's (nats per answer
#: token).
MATCH = 0.1
#: A speed ratio counts as faster or slower only beyond 1 ± SPEED.
SPEED = 0.05
#: LayerNorm's stream grows "about linearly" when its later blocks add less than this many
#: times what its earlier blocks add to the variance.
LINEAR = 1.5


def bends(fit) -> bool:
    """True when the tanh fit explains :data:`BEND` more of the variance than a line."""
    return fit.r2_tanh - fit.r2_line > BEND


# --------------------------------------------------------------------------- the record


def values(D, name: str, key: str = "final") -> list[float]:
    """Per-seed ``key`` of variant ``name`` (a diverged run counts at chance level)."""
    return [
        D["chance"] if s["runs"][name][key] is None else s["runs"][name][key] for s in D["per_seed"]
    ]


def spread_text(v, fmt: str = ".2f") -> str:
    """``"a, b, c"``: the per-seed values in seed order."""
    return ", ".join(f"{x:{fmt}}" for x in v)


def n_seeds(D) -> int:
    return len(D["per_seed"])


def trained_count(D, name: str, key: str = "final") -> int:
    """On how many seeds ``name``'s loss is below half of chance."""
    return sum(v < 0.5 * D["chance"] for v in values(D, name, key))


def below_half(D, name: str, key: str = "final"):
    """The rule's verdict on ``name``'s loss against half of chance (sign −1: trained)."""
    return compare(values(D, name, key), 0.5 * D["chance"])


def trained_words(D, name: str, key: str = "final") -> str:
    """ "trained on all n seeds" / "did not train …" / "no verdict …", by the rule."""
    c = below_half(D, name, key)
    return c.words("did not train", "trained", "no verdict on training")


def dyt_vs_layernorm(D, key: str = "final"):
    """DyT's loss (at ``steps``, or ``final_long`` at ``long_steps``) minus LayerNorm's at
    ``steps``, minus :data:`MATCH`: below 0 on every seed means within MATCH of it."""
    d, ln = values(D, "dyt", key), values(D, "layernorm")
    return compare([a - b for a, b in zip(d, ln, strict=True)], MATCH)


def dyt_verdict(D) -> str:
    """``"matches"`` (both trained, and DyT at most :data:`MATCH` above LayerNorm after the
    same steps, by the rule), ``"learns more slowly than"`` (that only given ``long_steps``)
    or ``"does not match"``."""
    if below_half(D, "layernorm").sign >= 0:
        return "does not match"  # no trained reference to match
    if below_half(D, "dyt").sign < 0 and dyt_vs_layernorm(D).sign < 0:
        return "matches"
    long_ok = below_half(D, "dyt", "final_long").sign < 0
    if long_ok and dyt_vs_layernorm(D, "final_long").sign < 0:
        return "learns more slowly than"
    return "does not match"


def none_verdict(D) -> str:
    """``"trains"`` (below half of chance in ``steps``, by the rule), ``"slower"`` (only
    given ``long_steps``) or ``"fails"``."""
    if below_half(D, "none").sign < 0:
        return "trains"
    return "slower" if below_half(D, "none", "final_long").sign < 0 else "fails"


def falling_count(D, name: str, key: str = "falling") -> int:
    """On how many seeds ``name``'s loss was still falling at the end of the run."""
    return sum(bool(s["runs"][name][key]) for s in D["per_seed"])


# --------------------------------------------------------------------------- page sentences


def trained_rule(D, vocab: int) -> str:
    """The page's definition of "trained", with the threshold computed."""
    return (
        "A run counts as **trained** when its final loss, the mean over the last tenth of its "
        f"steps, is below half of chance. Chance is ln(V−2) = {D['chance']:.2f} for "
        f"V = {vocab}: a model that has learned only which tokens can answer (the V−2 content "
        "tokens, never the separator or the padding) and guesses uniformly among them scores "
        f"that; half of it is {0.5 * D['chance']:.2f}. A verdict over seeds follows the "
        "course's rule: a difference from that threshold counts only when every seed agrees, "
        "or when the mean exceeds twice its standard error."
    )


def table(D, labels) -> str:
    """Markdown table: every variant's loss after ``steps`` and ``long_steps``, per seed."""
    n, s1, s2 = n_seeds(D), D["steps"], D["long_steps"]
    rows = [
        f"| variant | loss after {s1} steps ({n} seeds) | trained | "
        f"loss after {s2} steps | trained |",
        "|---|---|---|---|---|",
    ]
    runs = D["per_seed"][0]["runs"]
    for name in (n for n in labels if n in runs):  # the page's order, not the file's
        long = runs[name]["final_long"] is not None
        rows.append(
            f"| {labels[name]} | {spread_text(values(D, name), '.3f')} | "
            f"{trained_count(D, name)} of {n} | "
            + (
                f"{spread_text(values(D, name, 'final_long'), '.3f')} | "
                f"{trained_count(D, name, 'final_long')} of {n} |"
                if long
                else "— | — |"
            )
        )
    return "\n".join(rows)


def describe_comparison(D, depth: int, lr: float) -> str:
    """The verdicts of the comparison over seeds, in words."""
    n, steps, long = n_seeds(D), D["steps"], D["long_steps"]
    head = f"At {depth} blocks, learning rate {lr:g} and no warm-up, over {n} seeds: "
    ln_words = trained_words(D, "layernorm")
    parts = [
        head + f"LayerNorm {ln_words} within {steps} steps, RMSNorm {trained_words(D, 'rmsnorm')}."
    ]
    nv = none_verdict(D)
    vs_ln = compare(values(D, "none"), values(D, "layernorm"))
    if nv == "trains":
        parts.append(f"**Even the stack without any normalization trained** in {steps} steps.")
    else:
        parts.append(
            "**The stack without normalization learns far more slowly**: after "
            f"{steps} steps its loss is "
            + vs_ln.words(
                "above LayerNorm's", "below LayerNorm's", "not distinguishable from LayerNorm's"
            )
            + f" ({spread_text(values(D, 'none'))}; chance {D['chance']:.2f}). "
            + (
                f"Given {long} steps on the same stream of batches it "
                f"{trained_words(D, 'none', 'final_long')}: leaving the norm out slowed "
                "training badly at this depth; it did not stop it."
                if nv == "slower"
                else f"Even given {long} steps it did not train on every seed."
            )
        )
    rz_ln = compare(values(D, "rezero"), values(D, "layernorm"))
    parts.append(
        f"ReZero, with no norm at all, ends the {steps} steps with losses "
        f"{spread_text(values(D, 'rezero'))}, "
        + rz_ln.words(
            "above LayerNorm's", "below LayerNorm's", "not distinguishable from LayerNorm's"
        )
        + f"; given {long} steps it {trained_words(D, 'rezero', 'final_long')}."
    )
    word = dyt_verdict(D)
    c80, c_long = dyt_vs_layernorm(D), dyt_vs_layernorm(D, "final_long")
    above, within = f"more than {MATCH} above it", f"within {MATCH} of it"
    dyt_text = (
        f"DyT's losses after {steps} steps are {spread_text(values(D, 'dyt'))}, against "
        f"LayerNorm's {spread_text(values(D, 'layernorm'), '.3f')}: "
        + c80.words(above, within)
        + (
            f", and still falling at the end on {falling_count(D, 'dyt')} of {n} seeds"
            if falling_count(D, "dyt")
            else ""
        )
        + f". Given {long} steps DyT reaches {spread_text(values(D, 'dyt', 'final_long'), '.3f')}"
        f" ({c_long.words(above, within)}, LayerNorm's loss after {steps} steps being the "
        "reference). With the default α₀ = 0.5 and LayerNorm's learning rate, DyT "
        f"**{word}** LayerNorm here."
    )
    parts.append(dyt_text)
    return " ".join(parts)


def describe_scalar(D) -> str:
    """DyT's slow start against the two ways to scale its inputs up: α₀ and the embedding
    scalar, from the record's runs and its measurements at initialization."""
    n, steps = n_seeds(D), D["steps"]
    init = [s["init"] for s in D["per_seed"]]
    dyt_in = [i["dyt"]["branch_input_rms"] for i in init]
    ln_in = [i["layernorm"]["branch_input_rms"] for i in init]
    a1_in = [i["dyt_alpha1"]["branch_input_rms"] for i in init]
    sc_in = [i["dyt_scaled"]["branch_input_rms"] for i in init]
    emb = [i["dyt"]["embedding_rms"] for i in init]
    a1 = [s["dyt_alpha0"]["1"] for s in D["per_seed"]]
    a02 = [s["dyt_alpha0"]["0.2"] for s in D["per_seed"]]
    base, scaled = values(D, "dyt"), values(D, "dyt_scaled")
    bigger = compare(a1, base)
    helps = compare(scaled, base)
    return (
        f"What the measurements say, over {n} seeds. At initialization the stream entering the "
        f"first block has RMS {min(emb):.2f} to {max(emb):.2f}, so $\\alpha_0 x$ is small and "
        "$\\tanh$ nearly linear: the branches of the DyT stack read inputs of RMS "
        f"{min(dyt_in):.2f} to {max(dyt_in):.2f}, those of the LayerNorm stack "
        f"{np.mean(ln_in):.2f}. Raising $\\alpha_0$ from 0.5 to 1 multiplies what the "
        f"branches read by {np.mean(np.divide(a1_in, dyt_in)):.1f} (to {np.mean(a1_in):.2f} on "
        f"average), yet DyT's loss after {steps} steps is then {spread_text(a1)} (chance "
        f"{D['chance']:.2f}), "
        + bigger.words("higher than from α₀ = 0.5", "lower than from α₀ = 0.5")
        + f" ({spread_text(base)}); from α₀ = 0.2 it is {spread_text(a02)}. Zhu et al.'s "
        "learnable scalar after the embedding, which starts at $\\sqrt{D}$ and multiplies the "
        "stream itself (so that the branches add their outputs to a larger stream, as well as "
        f"reading larger inputs: RMS {np.mean(sc_in):.2f} on average), gives "
        f"{spread_text(scaled)} after {steps} steps, "
        + helps.words("higher than plain DyT's", "lower than plain DyT's")
        + ". So larger branch inputs alone do not explain the slow start, or a larger "
        "$\\alpha_0$ would help; what the scalar changes besides, the size of the stream "
        "next to what each branch adds, is where the two differ, and this page has not "
        "isolated which of its effects matters."
    )


def speed_ratios(T, name: str, reference: str) -> list[float]:
    """Per round: ``name``'s steps per second over ``reference``'s (above 1: faster)."""
    s = T["seconds"]
    return [r / t for t, r in zip(s[name], s[reference], strict=True)]


def speed_word(ratios) -> str:
    """The verdict on per-round speed ratios (above 1: faster), by the rule: ``"faster
    than"`` / ``"slower than"`` when beyond 1 ± SPEED, ``"slightly faster than"`` /
    ``"slightly slower than"`` when a difference shows but not beyond SPEED, ``"as fast as"``
    when none does."""
    if compare(ratios, 1 + SPEED).sign > 0:
        return "faster than"
    if compare(ratios, 1 - SPEED).sign < 0:
        return "slower than"
    sign = compare(ratios, 1.0).sign
    return {1: "slightly faster than", -1: "slightly slower than", 0: "as fast as"}[sign]


def norm_share(T) -> float:
    """The share of a LayerNorm step that the norms take: 1 − (no norm's time / LayerNorm's),
    the median over the rounds."""
    return float(np.median([1 - 1 / r for r in speed_ratios(T, "none", "layernorm")]))


def speed_table(T, labels) -> str:
    """Markdown: median CPU ms per step of every variant and its speed against LayerNorm's and
    RMSNorm's (median over the rounds, with their range)."""
    rows = [
        "| variant | CPU ms per step (median) | vs LayerNorm | vs RMSNorm |",
        "|---|---|---|---|",
    ]
    for name in T["variants"]:
        ms = 1000 * float(np.median(T["seconds"][name]))
        cells = []
        for ref in ("layernorm", "rmsnorm"):
            r = speed_ratios(T, name, ref)
            cells.append(f"{np.median(r):.2f}× ({min(r):.2f}–{max(r):.2f})")
        rows.append(f"| {labels[name]} | {ms:.1f} | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


def describe_stream(rms_by_seed) -> str:
    """What the residual stream's RMS at initialization does, over seeds: ``rms_by_seed`` is a
    list (one per seed) of :func:`~normedu.experiments.since2020_nonorm.stream_rms` dicts.

    LayerNorm's rule: the variance an average block adds in the second half of the stack over
    what one adds in the first half, against the ratio of the stream's variance itself between
    the halves. Geometric growth adds in proportion to the variance (the two ratios equal);
    linear growth adds the same whatever the variance (the first ratio near 1)."""
    n = len(rms_by_seed)
    inc_ratio, var_ratio, accel = [], [], []
    for rms in rms_by_seed:
        v = np.square(rms["layernorm"])
        inc = np.diff(v)
        h = len(inc) // 2
        inc_ratio.append(inc[h:].mean() / inc[:h].mean())
        var_ratio.append(v[1:][h:].mean() / v[1:][:h].mean())
        r = np.asarray(rms["none"])
        f = r[1:] / r[:-1]
        h = len(f) // 2
        accel.append(f[h:].mean() - f[:h].mean())
    lin = compare(np.log(inc_ratio), np.log(var_ratio))
    acc = compare(accel)
    ln_text = {
        -1: "the increments vary, but they do not grow with the stream's scale, so the "
        "variance grows about linearly",
        1: "the increments grow with the stream, as in geometric growth",
        0: "the rule cannot tell linear from geometric growth here",
    }[lin.sign]
    return (
        f"Over {n} seeds, a block in the second half of the LayerNorm stack adds "
        f"{min(inc_ratio):.2f} to {max(inc_ratio):.2f} times what one in the first half adds "
        f"to the variance, while the variance itself is {min(var_ratio):.2f} to "
        f"{max(var_ratio):.2f} times larger there; the increments grow "
        + lin.words("more than the variance", "less than the variance")
        + f": {ln_text}. Without a norm, the factor by which each block multiplies the RMS is "
        + acc.words(
            "larger in the second half of the stack than in the first",
            "smaller in the second half of the stack than in the first",
            "no different between the two halves",
        )
        + (": geometric growth that speeds up as the stream grows." if acc.sign > 0 else ".")
    )


def describe_gains(gains_by_seed) -> str:
    """Which branch drives the no-norm stream's acceleration: the gain g² of the attention and
    MLP branches, the mean over the first three blocks against the last three, over seeds
    (``gains_by_seed``: one :func:`~normedu.experiments.since2020_nonorm.branch_gains` dict
    per seed)."""
    n = len(gains_by_seed)
    first = {k: [np.mean(g[k][:3]) for g in gains_by_seed] for k in ("attn", "mlp")}
    last = {k: [np.mean(g[k][-3:]) for g in gains_by_seed] for k in ("attn", "mlp")}
    rise = {k: np.subtract(last[k], first[k]) for k in ("attn", "mlp")}
    c = compare(rise["attn"], rise["mlp"])
    return (
        "Which branch makes it speed up? The gain $g^2$ = Var(branch output) / Var(branch "
        "input) of the attention branches goes from "
        f"{np.mean(first['attn']):.2f} in the first three blocks to {np.mean(last['attn']):.2f} "
        f"in the last three (means over {n} seeds), that of the MLP branches from "
        f"{np.mean(first['mlp']):.2f} to {np.mean(last['mlp']):.2f}: the attention's gain "
        "rises "
        + c.words("more than the MLP's", "less than the MLP's", "about as much as the MLP's")
        + "."
    )


def describe_curve(res, demos, D) -> str:
    """The trained LayerNorm's cloud (seed 0, ``res``; over seeds, ``D``) and the synthetic
    demo (``demos``), in words."""
    fit = res.curve.fit()
    gaps = [s["curve"]["r2_tanh"] - s["curve"]["r2_line"] for s in D["per_seed"]]
    c = compare(gaps, BEND)
    sig = [s["curve"]["sigma_spread"] for s in D["per_seed"]]
    all_gaps = [g for s in D["per_seed"] for g in s["curve"]["r2_gaps"]]
    first = (
        f"In the trained model (seed 0), the final LayerNorm's cloud is fitted by "
        f"{fit.c:.2f}·tanh({fit.alpha:.3g}x) with R² {fit.r2_tanh:.3f}, and by a straight line "
        f"with R² {fit.r2_line:.3f}. Over {len(gaps)} seeds the tanh fit's R² exceeds the "
        f"line's by {spread_text(gaps, '.3f')}: "
        + c.words(f"more than {BEND}", f"less than {BEND}")
        + ". "
    )
    if c.sign > 0:
        first += "The tanh **fits clearly better**: the cloud bends, as Zhu et al. report. "
    else:
        first += (
            "At this size **the cloud is a straight line, not an S**, like the earlier layers "
            "in Zhu et al.'s plots. The reason is in the tokens: their σ differ by a factor of "
            f"only {min(sig):.2f} to {max(sig):.2f} (over the seeds) from the smallest to the "
            "largest in the batch. "
        )
    first += (
        f"Over all {len(all_gaps)} LayerNorms of the {len(gaps)} trained models, the tanh fit "
        f"is better by more than {BEND} in R² in {sum(g > BEND for g in all_gaps)} of them."
    )
    lo, hi = min(demos, key=lambda d: d.log_spread), max(demos, key=lambda d: d.log_spread)
    second = (
        f"With synthetic tokens (seed 0) the bend appears as the tokens' scales spread: at "
        f"spread {lo.log_spread:g} the R² of tanh and line are {lo.fit.r2_tanh:.3f} and "
        f"{lo.fit.r2_line:.3f}, at spread {hi.log_spread:g} {hi.fit.r2_tanh:.3f} and "
        f"{hi.fit.r2_line:.3f} (claim `nonorm.s_mechanism` checks five seeds)."
    )
    return first + "\n\n" + second


def grad_spreads(D, name: str) -> list[float]:
    """Per seed: how many times the largest block's gradient at initialization exceeds the
    smallest's."""
    return [max(g) / min(g) for g in (s["runs"][name]["grad_init"] for s in D["per_seed"])]


def describe_gradients(D) -> str:
    """The gradient profiles at initialization over seeds, and what they cannot say."""
    n = n_seeds(D)
    spread = {k: grad_spreads(D, k) for k in ("none", "layernorm", "dyt")}
    logs = {k: np.log(v) for k, v in spread.items()}
    none_ln = compare(logs["none"], logs["layernorm"])
    dyt_ln = compare(logs["dyt"], logs["layernorm"])

    def rng(v):
        return f"×{min(v):.3g} to ×{max(v):.3g}"

    return (
        f"At initialization, over {n} seeds, the gradient varies across the blocks by "
        f"{rng(spread['none'])} without a norm, {rng(spread['layernorm'])} with LayerNorm and "
        f"{rng(spread['dyt'])} with DyT (ReZero's is flat by construction; "
        "{numref}`fig-nonorm-grads` shows seed 0). Without a norm the profile is "
        + none_ln.words("steeper than LayerNorm's", "flatter than LayerNorm's")
        + "; DyT's is "
        + dyt_ln.words("steeper than LayerNorm's", "flatter than LayerNorm's")
        + ". What the profiles cannot tell by themselves is why a stack is slow: Adam divides "
        "each parameter's step by the running size of that parameter's own gradient, so the "
        "scale of a gradient does not set the size of a step, and this page has not tested "
        "whether the profile's shape does."
    )


def describe_speed(T) -> str:
    """The common claim about DyT's speed against the record timed alone."""
    vs_rms = speed_ratios(T, "dyt", "rmsnorm")
    vs_ln = speed_ratios(T, "dyt", "layernorm")
    none = speed_ratios(T, "none", "layernorm")
    n = len(vs_rms)
    return (
        "```{admonition} A common claim\n:class: warning\n"
        '*"DyT is faster than the norm it replaces."* Zhu et al. time LLaMA 7B with '
        "RMSNorm or with DyT in its place on one GPU: with nothing compiled a training step "
        "takes 8.2% less time with DyT; with the norms compiled the two take the same time, "
        'and they conclude that DyT "offers no speedup over models with normalization layers '
        'when properly compiled/optimized" (claim `nonorm.dyt_speed`). Here, over '
        f"{n} interleaved rounds, a whole eager training step with DyT ran at "
        f"{min(vs_rms):.2f}× to {max(vs_rms):.2f}× RMSNorm's speed (median "
        f"{np.median(vs_rms):.2f}×) and {np.median(vs_ln):.2f}× LayerNorm's: by the rule, "
        f"DyT is **{speed_word(vs_rms)}** RMSNorm and **{speed_word(vs_ln)}** LayerNorm"
        + (
            f' ("slightly": a difference the rule finds, but not one beyond {SPEED:.0%}). '
            if "slightly" in speed_word(vs_rms) + speed_word(vs_ln)
            else f" (faster or slower would need a difference beyond {SPEED:.0%}). "
        )
        + "Those norms are the course's own, written out of elementary tensor operations and "
        "not compiled. At this size the norms "
        f"take {norm_share(T):.0%} of a LayerNorm step (the stack without them steps "
        f"{np.median(none):.2f}× as fast); per token a norm costs a number of operations "
        "proportional to the width D, the matrix products one proportional to D², so in a "
        "wider model the norms' share, and any difference between them, shrinks. A speed "
        "claim is a claim about an implementation on a machine.\n```"
    )
