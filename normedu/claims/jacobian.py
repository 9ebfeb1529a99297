"""Claims of the gradient-flow chapter (book/jacobian.md), on its cached runs.

One function per claim; :func:`check` runs them in the chapter's order.
"""

from __future__ import annotations

import numpy as np

from ..claim import Claim, cite, claims_for, verdict, verdict_within

CHAPTER = "jacobian"
ARTICLE = "this course, chapter 'Gradient flow and the LayerNorm Jacobian'"


@claims_for(CHAPTER)
def check(preset: str | None = None) -> list[Claim]:
    from ..device import preset_name
    from ..experiments.gradflow import jacobian_demo

    preset = preset or preset_name()
    demo = jacobian_demo()
    out = [formula(demo), parts(demo), null_space(demo), self_regulation()]
    return out + [scale_invariance(), equilibrium(), spread(preset)]


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
        measured=f"eigenvalues {np.array2string(demo.eigenvalues, precision=4)}; 1/σ = "
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
        note="gain·σ < 1 because the centering and decorrelation parts remove 2 of D directions",
    )


def spread(preset: str) -> Claim:
    """jacobian.orders_of_magnitude, on the highway grid of ``preset``."""
    from ..experiments.gradflow import highway_grid
    from ..provenance import device_name

    grid = highway_grid(preset)
    spreads = {k: grid.spread(k) for k in grid.norms}
    no_norm = [spreads["no norm+residual"], spreads["no norm, no residual"]]
    return Claim(
        id="jacobian.orders_of_magnitude",
        chapter=CHAPTER,
        claim="Without LayerNorm the per-layer gradient norm varies by orders of magnitude; "
        "with LayerNorm and residuals it stays well bounded",
        source=ARTICLE,
        measured=f"{grid.depth} layers, max/min over layers: "
        + "; ".join(f"{k} {v:.3g}" for k, v in spreads.items()),
        verdict=verdict(
            min(no_norm) > 100 and spreads["layernorm+residual"] < 10, otherwise="depends"
        ),
        device=device_name("cuda" if preset == "cuda" else "cpu"),
        note="with LayerNorm and residuals the spread is a few × (not < 2); LayerNorm without "
        + (
            "residuals also stays within 10× in this run"
            if spreads["layernorm, no residual"] < 10
            else f"residuals spreads {spreads['layernorm, no residual']:.3g}× in this run"
        ),
    )


def scale_invariance() -> Claim:
    from ..experiments import scale_invariance as V

    p = V.runs()["plain"]
    grew = bool(np.all(np.diff(p["norm"]) > 0) and p["final_norm"] > p["norm"][-1])
    return Claim(
        id="jacobian.scale_invariance",
        chapter=CHAPTER,
        claim="The gradient of bias-free weights feeding a normalization is orthogonal to "
        "them, so plain SGD only grows their norm and the effective learning rate η/‖w‖² falls",
        source=cite("vanlaarhoven2017l2"),
        measured=f"Linear → LayerNorm on the digits, {len(p['norm'])} SGD steps: max |cos(w, g)| "
        f"{np.abs(p['cos']).max():.0e}; ‖w‖ {p['norm'][0]:.2f} → {p['final_norm']:.2f}; "
        f"η/‖w‖² {p['eff_lr'][0]:.4f} → {p['eff_lr'][-1]:.4f}",
        verdict=verdict(np.abs(p["cos"]).max() < 1e-4 and grew),
        device="CPU, float64",
        extra={"cite": ["vanlaarhoven2017l2"]},
    )


def equilibrium() -> Claim:
    from ..experiments import scale_invariance as V

    r = V.runs()
    return Claim(
        id="jacobian.equilibrium",
        chapter=CHAPTER,
        claim="With weight decay λ the norm of scale-invariant weights settles where "
        "‖w‖⁴ = ηc²/(λ(2 − ηλ)) ≈ ηc²/(2λ), c = ‖g‖·‖w‖",
        source=ARTICLE + " (derived on the page)",
        measured=f"η = {r['lr']:g}, λ = {r['wd']:g}: mean ‖w‖ over the last quarter "
        f"{r['measured']:.3f} vs {r['predicted']:.3f} from the measured c = {r['c_rms']:.2f}",
        verdict=verdict_within(r["measured"], r["predicted"], rtol=0.05),
        device="CPU, float64",
    )
