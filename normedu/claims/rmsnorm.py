"""Claims of the RMSNorm chapter (book/rmsnorm.md), checked on the chapter's own runs."""

from __future__ import annotations

import math

from ..ledger import Claim, claims_for

CHAPTER = "rmsnorm"
ARTICLE = "course article (seed), 'RMSNorm' section"
NOTES = "course notes (seed), §3 RMSNorm"
PAPER = "Zhang & Sennrich, 2019, 'Root Mean Square Layer Normalization', NeurIPS"


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
    """``({impl: 1 - t_RMS / t_LN}, (N, D), device)`` at the widest live shape."""
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
    import torch

    from ..experiments.rmsnorm import eps_check, param_counts, prms_check, worked_example

    ex = worked_example()
    out4 = [round(float(v), 4) for v in ex["rms_out"]]
    claims = [
        Claim(
            id="rmsnorm.example_rms",
            chapter=CHAPTER,
            claim="For x = [2, 4, −1, 3] the RMS is √7.5 ≈ 2.7386",
            source=ARTICLE,
            measured=f"RMS = {ex['rms']:.6f}; √7.5 = {math.sqrt(7.5):.6f}",
            verdict="confirmed" if abs(ex["rms"] - math.sqrt(7.5)) < 1e-12 else "not reproduced",
        ),
        Claim(
            id="rmsnorm.example_out",
            chapter=CHAPTER,
            claim="RMSNorm([2, 4, −1, 3]) ≈ [0.7303, 1.4606, −0.3651, 1.0954]",
            source=ARTICLE,
            measured=f"{out4} (torch.nn.functional.rms_norm agrees: "
            f"{bool(abs(ex['torch_rms'] - ex['rms_out']).max() < 1e-12)})",
            verdict="confirmed" if out4 == [0.7303, 1.4606, -0.3651, 1.0954] else "not reproduced",
        ),
        Claim(
            id="rmsnorm.example_mean",
            chapter=CHAPTER,
            claim="The RMSNorm output of that vector is not centred: its mean is 0.7303",
            source=ARTICLE,
            measured=f"mean {ex['rms_out_mean']:.4f} (LayerNorm: {ex['ln_mean']:.1e})",
            verdict="confirmed" if round(ex["rms_out_mean"], 4) == 0.7303 else "not reproduced",
        ),
    ]
    pc = param_counts(768)
    claims.append(
        Claim(
            id="rmsnorm.params",
            chapter=CHAPTER,
            claim="RMSNorm drops β: D parameters per layer instead of LayerNorm's 2D",
            source=f"{NOTES}; {PAPER}",
            measured=f"torch.nn at D = 768: LayerNorm {pc['layernorm']}, RMSNorm {pc['rmsnorm']}",
            verdict="confirmed"
            if (pc["layernorm"], pc["rmsnorm"]) == (1536, 768)
            else "not reproduced",
            device=f"torch {torch.__version__}",
        )
    )

    savings, (n, d), device = speed_savings()
    text = "; ".join(f"{k} {100 * v:+.0f}%" for k, v in savings.items())
    note = (
        "saving = 1 − t_RMS/t_LN, forward, float32; eager F.rms_norm is not fused on CPU"
        if "CPU" in device
        else "saving = 1 − t_RMS/t_LN, forward, float32"
    )
    claims += [
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
        Claim(
            id="rmsnorm.paper_7_64",
            chapter=CHAPTER,
            claim="RMSNorm cuts whole-model running time by 7%–64% across models "
            "(7–9% on a Transformer; 64% is pRMSNorm on another model)",
            source=PAPER,
            measured="whole-model training not reproduced here",
            verdict="cited",
            device="—",
        ),
        Claim(
            id="rmsnorm.recentering",
            chapter=CHAPTER,
            claim="Re-centering matters little; re-scaling is what helps (quality comparable "
            "to LayerNorm)",
            source=PAPER,
            measured="quality experiments not reproduced here",
            verdict="cited",
            device="—",
        ),
    ]

    pr = prms_check()
    i6 = int(abs(pr.ps - 0.0625).argmin())
    claims.append(
        Claim(
            id="rmsnorm.prms",
            chapter=CHAPTER,
            claim="pRMSNorm estimates the RMS from the first p% of features (p = 6.25% in the "
            "paper) without hurting quality",
            source=PAPER,
            measured=f"p = 6.25%: median RMS error {100 * pr.rel_err_equal[i6]:.1f}% for features "
            f"of equal scale, {100 * pr.rel_err_unequal[i6]:.0f}% for unequal scales; time "
            f"{pr.time_ratio[i6]:.2f}× the full reduction (eager torch)",
            verdict="depends",
            device=_device(),
            note="the estimate is only as good as the first p% of features are representative",
        )
    )

    rows = eps_check()
    tiny = next(r for r in rows if r["scale"] == 1e-3)
    eps_default = torch.finfo(torch.float32).eps
    claims.append(
        Claim(
            id="rmsnorm.torch_eps",
            chapter=CHAPTER,
            claim="torch.nn.RMSNorm's default eps is torch.finfo(dtype).eps (1.19e-7 for float32), "
            "not the 1e-5/1e-6 of model configs",
            source="PyTorch documentation, torch.nn.RMSNorm (torch ≥ 2.4)",
            measured=f"input RMS 1e-3 → output RMS {tiny['default']:.3f} (default), "
            f"{tiny['1e-6']:.3f} (1e-6), {tiny['1e-5']:.3f} (1e-5); predicted for the default: "
            f"{1e-3 / math.sqrt(1e-6 + eps_default):.3f}",
            verdict="confirmed"
            if abs(tiny["default"] - 1e-3 / math.sqrt(1e-6 + eps_default)) < 1e-3
            else "not reproduced",
            device=f"torch {torch.__version__}",
        )
    )
    return claims


def _device() -> str:
    from ..provenance import device_name

    return device_name("cpu")
