"""RMSNorm beside LayerNorm: the worked example, pRMSNorm, and the eps convention.

- :func:`worked_example`: every intermediate of LayerNorm and RMSNorm on one vector
  (default x = [2, 4, -1, 3]) in float64, for the comparison table.
- :func:`partial_rms` / :func:`prms_check`: pRMSNorm (Zhang & Sennrich, 2019) estimates the
  RMS from the first p% of the features; how far the estimate and the output drift from full
  RMSNorm, on features of equal scale and on features of unequal scale, and how much time the
  shorter reduction saves.
- :func:`eps_check`: ``torch.nn.RMSNorm``'s default eps (the machine epsilon of the type it
  computes in: float32's for half inputs) against
  the 1e-5 / 1e-6 that model configurations set, on inputs of shrinking magnitude.

- :func:`backward_check`: RMSNorm's backward three ways (the step-by-step walk, the compact
  formula of :func:`normedu.functional.rms_norm_backward`, autograd) on a random upstream
  gradient, with the two sums that tell it from LayerNorm's: ``sum(dx)`` and ``x . dx``.
- :func:`gamma_mean_square`: x/RMS(x) has mean square 1, gamma * x/RMS(x) does not.
- :func:`recentre_ablation`: the same deep MLP on digits with LayerNorm, RMSNorm, a norm that
  re-centres but does not re-scale (:class:`CenterNorm`), and no norm, at a well-scaled and a
  badly scaled initialization, same seeds.

Speed of LayerNorm vs RMSNorm is one record that every page reads
(:mod:`normedu.experiments.rmsnorm_speed`, re-exported here).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .. import seeding
from ..conventions import DEFAULT_EPS
from ..records import RECORDS
from .rmsnorm_speed import (
    SPEED_HEADLINE,
    SPEED_RECORD,
    SPEED_SHAPES,
    copy_fractions,
    speed_ratios,
    speed_run,
    speed_words,
)

__all__ = [
    "EXAMPLE_X",
    "worked_example",
    "example_markdown",
    "partial_rms",
    "PRMSResult",
    "prms_check",
    "eps_check",
    "SPEED_RECORD",
    "SPEED_SHAPES",
    "SPEED_HEADLINE",
    "speed_run",
    "speed_ratios",
    "copy_fractions",
    "speed_words",
    "param_counts",
    "backward_check",
    "gamma_mean_square",
    "CenterNorm",
    "AblationSize",
    "ABLATION",
    "ABLATION_NORMS",
    "AblationResult",
    "recentre_ablation",
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
      No cosine similarity is reported: pRMSNorm and RMSNorm outputs differ by a per-row
      factor, so their cosine is 1 whatever p; the scale error ``rel_err_*`` is what p changes.
    - time_ratio (P,): median time of the whole pRMSNorm forward (:func:`partial_rms`: the
      partial reduction plus the division of every feature) divided by that of full RMSNorm
      (p = 1), timed with :func:`normedu.timing.interleaved` on this device, one thread
      (the record :data:`PRMS_RECORD` at the chapter's fractions); NaN where not timed.
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


#: The fractions the chapter measures (the timing record's params are the one source).
PRMS_PS: tuple[float, ...] = tuple(RECORDS["prms_time_ratio"].params["ps"])


@functools.lru_cache(maxsize=4)
def prms_check(
    ps=PRMS_PS,
    n: int = 4096,
    d: int = 1024,
    seed: int = 0,
    timed: bool = True,
) -> PRMSResult:
    """Accuracy and speed of pRMSNorm at fractions ``ps`` on (n, d) activations (cached).

    At the chapter's fractions, width and seed the times are the record ``prms_time_ratio``
    (measured alone, ``make timings``); at others they are timed here."""
    rng = seeding.rng(seed)
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
    if timed and {"ps": list(ps), "d": d, "seed": seed} == _prms_record_inputs():
        # The chapter's own fractions: the timing is a record, measured alone by the build.
        from ..records import read

        times = np.array(read(PRMS_RECORD)["data"]["time_ratio"])
    elif timed:
        times = _time_partial(equal[:TIMED_ROWS].astype(np.float32), ps)
    return PRMSResult(np.array(ps), err_eq, err_uneq, times, (n, d))


#: The record of pRMSNorm's time against full RMSNorm (:mod:`normedu.records`).
PRMS_RECORD = "prms_time_ratio"
#: Rows timed: temporaries stay under glibc's mmap threshold, so the page faults of fresh
#: large buffers (see normedu.bench) do not swamp the reduction.
TIMED_ROWS = 1024


def _prms_record_inputs() -> dict:
    from ..records import RECORDS

    return {k: RECORDS[PRMS_RECORD].params[k] for k in ("ps", "d", "seed")}


def prms_times(ps, d: int, seed: int) -> tuple[dict, dict]:
    """``(data, provenance)`` of the record :data:`PRMS_RECORD`: ``{"time_ratio": [...]}``,
    the median time of :func:`partial_rms` at each fraction of ``ps`` over that at p = 1, on
    :data:`TIMED_ROWS` seeded rows of width ``d`` (the first rows :func:`prms_check` draws),
    float32, one thread."""
    from ..provenance import provenance
    from .scale import threads

    x = seeding.rng(seed).standard_normal((TIMED_ROWS, d)).astype(np.float32)
    ratios = _time_partial(x, tuple(float(p) for p in ps))
    with threads(1):
        prov = provenance(f"python -m normedu.records {PRMS_RECORD}", device="cpu")
    return {"time_ratio": [float(r) for r in ratios]}, prov


def _time_partial(x: np.ndarray, ps) -> np.ndarray:
    import torch

    from ..timing import Timer, inner_for, interleaved
    from .scale import threads

    xt = torch.from_numpy(x)
    timer = Timer("cpu")
    fns = [functools.partial(partial_rms, xt, p, DEFAULT_EPS) for p in ps]
    # One thread: the ratio compares reductions, and two threads fighting over a loaded
    # machine's cores make a call up to 50x slower at random.
    with threads(1):
        # Each sample repeats a call for about 10 ms: one call of 1024 rows takes about 1 ms.
        probes = [timer(fn) for fn in fns]
        inner = [inner_for(t, 0.01) for t in probes]
        samples = interleaved(fns, 15, timer=timer, inner=inner, probes=probes)
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

    gen = seeding.generator(seed)
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


# --------------------------------------------------------------------------- backward


def backward_check(d: int = 8, seed: int = 0, eps: float = 0.0) -> dict[str, Any]:
    """RMSNorm's backward on one random x (2, d), gamma and upstream gradient, float64.

    Returns ``dx_walk`` (node by node: x -> s = mean(x^2) -> r = sqrt(s + eps) -> rho = 1/r
    -> x_hat = x rho -> y = gamma x_hat), ``dx_compact`` (:func:`normedu.functional.
    rms_norm_backward`), ``dx_autograd`` (torch), the largest differences ``err_walk`` and
    ``err_compact`` against autograd, ``sum_dx`` (per row, over the features) and
    ``x_dot_dx`` (per row), and ``predicted_x_dot_dx`` = rho (g . x) eps / (s + eps), the
    closed form of x . dx (0 when eps = 0).
    """
    import torch

    from .. import functional as F

    rng = seeding.rng(seed)
    x = rng.normal(size=(2, d)) + 0.5  # a non-zero mean, as real activations have
    gamma = rng.uniform(0.5, 1.5, size=d)
    dout = rng.normal(size=(2, d))
    # the walk, one node at a time (the same order as the forward)
    s = (x * x).mean(-1, keepdims=True)
    r = np.sqrt(s + eps)
    rho = 1.0 / r
    dx_hat = dout * gamma
    drho = (dx_hat * x).sum(-1, keepdims=True)
    dr = -drho / r**2
    ds = dr / (2 * r)
    dx_walk = dx_hat * rho + ds * 2 * x / d
    dx_compact, _ = F.rms_norm_backward(dout, x, gamma, eps=eps)
    xt = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.rms_norm(xt, (d,), torch.tensor(gamma), eps=eps)
    (y * torch.tensor(dout)).sum().backward()
    dx_auto = xt.grad.numpy()
    g = dout * gamma
    return {
        "x": x,
        "dx_walk": dx_walk,
        "dx_compact": dx_compact,
        "dx_autograd": dx_auto,
        "err_walk": float(np.abs(dx_walk - dx_auto).max()),
        "err_compact": float(np.abs(dx_compact - dx_auto).max()),
        "sum_dx": dx_auto.sum(-1),
        "x_dot_dx": (x * dx_auto).sum(-1),
        "predicted_x_dot_dx": (rho * (g * x).sum(-1, keepdims=True) * eps / (s + eps))[:, 0],
        "eps": eps,
    }


def gamma_mean_square(d: int = 512, seed: int = 0) -> dict[str, float]:
    """Mean square of x/RMS(x) and of gamma * x/RMS(x) for a random x (d,) and gamma.

    gamma ~ U(0.5, 2), a spread like that of trained gains. Returns ``ms_xhat`` (1 up to
    rounding, eps = 0), ``ms_out`` and ``mean_gamma_sq`` (what ``ms_out`` approaches for large
    d: mean(gamma^2 x_hat^2) ~ mean(gamma^2) mean(x_hat^2)).
    """
    rng = seeding.rng(seed)
    x = rng.normal(size=d) * 3.0 + 1.0
    gamma = rng.uniform(0.5, 2.0, size=d)
    x_hat = x / np.sqrt((x * x).mean())
    out = gamma * x_hat
    return {
        "ms_xhat": float((x_hat * x_hat).mean()),
        "ms_out": float((out * out).mean()),
        "mean_gamma_sq": float((gamma * gamma).mean()),
    }


# --------------------------------------------------------------------------- re-centring


class CenterNorm(torch.nn.Module):
    """Re-centres without re-scaling: ``gamma * (x - mean(x)) + beta`` over the last axis.

    LayerNorm without the division by the standard deviation. Parameters 2D; (..., D) in and
    out.
    """

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.bias = torch.nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return self.weight * (x - x.mean(dim=-1, keepdim=True)) + self.bias


#: The four variants of the ablation, in table order.
ABLATION_NORMS = ("layernorm", "rmsnorm", "center", "none")


@dataclass(frozen=True)
class AblationSize:
    """Deep ReLU MLP on digits: ``depth`` blocks of ``width``, Adam at ``lr`` for ``epochs``
    (batch 64); one run per seed and per init ``gains`` (hidden weights N(0, gain^2/fan_in);
    sqrt(2) keeps a ReLU stack's scale, a larger gain lets it grow layer by layer)."""

    depth: int = 10
    width: int = 64
    epochs: int = 5
    lr: float = 1e-3
    gains: tuple[float, ...] = (2**0.5, 3.0)
    # Five seeds: a verdict from random runs rests on several (normedu.seeding), and the 40
    # runs trained side by side cost about 5.5 CPU-s together.
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)


ABLATION = AblationSize()


@dataclass
class AblationResult:
    """``acc[gain][norm]``: test accuracy per seed (in ``size.seeds`` order); ``loss[gain][norm]``:
    per seed, the mean training loss of each epoch (empty when not recorded)."""

    acc: dict[float, dict[str, list[float]]]
    size: AblationSize
    loss: dict[float, dict[str, list[list[float]]]] = field(default_factory=dict)
    #: Adam steps each run took (epochs × minibatches per epoch); 0 when not recorded.
    steps: int = 0

    def mean(self, gain: float, norm: str) -> float:
        return float(np.mean(self.acc[gain][norm]))


def _ablation_model(norm: str, gain: float, seed: int, size: AblationSize):
    from ..mlp import deep_mlp
    from ..nn import LayerNorm, RMSNorm

    # Built with LayerNorm, then each LayerNorm is swapped: every variant starts from the very
    # same Linear weights.
    model = deep_mlp(
        64, size.width, 10, size.depth, norm="layernorm", act="relu", gain=gain, seed=seed
    )
    make = {
        "layernorm": lambda: LayerNorm(size.width),
        "rmsnorm": lambda: RMSNorm(size.width),
        "center": lambda: CenterNorm(size.width),
        "none": torch.nn.Identity,
    }[norm]
    for i, module in enumerate(model):
        if isinstance(module, LayerNorm):
            model[i] = make()
    return model


@functools.lru_cache(maxsize=4)
def recentre_ablation(size: AblationSize = ABLATION) -> AblationResult:
    """Test accuracy on digits of the four :data:`ABLATION_NORMS`, per init gain and seed.

    Cached per size (the chapter and its claims share one run). 40 short runs (2 gains × 4
    norms × 5 seeds), trained side by side (:mod:`normedu.stacked`): each run keeps its own
    weights, batch order (seed + 1) and Adam state, as if trained alone, at a fraction of the
    CPU time. ``loss`` holds each run's training loss per epoch, ``steps`` its Adam steps.
    """
    from ..data import digits
    from ..stacked import StackedMLP, stacked_accuracy, train_stacked
    from .scale import threads

    data = digits()
    runs = [(g, n, s) for g in size.gains for n in ABLATION_NORMS for s in size.seeds]
    with threads(1):
        net = StackedMLP(
            [_ablation_model(n, g, s, size) for g, n, s in runs], [n for _, n, _ in runs]
        )
        history = train_stacked(
            net,
            data.x_train,
            data.y_train,
            [s + 1 for _, _, s in runs],
            batch=64,
            epochs=size.epochs,
            lr=size.lr,
        )
        accs = stacked_accuracy(net, data.x_test, data.y_test)
    acc: dict[float, dict[str, list[float]]] = {
        g: {n: [] for n in ABLATION_NORMS} for g in size.gains
    }
    loss: dict[float, dict[str, list[list[float]]]] = {
        g: {n: [] for n in ABLATION_NORMS} for g in size.gains
    }
    for (g, n, _), a, h in zip(runs, accs, history, strict=True):
        acc[g][n].append(a)
        loss[g][n].append(h)
    steps = size.epochs * math.ceil(len(data.x_train) / 64)
    return AblationResult(acc, size, loss, steps)
