"""The RMSNorm / LayerNorm speed ratio: one measurement, the record every page reads.

The RMSNorm chapter, the fast appendix, the summary and the questions all state how fast
RMSNorm is next to LayerNorm. They read one record, ``rmsnorm_layernorm_speed``
(:mod:`normedu.records`), measured by :func:`measure` with nothing else running
(``make timings``) and committed, and never time it themselves:

- :func:`measure`: forward time of both norms (eager, textbook, compiled, fast) and of a copy
  of the same tensor, float32, on one thread, medians of interleaved rounds
  (:func:`normedu.bench.run_benchmark`), at :data:`SPEED_SHAPES`.
- :func:`speed_run`: that record as a :class:`normedu.bench.BenchResult`.
- :func:`speed_ratios`, :func:`copy_fractions`, :func:`speed_words`, :func:`ratios_table`:
  what the pages state, at :data:`SPEED_HEADLINE` (or every measured shape).
"""

from __future__ import annotations

from typing import Any

from ..records import RECORDS

__all__ = [
    "SPEED_RECORD",
    "SPEED_SHAPES",
    "SPEED_HEADLINE",
    "measure",
    "speed_run",
    "speed_ratios",
    "copy_fractions",
    "speed_words",
    "ratios_table",
]

#: The record's name (:data:`normedu.records.RECORDS`).
SPEED_RECORD = "rmsnorm_layernorm_speed"
#: (N, D) measured: 1024-wide rows and LLaMA-7B-wide rows (4096), the same number of elements
#: (the record's params are the one source).
SPEED_SHAPES: tuple[tuple[int, int], ...] = tuple(
    (int(n), int(d)) for n, d in RECORDS[SPEED_RECORD].params["shapes"]
)
#: The shape the pages quote: the widest rows.
SPEED_HEADLINE: tuple[int, int] = max(SPEED_SHAPES, key=lambda s: (s[1], s[0]))


def measure(
    shapes, impls, reps: int, warmup: int, device: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, provenance)`` of a benchmark run: forward, float32, LayerNorm and RMSNorm for
    each of ``impls`` at each (N, D) of ``shapes``, interleaved with a copy; ``reps`` timed
    rounds after ``warmup``; one thread (a ratio that does not depend on how many cores the
    building machine has, and no threads fighting over cores). ``data`` is
    :meth:`normedu.bench.BenchResult.to_dict`."""
    from ..bench import PRESETS, Selection, run_benchmark
    from .scale import threads

    with threads(1):
        res = run_benchmark(
            PRESETS["quick"].override(shapes=[tuple(s) for s in shapes], reps=reps, warmup=warmup),
            Selection(
                ops=("layernorm", "rmsnorm"),
                impls=tuple(impls),
                passes=("fwd",),
                dtypes=("float32",),
            ),
            device=device,
            progress=False,
            command=f"python -m normedu.records {SPEED_RECORD}",
        )
    return res.to_dict(), res.provenance


def speed_run(progress: bool = False):
    """The record as a :class:`normedu.bench.BenchResult` (``progress`` is ignored: kept for
    callers of the former live run)."""
    from ..bench import BenchResult
    from ..records import read

    return BenchResult.from_record(read(SPEED_RECORD))


def speed_ratios(res, shape: tuple[int, int] = SPEED_HEADLINE) -> dict[str, float]:
    """``{impl: time RMSNorm / time LayerNorm}`` at ``shape`` for every measured impl (below 1:
    RMSNorm is faster), plus ``"compiled_vs_eager_ln"``: compiled RMSNorm over eager
    ``F.layer_norm``, what a user who compiles only RMSNorm gets."""
    n, d = shape
    impls = [i for i in ("eager", "textbook", "compiled", "fast") if _has(res, i, n, d)]
    out = {i: res.ratio(i, n, d) for i in impls}
    if {"eager", "compiled"} <= set(impls):
        out["compiled_vs_eager_ln"] = (
            res.find("rmsnorm", "compiled", n, d)["median_s"]
            / res.find("layernorm", "eager", n, d)["median_s"]
        )
    return out


def copy_fractions(res, shape: tuple[int, int] = SPEED_HEADLINE) -> dict[tuple[str, str], float]:
    """``{(op, impl): copy time / norm time}`` at ``shape``, medians: 1 means the norm moves its
    bytes as fast as a copy of the same tensor (the memory floor), 0.25 that it takes 4 times
    as long."""
    n, d = shape
    return {
        (r["op"], r["impl"]): r["frac_of_copy"]
        for r in res.rows()
        if (r["n"], r["d"], r["pass_"]) == (n, d, "fwd")
    }


def _has(res, impl: str, n: int, d: int) -> bool:
    try:
        res.ratio(impl, n, d)
    except KeyError:
        return False
    return True


def _time_of(r: float, what: str) -> str:
    """``r`` = time A / time B in words: "2.52× the time of B" or "18% less time than B"."""
    if r < 1:
        return f"{100 * (1 - r):.0f}% less time than {what}"
    return f"{r:.2f}× the time of {what}"


def speed_words(res, shape: tuple[int, int] = SPEED_HEADLINE) -> str:
    """One sentence with the measured ratios at ``shape``: what the summary and the questions
    say (the RMSNorm chapter and the appendix show the whole table)."""
    n, d = shape
    r = speed_ratios(res, shape)
    text = (
        f"Measured once for this book on {res.device}, {n} × {d}, float32, forward: PyTorch's "
        f"eager `F.rms_norm` took {_time_of(r['eager'], 'eager `F.layer_norm`')}"
    )
    if "compiled" in r:
        text += (
            f"; the textbook RMSNorm compiled by `torch.compile` took "
            f"{_time_of(r['compiled'], 'the compiled LayerNorm')} and "
            f"{_time_of(r['compiled_vs_eager_ln'], 'eager `F.layer_norm`')}"
        )
    return text + "."


def ratios_table(res) -> str:
    """Markdown table: time RMSNorm / time LayerNorm per implementation (rows) and measured
    shape (columns), forward, float32."""
    shapes = sorted({(r["n"], r["d"]) for r in res.rows()}, key=lambda s: (s[1], s[0]))
    impls = [i for i in ("eager", "textbook", "compiled", "fast") if _has(res, i, *shapes[0])]
    lines = [
        "| implementation | " + " | ".join(f"RMS / LN at {n} × {d}" for n, d in shapes) + " |",
        "|---|" + "---|" * len(shapes),
    ]
    for impl in impls:
        cells = [
            f"{res.ratio(impl, n, d):.2f}" if _has(res, impl, n, d) else "–" for n, d in shapes
        ]
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
