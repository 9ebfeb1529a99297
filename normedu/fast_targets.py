"""The engineering targets of :mod:`normedu.fast`, checked on a benchmark run.

These are goals this project set for its own kernels, not claims of the course's sources, so
they are shown in a table of their own on the "Making it fast" page and never in the claims
ledger. Each target is checked on :class:`normedu.bench.BenchResult` rows at the headline
shape (the largest row width measured, float32):

- on a CPU, the fast forward kernels writing into a preallocated output move data at least
  :data:`FRACTION` of the copy bandwidth (medians);
- the fast kernels are never slower than PyTorch's eager ``F.layer_norm`` / ``F.rms_norm``
  (forward with a fresh and with a preallocated output, and forward + backward when measured);
- on a CUDA device (a stored GPU run), the fast forward kernels reach :data:`FRACTION` of that
  device's measured copy bandwidth at 8192 × 4096.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Fraction of the copy bandwidth the fast forward kernels must reach (D >= 4096, float32).
FRACTION = 0.7
#: The shape at which a stored GPU run is checked.
GPU_SHAPE = (8192, 4096)
OPS = {"layernorm": ("LayerNorm", "F.layer_norm"), "rmsnorm": ("RMSNorm", "F.rms_norm")}


@dataclass(frozen=True)
class TargetCheck:
    """One target: what it asks, what was measured, whether it was met, and where."""

    target: str
    measured: str
    met: bool
    device: str


def _eager_over_fast(res: Any, op: str, n: int, d: int) -> dict[str, float]:
    """Eager time / fast time (above 1: fast is faster) for each measured comparison."""
    eager = res.find(op, "eager", n, d)["median_s"]
    out = {
        "forward, fresh output": eager / res.find(op, "fast", n, d)["median_s"],
        "forward, preallocated output": eager / res.find(op, "fast_out", n, d)["median_s"],
    }
    try:
        out["forward + backward"] = (
            res.find(op, "eager", n, d, "fwdbwd")["median_s"]
            / res.find(op, "fast", n, d, "fwdbwd")["median_s"]
        )
    except KeyError:
        pass  # a quick run may leave the backward out
    return out


def check(res: Any, n: int, d: int, stored: Any | None = None) -> list[TargetCheck]:
    """The targets on the run ``res`` at shape ``(n, d)``, and on ``stored`` (a GPU run) if any.

    ``res`` and ``stored`` are :class:`normedu.bench.BenchResult` (anything with its ``find``,
    ``copy_row`` and ``device``).
    """
    out = []
    for op, (name, eager_name) in OPS.items():
        row = res.find(op, "fast_out", n, d)
        best = row.get("frac_best", float("nan"))
        out.append(
            TargetCheck(
                target=f"fast {name} forward, preallocated output: at least {FRACTION} of the "
                "copy bandwidth",
                measured=f"{row['frac_of_copy']:.2f} (median); {best:.2f} fastest call against "
                f"fastest copy; {n} × {d}",
                met=row["frac_of_copy"] >= FRACTION,
                device=res.device,
            )
        )
        ratios = _eager_over_fast(res, op, n, d)
        out.append(
            TargetCheck(
                target=f"fast {name} never slower than eager {eager_name}",
                measured="eager time / fast time: "
                + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()),
                met=min(ratios.values()) >= 1.0,
                device=res.device,
            )
        )
    if stored is not None:
        gn, gd = GPU_SHAPE
        fr = {op: stored.find(op, "fast_out", gn, gd)["frac_of_copy"] for op in OPS}
        out.append(
            TargetCheck(
                target=f"on a GPU, fast forward kernels at least {FRACTION} of the device's "
                "copy bandwidth",
                measured=f"LayerNorm {fr['layernorm']:.2f}, RMSNorm {fr['rmsnorm']:.2f} at "
                f"{gn} × {gd} (copy {stored.copy_row(gn, gd)['gbps'] / 1e3:.2f} TB/s)",
                met=min(fr.values()) >= FRACTION,
                device=stored.device,
            )
        )
    return out


def to_markdown(checks: list[TargetCheck]) -> str:
    """The checks as a Markdown table (target, measured, met).

    The device is named where it differs from the first check's (the page names that one).
    """
    lines = ["| Target | Measured | Met? |", "|---|---|---|"]
    first = checks[0].device if checks else ""
    for c in checks:
        measured = c.measured if c.device == first else f"{c.measured}, on {c.device}"
        cells = (c.target, measured, "yes" if c.met else "**no**")
        lines.append("| " + " | ".join(s.replace("|", "\\|") for s in cells) + " |")
    return "\n".join(lines)


def summary_sentence(checks: list[TargetCheck]) -> str:
    """One sentence that says how many targets the run met, and which it missed."""
    missed = [c.target for c in checks if not c.met]
    head = (
        f"On {checks[0].device}, the stored run meets {len(checks) - len(missed)} of {len(checks)}"
    )
    if not missed:
        return head + " targets."
    return head + " targets; it misses: " + "; ".join(missed) + "."
