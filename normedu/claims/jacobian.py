"""Claims of the gradient-flow chapter (book/jacobian.md), on its cached runs.

One function per claim; :func:`check` runs them in the chapter's order.
"""

from __future__ import annotations

import numpy as np

from ..claim import Claim, cite, claims_for, verdict
from .jacobian_words import BOUNDED, ORDERS, TRACK, classify, settled, span, spreads, within

CHAPTER = "jacobian"
ARTICLE = "this course, chapter 'Gradient flow and the LayerNorm Jacobian'"
#: Wan et al.'s abstract (NeurIPS 2021 version): their own contributions, the linear-rate
#: convergence to the equilibrium (whose norm is van Laarhoven's, 2017, named an equilibrium
#: by Chiley et al., 2019) and the angular update.
WAN_EQUILIBRIUM = (
    "we introduce the assumptions that can lead to equilibrium state in SMD, and prove "
    "equilibrium can be reached in a linear rate regime under given assumptions"
)
WAN_ANGULAR = (
    "we propose “angular update” as a substitute for effective learning rate to depict the "
    "state of SMD, and derive the theoretical value of angular update in equilibrium state"
)


@claims_for(CHAPTER)
def check(preset: str | None = None) -> list[Claim]:
    from ..device import preset_name
    from ..experiments.gradflow import jacobian_demo

    preset = preset or preset_name()
    demo = jacobian_demo()
    out = [formula(demo), parts(demo), null_space(demo), self_regulation(), xiong_bound()]
    return out + [scale_invariance(), equilibrium(), angular_update(), spread(preset)]


def formula(demo) -> Claim:
    """``demo``: :func:`normedu.experiments.gradflow.jacobian_demo`'s result."""
    return Claim(
        id="jacobian.formula",
        chapter=CHAPTER,
        claim="The Jacobian of LayerNorm (no affine) is (1/σ)(I − 11ᵀ/D − x̂x̂ᵀ/D)",
        source=ARTICLE,
        measured=f"max |closed form − autograd| = {demo.max_abs_error:.1e} (D = {demo.d}, float64)",
        verdict=verdict(demo.max_abs_error < 1e-12),
    )


def parts(demo) -> Claim:
    eff = demo.effects()
    return Claim(
        id="jacobian.parts",
        chapter=CHAPTER,
        claim="Its parts scale the gradient by 1/σ, remove its mean, and remove its "
        "component along x̂",
        source=ARTICLE,
        measured=f"gain of the scaling part {eff['gain_scaling']:.4f} vs 1/σ = "
        f"{1 / demo.sigma:.4f}; mean after centering {eff['mean_after_centering']:.1e} "
        f"(was {eff['mean_of_g']:.3f}); cosine with x̂ {eff['along_x_hat_before']:.3f} → "
        f"{eff['along_x_hat_after_all']:.1e}",
        verdict=verdict(
            abs(eff["gain_scaling"] * demo.sigma - 1) < 1e-12
            and abs(eff["mean_after_centering"]) < 1e-12
            and abs(eff["along_x_hat_after_all"]) < 1e-4
        ),
    )


def null_space(demo) -> Claim:
    return Claim(
        id="jacobian.null_space",
        chapter=CHAPTER,
        claim="J sends 1 exactly to zero and x̂ nearly to zero (eigenvalue (1/σ)·ε/(var + ε)); "
        "its other D − 2 eigenvalues are 1/σ",
        source=ARTICLE + " (derived from the Jacobian formula)",
        measured="eigenvalues " + ", ".join(f"{v:.4f}" for v in demo.eigenvalues) + "; 1/σ = "
        f"{1 / demo.sigma:.4f}",
        verdict=verdict(np.allclose(demo.eigenvalues, demo.predicted_eigenvalues, atol=1e-10)),
        note="along x̂ the eigenvalue is (1/σ)·ε/σ² with σ² = var + ε: exactly 0 only for ε = 0",
    )


def self_regulation() -> Claim:
    from ..experiments import gradflow as G

    sr = G.self_regulation()
    prod = sr.gain * sr.sigma
    return Claim(
        id="jacobian.self_regulation",
        chapter=CHAPTER,
        claim="Large σ compresses gradients and small σ amplifies them (gain 1/σ)",
        source=ARTICLE,
        measured=f"input scale {sr.scales[0]:g} → {sr.scales[-1]:g}: gain "
        f"{sr.gain[0]:.3g} → {sr.gain[-1]:.3g}; gain·σ stays in [{prod.min():.3f}, "
        f"{prod.max():.3f}]",
        verdict=verdict(prod.max() / prod.min() < 1.01 and prod.max() <= 1 + 1e-9),
        note="exact arithmetic: an identity (J = (1/σ)·P, P a projection), checked; gain·σ < 1 "
        "because the centering and decorrelation parts remove 2 of D directions",
    )


def xiong_bound() -> Claim:
    """Cited, not measured here: the Pre-/Post-Norm chapter measures the bound's depth
    scaling (ledger row ``prepost.last_layer_scaling``)."""
    return Claim(
        id="jacobian.xiong_last_ffn",
        chapter=CHAPTER,
        claim="At initialization the gradient of the last FFN sub-layer's weight is bounded by "
        "O(d√(ln d)) in Post-LN and by O(d√(ln d / L)) in Pre-LN, L layers (Theorem 1)",
        source=cite("xiong2020layer", where="Theorem 1"),
        measured="the depth scaling is measured in the Pre-/Post-Norm chapter "
        "(prepost.last_layer_scaling)",
        verdict="cited",
        device="—",
        quote="if the layer normalization is put inside the residual blocks (recently proposed "
        "as Pre-LN Transformer), the gradients are well-behaved at initialization",
        quote_where="Abstract",
        extra={"cite": ["xiong2020layer"]},
    )


def spread(preset: str) -> Claim:
    """jacobian.orders_of_magnitude, on the highway grid of ``preset``: per seed, the rule of
    :func:`normedu.claims.jacobian_words.classify`."""
    from ..experiments.gradflow import SMALL_INIT, highway_grid
    from ..provenance import device_name

    grid = highway_grid(preset)
    per_seed = {k: spreads(grid, k) for k in grid.norms}
    cls = classify(grid)
    ok = cls["no norm+residual"] == cls["no norm, no residual"] == "orders"
    ok = ok and cls["layernorm+residual"] == cls.get(SMALL_INIT) == "bounded"
    return Claim(
        id="jacobian.orders_of_magnitude",
        chapter=CHAPTER,
        claim="Under Xavier init the per-layer gradient norm without LayerNorm varies by orders "
        "of magnitude, with or without residuals; with LayerNorm and residuals it stays well "
        "bounded, and so it does with residuals and no norm under GPT-2's small init (a small "
        "branch init alone keeps a residual stack's gradients even: Fixup, SkipInit, ReZero)",
        source=ARTICLE
        + "; the small-init result: "
        + cite("zhang2019fixup", "de2020batch", "bachlechner2021rezero"),
        measured=f"{grid.depth} layers, {len(per_seed['layernorm+residual'])} seeds, max/min over "
        "layers: " + "; ".join(f"{k} {span(v)}" for k, v in per_seed.items()),
        verdict=verdict(ok, otherwise="depends"),
        device=device_name("cuda" if preset == "cuda" else "cpu"),
        quote="we propose fixed-update initialization (Fixup), an initialization motivated by "
        "solving the exploding and vanishing gradient problem at the beginning of training via "
        "properly rescaling a standard initialization",
        quote_where="Zhang et al. (Fixup), Abstract",
        extra={"cite": ["zhang2019fixup", "de2020batch", "bachlechner2021rezero"]},
        note=f"rule: bounded = below {BOUNDED:g} on every seed, orders of magnitude = above "
        f"{ORDERS:g} on every seed; LayerNorm without residuals is not judged by it, its "
        "spread ranging widely from seed to seed",
        # (one seed, at a test's tiny size, has no spread to store)
        per_seed={k: [round(x, 4) for x in v] for k, v in per_seed.items() if len(v) > 1},
    )


def scale_invariance() -> Claim:
    from ..experiments import scale_invariance as V

    si = V.runs()
    ps = si["per_seed"]
    cos = max(s["cos_max"] for s in ps)
    grew = all(s["grew"] for s in ps)
    return Claim(
        id="jacobian.scale_invariance",
        chapter=CHAPTER,
        claim="The gradient of bias-free weights feeding a normalization is orthogonal to "
        "them, so plain SGD only grows their norm and the effective learning rate η/‖w‖² falls",
        source=cite("ba2016layer", where="§5.2.2")
        + "; "
        + cite("salimans2016weight")
        + "; "
        + cite("vanlaarhoven2017l2", where="Discussion"),
        measured=f"Linear → LayerNorm on the digits, {si['steps']} SGD steps, {len(ps)} seeds: "
        f"max |cos(w, g)| {cos:.0e}; ‖w‖ grew at every step on "
        f"{sum(s['grew'] for s in ps)} of {len(ps)} seeds, "
        f"{span([s['norm_first'] for s in ps], '.2f', '–')} → "
        f"{span([s['plain_final'] for s in ps], '.2f', '–')}; η/‖w‖² fell "
        f"{span([s['plain_eff_lr_fall'] for s in ps], '.1f')}-fold",
        verdict=verdict(cos < 1e-4 and grew),
        device="CPU, float64",
        per_seed={"final ‖w‖ / initial": [s["plain_final"] / s["norm_first"] for s in ps]},
        quote="If no regularization is used, then the norm of the weights tends to increase "
        "over time, and so the effective learning rate decreases.",
        quote_where="van Laarhoven, Discussion",
        note="Ba et al. (§5.2.2, per weight vector of normalized GLMs) and Salimans & Kingma "
        "(gradient orthogonal to the weights, norm growing monotonically) came first",
        extra={"cite": ["ba2016layer", "salimans2016weight", "vanlaarhoven2017l2"]},
    )


def equilibrium() -> Claim:
    from ..experiments import scale_invariance as V

    r = V.runs()
    ps, ctl = r["per_seed"], r["control"]
    ok, words = settled(ps)
    ok_ctl, ctl_words = settled(ctl)
    worst = [100 * s["worst_quarter"] for s in ps]
    return Claim(
        id="jacobian.equilibrium",
        chapter=CHAPTER,
        claim="With weight decay λ the norm of scale-invariant weights settles where "
        "‖w‖⁴ = ηc²/(λ(2 − ηλ)) ≈ ηc²/(2λ), c = ‖g‖·‖w‖ (following c as c changes)",
        source=cite("vanlaarhoven2017l2", "chiley2019online")
        + "; linear-rate convergence: "
        + cite("wan2021spherical"),
        measured=f"η = {r['lr']:g}, λ = {r['wd']:g}, {r['steps']} steps, steps "
        f"{r['tail_start']}–{r['steps']} in quarters: mean ‖w‖ of each quarter against the "
        f"equilibrium of that quarter's rms c, worst quarter {span(worst, '.1f')}% off: {words}; "
        f"control λ = {r['control_wd']:g}: "
        f"{span([100 * s['worst_quarter'] for s in ctl], '.1f')}% off, {ctl_words} (over the "
        f"whole window, bookkeeping: {span([100 * s['gap'] for s in ps], '+.1f')}% and "
        f"{span([100 * s['gap'] for s in ctl], '+.1f')}%)",
        verdict=verdict(ok and not ok_ctl),
        device="CPU, float64",
        note=f"tolerance {TRACK:.0%} per quarter; the whole-window comparison is close to an "
        "identity of the step recursion and is not the test; derived on the page, without "
        "momentum",
        per_seed={
            "worst quarter %": [round(x, 2) for x in worst],
            "control worst quarter %": [round(100 * s["worst_quarter"], 2) for s in ctl],
        },
        quote=WAN_EQUILIBRIUM,
        quote_where="Wan et al., Abstract",
        extra={"cite": ["vanlaarhoven2017l2", "chiley2019online", "wan2021spherical"]},
    )


def angular_update() -> Claim:
    from ..experiments import scale_invariance as V

    r = V.runs()
    turns = [s["turn"]["decay"] for s in r["per_seed"]]
    ok, words = within([t / r["angular_step"] - 1 for t in turns])
    ctl = [s["turn"]["decay"] / r["control_angular_step"] for s in r["control"]]
    return Claim(
        id="jacobian.angular_update",
        chapter=CHAPTER,
        claim="At that equilibrium the weights' direction turns by √(2ηλ) radians per step "
        "(without momentum), whatever c is",
        source=cite("wan2021spherical"),
        measured=f"η = {r['lr']:g}, λ = {r['wd']:g}: rms turn per step over steps "
        f"{r['tail_start']}–{r['steps']} {span(turns)} rad against √(2ηλ) = "
        f"{r['angular_step']:.3f}: {words}",
        verdict=verdict(ok),
        device="CPU, float64",
        note="derived on the page, Wan et al.'s result without momentum; the control with a "
        f"five times weaker decay turns {span(ctl, '.2f')} "
        "times its own √(2ηλ)",
        per_seed={"turn / √(2ηλ)": [round(t / r["angular_step"], 4) for t in turns]},
        quote=WAN_ANGULAR,
        quote_where="Abstract",
        extra={"cite": ["wan2021spherical"]},
    )
