"""Claims of the "Making it fast" chapter (book/fast.md), checked on the chapter's own run.

Every measured claim reuses :func:`normedu.bench.book_run` (memoized), so the ledger costs
nothing when the chapter has already run in the same kernel.
"""

from __future__ import annotations

from ..ledger import Claim, claims_for

CHAPTER = "fast"
#: NVIDIA H200 memory bandwidth (NVIDIA H200 Tensor Core GPU datasheet, 2024): 4.8 TB/s.
H200_BYTES_PER_S = 4.8e12
#: normedu's target for its fast kernels on a CPU (fraction of copy bandwidth, D >= 4096).
TARGET = 0.7
FAMILIES = ("eager", "textbook", "compiled", "numpy", "fast")


def _speedup_verdict(ratios: dict[str, float], lo: float, hi: float) -> str:
    """Verdict on "RMSNorm saves lo..hi of LayerNorm's time" from per-family time ratios.

    A family agrees when its saving ``1 - ratio`` lies in [lo, hi] widened by 5 points for
    timing noise. ``confirmed``: every family agrees. ``depends``: some agree, or RMSNorm is
    faster in some families and slower in others. ``not reproduced``: none agrees and all
    err the same way.
    """
    savings = [1.0 - r for r in ratios.values()]
    agree = [lo - 0.05 <= s <= hi + 0.05 for s in savings]
    if all(agree):
        return "confirmed"
    mixed = any(s > 0 for s in savings) and any(s < 0 for s in savings)
    return "depends" if any(agree) or mixed else "not reproduced"


def _ratios_text(ratios: dict[str, float]) -> str:
    return "; ".join(f"{impl} {r:.2f}" for impl, r in ratios.items())


@claims_for(CHAPTER)
def check() -> list[Claim]:
    from ..bench import book_run, floor_seconds
    from ..plots.bench import headline_shape

    floor_us = floor_seconds(8192, 4096, H200_BYTES_PER_S) * 1e6
    claims = [
        Claim(
            id="fast.h200_floor",
            chapter=CHAPTER,
            claim="An 8192×4096 float32 LayerNorm forward on an H200 (4.8 TB/s) cannot take "
            "less than about 56 µs: it must read and write 2·N·D·4 bytes",
            source="normedu issue 'Making it fast'; bandwidth: NVIDIA H200 datasheet (2024)",
            measured=f"2·8192·4096·4 B / 4.8 TB/s = {floor_us:.1f} µs",
            verdict="confirmed" if abs(floor_us - 56) < 0.5 else "not reproduced",
        )
    ]

    res = book_run()
    device = res.device
    n, d = headline_shape(res)
    for op, name in (("layernorm", "LayerNorm"), ("rmsnorm", "RMSNorm")):
        fresh = res.find(op, "fast", n, d)["frac_of_copy"]
        out_row = res.find(op, "fast_out", n, d)
        out, best = out_row["frac_of_copy"], out_row.get("frac_best", float("nan"))
        eager = res.find(op, "eager", n, d)["median_s"]
        fast_t = res.find(op, "fast", n, d)["median_s"]
        try:
            bwd = (
                res.find(op, "eager", n, d, "fwdbwd")["median_s"]
                / res.find(op, "fast", n, d, "fwdbwd")["median_s"]
            )
        except KeyError:
            bwd = None
        claims.append(
            Claim(
                id=f"fast.{op}_fraction",
                chapter=CHAPTER,
                claim=f"normedu's fast {name} forward reaches at least {TARGET}× of the copy "
                "bandwidth on a CPU for D ≥ 4096 in float32",
                source="normedu issue 'Making it fast' (target)",
                measured=f"{n}×{d}, medians: {out:.2f}× with a preallocated output (fastest "
                f"call against fastest copy: {best:.2f}×), {fresh:.2f}× with a fresh one (copy "
                f"{res.copy_row(n, d)['gbps']:.1f} GB/s); "
                f"eager F.{'layer' if op == 'layernorm' else 'rms'}_norm / fast time "
                f"{eager / fast_t:.2f}",
                verdict="confirmed" if out >= TARGET else "not reproduced",
                device=device,
                note="verdict on the medians; a fresh output pays page faults, the preallocated "
                "one measures the kernel",
            )
        )

        claims.append(
            Claim(
                id=f"fast.{op}_not_slower_than_eager",
                chapter=CHAPTER,
                claim=f"normedu's fast {name} is never slower than PyTorch's eager "
                f"F.{'layer' if op == 'layernorm' else 'rms'}_norm (forward, and forward + "
                "backward)",
                source="normedu issue 'Making it fast' (target)",
                measured=f"{n}×{d}, eager time / fast time (medians): forward "
                f"{eager / fast_t:.2f} with a fresh output, {eager / out_row['median_s']:.2f} "
                "with a preallocated one"
                + (f"; forward + backward {bwd:.2f}" if bwd is not None else ""),
                verdict=(
                    "confirmed"
                    if min(eager / fast_t, eager / out_row["median_s"], bwd or 1.0) >= 1
                    else "depends"
                    if eager / out_row["median_s"] >= 1
                    else "not reproduced"
                ),
                device=device,
                note="with fresh outputs both pay the operating system's page faults, which "
                "dominate on this machine (the clone row)",
            )
        )

    claims += _gpu_claims()

    fams = [f for f in FAMILIES if any(r["impl"] == f for r in res.rows())]
    for pass_ in ("fwd", "fwdbwd"):
        ratios = {}
        for f in fams:
            try:
                ratios[f] = res.ratio(f, n, d, pass_=pass_)
            except KeyError:
                continue
        what = "forward" if pass_ == "fwd" else "forward + backward"
        claims.append(
            Claim(
                id=f"fast.rms_10_15.{pass_}",
                chapter=CHAPTER,
                claim="RMSNorm gives a 10–15% speedup of the normalization operation",
                source="seed article (layer-normalization-article), 'Why it's faster'",
                measured=f"time RMSNorm / LayerNorm, {what}, {n}×{d}: {_ratios_text(ratios)}",
                verdict=_speedup_verdict(ratios, 0.10, 0.15),
                device=device,
                note="the ratio is a property of the kernel, not of the formula",
            )
        )
    ratios = {f: res.ratio(f, n, d) for f in fams}
    claims.append(
        Claim(
            id="fast.rms_25_cheaper",
            chapter=CHAPTER,
            claim="RMSNorm is about 25% cheaper than LayerNorm",
            source="seed notes (normalization-notes), RMSNorm section",
            measured=f"time RMSNorm / LayerNorm, forward, {n}×{d}: {_ratios_text(ratios)}",
            verdict=_speedup_verdict(ratios, 0.20, 0.30),
            device=device,
            note="in bytes moved a fused RMSNorm and a fused LayerNorm are equal",
        )
    )
    eager_ratio = res.ratio("eager", n, d)
    claims.append(
        Claim(
            id="fast.eager_rms_slower_cpu",
            chapter=CHAPTER,
            claim="On a CPU PyTorch's eager F.rms_norm is slower than F.layer_norm "
            "(2.5–2.7× in earlier measurements): it is not one fused kernel there",
            source="normedu NOTES (measured on this kind of machine, torch 2.13)",
            measured=f"eager RMSNorm / LayerNorm time {eager_ratio:.2f} at {n}×{d}",
            verdict=(
                "confirmed"
                if res.meta.get("device_type") == "cpu" and eager_ratio > 1
                else "depends"
            ),
            device=device,
        )
    )
    return claims


def _gpu_claims() -> list[Claim]:
    """The GPU target, checked on the stored H200 run (none when no run is stored)."""
    from ..bench import BenchResult

    stored = BenchResult.load_stored()
    if stored is None:
        return []
    n, d = 8192, 4096
    fr = {op: stored.find(op, "fast_out", n, d)["frac_of_copy"] for op in ("layernorm", "rmsnorm")}
    copy = stored.copy_row(n, d)["gbps"]
    return [
        Claim(
            id="fast.gpu_fraction",
            chapter=CHAPTER,
            claim=f"On a CUDA device normedu's fast forward kernels reach at least {TARGET}× of "
            "the device's measured copy bandwidth",
            source="normedu issue 'Making it fast' (target)",
            measured=f"{n}×{d} float32, preallocated output, medians: LayerNorm "
            f"{fr['layernorm']:.2f}×, RMSNorm {fr['rmsnorm']:.2f}× of {copy / 1e3:.2f} TB/s "
            f"(stored run, {stored.provenance.get('date', '?')[:10]})",
            verdict="confirmed" if min(fr.values()) >= TARGET else "not reproduced",
            device=stored.device,
        )
    ]
