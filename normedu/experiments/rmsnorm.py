"""RMSNorm beside LayerNorm: the worked example, pRMSNorm, and the eps convention.

- :func:`worked_example`: every intermediate of LayerNorm and RMSNorm on one vector
  (default x = [2, 4, -1, 3]) in float64, for the comparison table.
- :func:`partial_rms` / :func:`prms_check`: pRMSNorm (Zhang & Sennrich, 2019) estimates the
  RMS from the first p% of the features; how far the estimate and the output drift from full
  RMSNorm, on features of equal scale and on features of unequal scale, and how much time the
  shorter reduction saves.
- :func:`eps_check`: ``torch.nn.RMSNorm``'s default eps (``torch.finfo(dtype).eps``) against
  the 1e-5 / 1e-6 that model configurations set, on inputs of shrinking magnitude.

Speed of LayerNorm vs RMSNorm as such is measured by :mod:`normedu.bench`
(see :func:`speed_run`).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "EXAMPLE_X",
    "worked_example",
    "example_markdown",
    "partial_rms",
    "PRMSResult",
    "prms_check",
    "eps_check",
    "SPEED_SHAPES",
    "speed_run",
    "param_counts",
]

EXAMPLE_X = (2.0, 4.0, -1.0, 3.0)


def worked_example(x=EXAMPLE_X, eps: float = 0.0) -> dict[str, Any]:
    """Both norms on one vector x (D,), gamma = 1, beta = 0, float64.

    Returns a dict with ``x``; LayerNorm's ``mean``, ``var`` (biased), ``std``, ``ln``
    (output), ``ln_mean``, ``ln_var``; RMSNorm's ``mean_sq``, ``rms``, ``rms_out``,
    ``rms_out_mean``, ``rms_out_ms`` (mean square of the output); and ``torch_ln`` /
    ``torch_rms``, the outputs of ``torch.nn.functional`` for comparison.
    eps defaults to 0 so the numbers are the exact ones of the formulas.
    """
    import torch

    from .. import functional as F

    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"x must be a vector of at least 2 features, got shape {x.shape}")
    d = x.size
    mean = x.mean()
    var = ((x - mean) ** 2).mean()
    ln = F.layer_norm(x, eps=eps)
    rms_out = F.rms_norm(x, eps=eps)
    xt = torch.tensor(x)
    return {
        "x": x,
        "mean": float(mean),
        "var": float(var),
        "std": float(math.sqrt(var + eps)),
        "ln": ln,
        "ln_mean": float(ln.mean()),
        "ln_var": float(ln.var()),
        "mean_sq": float((x * x).mean()),
        "rms": float(math.sqrt((x * x).mean() + eps)),
        "rms_out": rms_out,
        "rms_out_mean": float(rms_out.mean()),
        "rms_out_ms": float((rms_out * rms_out).mean()),
        "torch_ln": torch.nn.functional.layer_norm(xt, (d,), eps=eps).numpy(),
        "torch_rms": torch.nn.functional.rms_norm(xt, (d,), eps=eps).numpy(),
    }


def example_markdown(ex: dict[str, Any], digits: int = 4) -> str:
    """The side-by-side table of :func:`worked_example` as Markdown."""

    def f(v: float) -> str:
        return f"{v:.{digits}f}"

    def vec(v) -> str:
        return "[" + ", ".join(f(a) for a in v) + "]"

    rows = [
        ("input x", vec(ex["x"]), vec(ex["x"])),
        ("subtract", f"mean μ = {f(ex['mean'])}", "nothing"),
        ("spread", f"variance σ² = {f(ex['var'])}", f"mean of squares = {f(ex['mean_sq'])}"),
        ("divide by", f"σ = {f(ex['std'])}", f"RMS = √{ex['mean_sq']:g} = {f(ex['rms'])}"),
        ("output (γ = 1, β = 0)", vec(ex["ln"]), vec(ex["rms_out"])),
        ("output mean", f(ex["ln_mean"]), f(ex["rms_out_mean"])),
        ("output variance / mean square", f(ex["ln_var"]), f(ex["rms_out_ms"])),
        ("learned parameters", "γ and β: 2D", "γ only: D"),
    ]
    lines = ["| step | LayerNorm | RMSNorm |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def param_counts(d: int) -> dict[str, int]:
    """Learnable parameters of ``torch.nn.LayerNorm(d)`` and ``torch.nn.RMSNorm(d)``."""
    import torch

    ln = sum(p.numel() for p in torch.nn.LayerNorm(d).parameters())
    rms = sum(p.numel() for p in torch.nn.RMSNorm(d).parameters())
    return {"layernorm": ln, "rmsnorm": rms}


# --------------------------------------------------------------------------- pRMSNorm


def partial_rms(x, p: float, eps: float = 0.0):
    """pRMSNorm: normalize x (..., D) by the RMS of its first ``ceil(p * D)`` features.

    ``p`` is a fraction in (0, 1]; p = 1 is plain RMSNorm (no gamma). Works on numpy arrays
    and torch tensors alike and returns the same kind.
    """
    if not 0 < p <= 1:
        raise ValueError(f"p must be a fraction in (0, 1], got {p}")
    d = x.shape[-1]
    k = max(1, math.ceil(p * d))
    head = x[..., :k]
    ms = (
        (head * head).mean(-1, keepdims=True)
        if isinstance(x, np.ndarray)
        else ((head * head).mean(-1, keepdim=True))
    )
    return x / (ms + eps) ** 0.5


@dataclass(frozen=True)
class PRMSResult:
    """pRMSNorm against full RMSNorm for each fraction p.

    - ps (P,): fractions of the features used.
    - rel_err_equal (P,): median over rows of |RMS_p / RMS - 1|, features of equal scale.
    - rel_err_unequal (P,): the same when feature j has scale growing with j (a few large
      features sit at the end, outside a small p).
    - cos_equal, cos_unequal (P,): mean cosine similarity between pRMSNorm and RMSNorm outputs
      (1.0 whatever p: a per-row rescaling does not turn a vector), so the table reports the
      output *scale* error instead: ``rel_err_*``.
    - time_ratio (P,): median time of the partial reduction divided by that of the full one
      (:func:`normedu.timing.interleaved` on this device), or NaN where not timed.
    - shape: (N, D) of the test activations.
    """

    ps: np.ndarray
    rel_err_equal: np.ndarray
    rel_err_unequal: np.ndarray
    time_ratio: np.ndarray
    shape: tuple[int, int]


def _rms_estimate_error(x: np.ndarray, p: float) -> float:
    k = max(1, math.ceil(p * x.shape[1]))
    full = np.sqrt((x * x).mean(1))
    part = np.sqrt((x[:, :k] ** 2).mean(1))
    return float(np.median(np.abs(part / full - 1)))


@functools.lru_cache(maxsize=4)
def prms_check(
    ps=(0.0625, 0.125, 0.25, 0.5, 1.0),
    n: int = 4096,
    d: int = 1024,
    seed: int = 0,
    timed: bool = True,
) -> PRMSResult:
    """Accuracy and speed of pRMSNorm at fractions ``ps`` on (n, d) activations (cached)."""
    rng = np.random.default_rng(seed)
    equal = rng.standard_normal((n, d))
    # Unequal scales: a smooth ramp from 0.5 to 2 plus 1% outlier features at 10x, all in the
    # second half: the kind of heterogeneity LLM activations show (outlier dimensions).
    scales = np.linspace(0.5, 2.0, d)
    scales[-max(1, d // 100) :] = 10.0
    unequal = equal * scales
    ps = tuple(float(p) for p in ps)
    err_eq = np.array([_rms_estimate_error(equal, p) for p in ps])
    err_uneq = np.array([_rms_estimate_error(unequal, p) for p in ps])
    times = np.full(len(ps), np.nan)
    if timed:
        # Time on 1024 rows: temporaries stay under glibc's mmap threshold, so the page
        # faults of fresh large buffers (see normedu.bench) do not swamp the reduction.
        times = _time_partial(equal[:1024].astype(np.float32), ps)
    return PRMSResult(np.array(ps), err_eq, err_uneq, times, (n, d))


def _time_partial(x: np.ndarray, ps) -> np.ndarray:
    import torch

    from ..timing import Timer, inner_for, interleaved
    from . import threads

    xt = torch.from_numpy(x)
    timer = Timer("cpu")
    fns = [functools.partial(partial_rms, xt, p, 1e-5) for p in ps]
    # One thread: the ratio compares reductions, and two threads fighting over a loaded
    # machine's cores make a call up to 50x slower at random.
    with threads(1):
        # Each sample repeats a call for about 10 ms: one call of 1024 rows takes about 1 ms.
        inner = [inner_for(timer(fn), 0.01) for fn in fns]
        samples = interleaved(fns, 15, timer=timer, inner=inner)
    out = [statistics.median(s) for s in samples]
    full = out[ps.index(1.0)] if 1.0 in ps else float("nan")
    return np.array(out) / full


# --------------------------------------------------------------------------- eps


def eps_check(scales=(1.0, 1e-2, 1e-3, 1e-4), d: int = 512, seed: int = 0) -> list[dict]:
    """Output RMS of RMSNorm for inputs of RMS ``s``, with three eps conventions.

    Returns one dict per scale: ``scale``, ``default`` (``torch.nn.RMSNorm(d)``, eps=None ->
    ``torch.finfo(float32).eps``), ``1e-6`` and ``1e-5`` (explicit eps). An output RMS of 1
    means the normalization ignored eps; below 1, eps dominates the mean square.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(8, d, generator=gen)
    z = z / z.pow(2).mean(-1, keepdim=True).sqrt()
    mods = {
        "default": torch.nn.RMSNorm(d),
        "1e-6": torch.nn.RMSNorm(d, eps=1e-6),
        "1e-5": torch.nn.RMSNorm(d, eps=1e-5),
    }
    rows = []
    with torch.no_grad():
        for s in scales:
            row: dict[str, float] = {"scale": float(s)}
            for name, m in mods.items():
                row[name] = float(m(s * z).pow(2).mean().sqrt())
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- speed

#: (N, D) shapes the chapter measures live: a LLaMA-7B-wide row and a wide one.
SPEED_SHAPES = ((2048, 1024), (512, 4096))


def speed_run(progress: bool = True):
    """LayerNorm vs RMSNorm forward, eager / textbook / compiled, float32, on this device.

    Cached (via :func:`normedu.bench.run_cached`) so the chapter and its claims share it.
    """
    from ..bench import run_cached

    return run_cached(
        shapes=list(SPEED_SHAPES),
        ops=("layernorm", "rmsnorm"),
        impls=("eager", "textbook", "compiled"),
        passes=("fwd",),
        dtypes=("float32",),
        preset="quick",
        progress=progress,
    )
