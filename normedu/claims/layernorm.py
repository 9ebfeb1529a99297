"""Claims of chapter 3 (LayerNorm), checked with the chapter's cached experiments.

One function per claim; :func:`check` runs them in the chapter's order. The experiments and
torch are imported inside the functions: registering the checks must not import torch.
"""

from __future__ import annotations

from ..claim import Claim, claims_for, measured_on, verdict

CH = "layernorm"
#: Claims this course states itself (no paper behind them) are attributed to the chapter.
ART = "this course, chapter 'Layer Normalization'"
PARAMS = ART


@claims_for(CH)
def check() -> list[Claim]:
    from ..experiments import layernorm as L

    w = L.walkthrough((2.0, 4.0, -1.0, 3.0))
    out = [
        walkthrough(w),
        invariant(w),
        eps_default(),
        properties(),
        params_per_layer(),
        identity_init(),
    ]
    counts = L.gpt2_small_counts()
    out += [gpt2_count(counts), gpt2_total(counts), torch_var(), affine_needed()]
    return out + [gamma_values(), gamma_importance(), origin(), small_width()]


def walkthrough(w: dict) -> Claim:
    """``w``: :func:`normedu.experiments.layernorm.walkthrough` of x = [2, 4, -1, 3]."""
    import numpy as np

    expected = np.array([0.0, 1.069, -1.604, 0.535])
    ok = (
        abs(w["mu"] - 2) < 1e-12
        and abs(w["var"] - 3.5) < 1e-12
        and np.allclose(w["x_hat"], expected, atol=5e-4)
        and np.allclose(w["x_hat"], w["reference"], atol=1e-12)
    )
    return Claim(
        id="ln.walkthrough",
        chapter=CH,
        claim="x = [2, 4, -1, 3]: μ = 2, σ² = 3.5, x̂ ≈ [0, 1.069, -1.604, 0.535]",
        source=ART,
        measured=f"μ = {w['mu']:g}, σ² = {w['var']:g}, x̂ = {np.round(w['x_hat'], 4).tolist()}",
        verdict=verdict(ok),
    )


def invariant(w: dict) -> Claim:
    """``w``: as for :func:`walkthrough`."""
    ok = abs(w["x_hat_mean"]) < 1e-12 and abs(w["x_hat_var"] - 1) < 1e-4
    return Claim(
        id="ln.invariant",
        chapter=CH,
        claim="After normalizing, mean ≈ 0 and variance ≈ 1 across features",
        source=ART,
        measured=f"mean {w['x_hat_mean']:.1e}, variance {w['x_hat_var']:.6f} (ε = 1e-5 "
        "makes it < 1)",
        verdict=verdict(ok),
    )


def eps_default() -> Claim:
    import torch

    eps = torch.nn.LayerNorm(8).eps
    return Claim(
        id="ln.eps",
        chapter=CH,
        claim="ε is typically 1e-5",
        source=ART,
        measured=f"torch.nn.LayerNorm default eps = {eps:g}",
        verdict=verdict(eps == 1e-5),
        device="torch " + torch.__version__,
    )


def properties() -> Claim:
    from ..experiments import layernorm as L

    pr = L.properties()
    ok = (
        pr["sample_independent"] == 0
        and pr["train_eval"] == 0
        and pr["length_agnostic"] == 0
        and pr["gradcheck"]
    )
    return Claim(
        id="ln.properties",
        quote=(
            "Unlike batch normalization, layer normalization performs exactly the same "
            "computation at training and test times."
        ),
        quote_where="abstract (arXiv:1607.06450)",
        chapter=CH,
        claim="LayerNorm is sample-independent, identical at train and test, "
        "sequence-length agnostic, differentiable",
        source="Ba et al., 2016",
        extra={"cite": ["ba2016layer"]},
        measured=f"max diffs: alone vs batched {pr['sample_independent']:g}, train vs eval "
        f"{pr['train_eval']:g}, "
        f"length 5 vs 5000 {pr['length_agnostic']:g}; gradcheck passed: {pr['gradcheck']}",
        verdict=verdict(ok),
        device=measured_on(),
    )


def params_per_layer() -> Claim:
    import torch

    n = sum(p.numel() for p in torch.nn.LayerNorm(768).parameters())
    return Claim(
        id="ln.params_per_layer",
        chapter=CH,
        claim="Each LayerNorm has 2·d_model parameters: 1,536 for d_model = 768",
        source=PARAMS,
        measured=f"torch.nn.LayerNorm(768): {n:,} parameters",
        verdict=verdict(n == 1536),
        device="torch",
    )


def identity_init() -> Claim:
    import torch

    ln = torch.nn.LayerNorm(768)
    init_ok = bool((ln.weight == 1).all() and (ln.bias == 0).all())
    return Claim(
        id="ln.identity_init",
        chapter=CH,
        claim="γ is initialized to ones and β to zeros (identity affine map)",
        source=PARAMS,
        measured=f"torch.nn.LayerNorm(768): weight all 1 and bias all 0: {init_ok}",
        verdict=verdict(init_ok),
        device="torch",
    )


def gpt2_count(c: dict) -> Claim:
    """``c``: :func:`normedu.experiments.layernorm.gpt2_small_counts`."""
    return Claim(
        id="ln.gpt2_count",
        chapter=CH,
        claim="GPT-2 small has 25 LayerNorms (2 per block × 12 + 1 final) with 25 × 1,536 = "
        "38,400 parameters",
        source=PARAMS,
        measured=f"GPT-2-small-shaped model built on the meta device: {c['layernorms']} "
        "LayerNorms, "
        f"{c['layernorm_total']:,} parameters ({c['layernorm_share']:.3%} of all)",
        verdict=verdict(c["layernorms"] == 25 and c["layernorm_total"] == 38_400),
        device="meta device (shapes only)",
    )


def gpt2_total(c: dict) -> Claim:
    """``c``: as for :func:`gpt2_count`."""
    from ..experiments import layernorm as L

    return Claim(
        id="ln.gpt2_total",
        chapter=CH,
        claim="GPT-2 small has 117M parameters",
        source="Radford et al., 2019 (GPT-2 paper)",
        measured=f"{c['total']:,} counted from the modules (tied embeddings once); "
        f"{L.gpt2_small_closed_form():,} by hand from the configuration",
        verdict="not reproduced",
        device="meta device (shapes only)",
        note="OpenAI's gpt-2 README: the original parameter counts were wrong due to an "
        "error; small is 124M",
        extra={"cite": ["radford2019language", "openai2019gpt2readme"]},
    )


def torch_var() -> Claim:
    from ..experiments import layernorm as L

    pit = {r["D"]: r for r in L.var_pitfall(dims=(4, 768))}
    ok = pit[4]["max_diff"] > 0.1 and pit[768]["max_diff"] < 1e-2
    return Claim(
        id="ln.torch_var",
        chapter=CH,
        claim="A LayerNorm written with torch.var(x, dim=-1) differs from LayerNorm "
        "(unbiased vs biased variance)",
        source=ART,
        measured=f"max |difference| from F.layer_norm: {pit[4]['max_diff']:.3f} at D = 4, "
        f"{pit[768]['max_diff']:.1e} at D = 768 (variance ratio D/(D-1))",
        verdict=verdict(ok),
        device="float64",
    )


def affine_needed() -> Claim:
    from ..experiments import layernorm as L

    af = L.affine_demo()
    ok = (
        af["no_affine"]["final_loss"] >= af["floor"] - 1e-3
        and af["affine"]["final_loss"] < af["floor"]
    )
    return Claim(
        id="ln.affine_needed",
        chapter=CH,
        claim="Without γ and β the network loses expressiveness (normalization confines "
        "outputs to a narrow band)",
        source=PARAMS,
        measured=f"LayerNorm-ed logits: training loss {af['no_affine']['final_loss']:.3f} "
        "without γ, β "
        f"(provable floor {af['floor']:.3f}) vs {af['affine']['final_loss']:.3f} with them",
        verdict=verdict(ok),
        device=measured_on(),
    )


def gamma_values() -> Claim:
    from ..experiments import layernorm as L

    tg = L.trained_gamma()
    lo, med, hi = tg["quantiles"]
    agrees_center = abs(med - 1) < 0.1
    agrees_tails = tg["share_high"] > 0 and tg["share_low"] > 0
    return Claim(
        id="ln.gamma_values",
        chapter=CH,
        claim="Trained γ cluster around 1; some features reach 1.5–2.0, others 0.3–0.5",
        # source_markdown splits at "; " and links the chapter: no bracket may span the split
        source=f"{PARAMS}; a common description, with no measurement behind it that we know of",
        measured=f"{tg['config']['depth']}-LayerNorm digits MLP: median γ {med:.3f}, 1%–99% "
        "range "
        f"{lo:.2f}–{hi:.2f}; {tg['share_high']:.1%} in [1.5, 2.0], {tg['share_low']:.1%} in "
        "[0.3, 0.5]",
        verdict="depends" if agrees_center and not agrees_tails else verdict(agrees_center),
        device=measured_on(),
        note=""
        if agrees_tails
        else "the centre agrees; the wide tails did not appear in this small model",
    )


def gamma_importance() -> Claim:
    return Claim(
        id="ln.gamma_importance",
        chapter=CH,
        claim="Learned scale factors γ have been used as feature-importance scores",
        source="e.g. Liu et al., 'Network Slimming', ICCV 2017 (BatchNorm γ for channel pruning)",
        extra={"cite": ["liu2017learning"]},
        measured="not measured",
        verdict="cited",
        device="n/a",
    )


def origin() -> Claim:
    return Claim(
        id="ln.origin",
        quote=(
            "we transpose batch normalization into layer normalization by computing the mean and "
            "variance used for normalization from all of the summed inputs to the neurons in a "
            "layer"
        ),
        quote_where="abstract (arXiv:1607.06450)",
        chapter=CH,
        claim="Layer Normalization was introduced by Ba, Kiros & Hinton (2016)",
        source="Ba et al., arXiv:1607.06450, 2016",
        extra={"cite": ["ba2016layer"]},
        measured="citation",
        verdict="cited",
        device="n/a",
    )


def small_width() -> Claim:
    """D = 1: output β (one output); D = 2: two outputs; measured on the digits MLP."""
    import numpy as np

    from ..experiments import layernorm as L

    sw = L.small_width()
    ln = {d: float(np.mean(a)) for d, a in zip(sw["widths"], sw["acc"]["layernorm"], strict=True)}
    no = {d: float(np.mean(a)) for d, a in zip(sw["widths"], sw["acc"]["none"], strict=True)}
    start = L.works_from(sw)
    ok = (
        ln[1] <= sw["largest_class"] + 1e-9
        and ln[2] <= sw["two_largest"] + 1e-9
        and start is not None
        and start <= 16
    )
    return Claim(
        id="ln.small_width",
        chapter=CH,
        claim="LayerNorm stops working at small feature sizes: at D = 1 its output is β, at "
        "D = 2 one of two points",
        source=ART + " (question from CS231n's assignment)",
        measured=f"digits MLP, one hidden layer of width D: test accuracy with LN {ln[1]:.1%} "
        f"at D = 1, {ln[2]:.1%} at D = 2 (no norm: {no[1]:.1%}, {no[2]:.1%}); within 2 "
        f"points of no norm from D = {start} ({len(sw['seeds'])} seeds, means)",
        verdict=verdict(ok),
        per_seed={
            f"{name}, D={d}": list(sw["acc"][key][sw["widths"].index(d)])
            for key, name in (("layernorm", "LayerNorm"), ("none", "no norm"))
            for d in (1, 2)
        },
        device=measured_on(),
        extra={"cite": ["cs231n"]},
    )
