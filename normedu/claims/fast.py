"""Claims of the "Making it fast" appendix (book/fast.md), checked on the page's own run.

Only claims about normalization layers belong here: the memory-traffic floor, and how much
faster RMSNorm is than LayerNorm. The targets this project set for its own kernels are not
claims of any source; they live in :mod:`normedu.fast_targets` and have their own table on
the page. The forward RMSNorm / LayerNorm ratio is the book's one speed record
(:mod:`normedu.experiments.rmsnorm_speed`): "10–15% faster" and "about 25% cheaper" for the
forward pass are the RMSNorm chapter's claims on it, not repeated here. The forward + backward
ratio, which only this page states, is read from the page's stored run
(:func:`normedu.bench.book_run`, the record ``cpu_kernel_bench``)."""

from __future__ import annotations

from ..claim import Claim, cite, claims_for, verdict

CHAPTER = "fast"
#: NVIDIA H200 memory bandwidth (NVIDIA H200 Tensor Core GPU datasheet, 2024): 4.8 TB/s.
H200_BYTES_PER_S = 4.8e12
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
    from ..bench import book_run
    from ..experiments.rmsnorm import speed_run

    return [h200_floor(), rms_speedup_fwdbwd(book_run()), eager_rms_slower_cpu(speed_run())]


def h200_floor() -> Claim:
    from ..bench import floor_seconds

    floor_us = floor_seconds(8192, 4096, H200_BYTES_PER_S) * 1e6
    return Claim(
        id="fast.h200_floor",
        chapter=CHAPTER,
        claim="An 8192×4096 float32 LayerNorm forward on an H200 (4.8 TB/s) cannot take "
        "less than about 56 µs: it must read and write 2·N·D·4 bytes",
        source=cite("williams2009roofline", "nvidia2024h200"),
        measured=f"2·8192·4096·4 B / 4.8 TB/s = {floor_us:.1f} µs",
        verdict=verdict(abs(floor_us - 56) < 0.5),
    )


def _families(res) -> list[str]:
    """The implementation families of :data:`FAMILIES` that ``res`` measured."""
    return [f for f in FAMILIES if any(r["impl"] == f for r in res.rows())]


def rms_speedup_fwdbwd(res) -> Claim:
    """fast.rms_10_15.fwdbwd, on the page's run ``res`` (a ``BenchResult``)."""
    from ..plots.bench import headline_shape

    n, d = headline_shape(res)
    ratios = {}
    for f in _families(res):
        try:
            ratios[f] = res.ratio(f, n, d, pass_="fwdbwd")
        except KeyError:
            continue
    return Claim(
        id="fast.rms_10_15.fwdbwd",
        chapter=CHAPTER,
        claim="RMSNorm gives a 10–15% speedup of the normalization operation, forward and backward",
        source="this course (RMSNorm section, 'Why it's faster')",
        measured=f"time RMSNorm / LayerNorm, forward + backward, {n}×{d}: {_ratios_text(ratios)}",
        verdict=_speedup_verdict(ratios, 0.10, 0.15),
        device=res.device,
        note="the ratio is a property of the kernel, not of the formula; the forward ratio is "
        "the RMSNorm chapter's claim; the RMSNorm paper reports 7%–64% less running time "
        "depending on the model " + cite("zhang2019root"),
    )


def eager_rms_slower_cpu(res) -> Claim:
    """``res``: the speed record (:func:`normedu.experiments.rmsnorm.speed_run`)."""
    from ..experiments.rmsnorm import SPEED_HEADLINE

    n, d = SPEED_HEADLINE
    eager_ratio = res.ratio("eager", n, d)
    return Claim(
        id="fast.eager_rms_slower_cpu",
        chapter=CHAPTER,
        claim="On a CPU PyTorch's eager F.rms_norm is slower than F.layer_norm: it is not "
        "one fused kernel there",
        source="this course (measured on a CPU with torch 2.13)",
        measured=f"eager RMSNorm / LayerNorm time {eager_ratio:.2f} at {n}×{d}",
        verdict=verdict(
            res.meta.get("device_type") == "cpu" and eager_ratio > 1, otherwise="depends"
        ),
        device=res.device,
    )
