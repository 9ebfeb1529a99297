"""LayerNorm's element-wise curve and the tanh that imitates it (Zhu et al., 2025).

- :func:`fit_tanh`: least-squares fit of ``c * tanh(alpha * x)`` (and of a straight line) to a
  cloud of (input, output) pairs.
- :func:`ln_curve`: every LayerNorm of a model, input against normalized output, element by
  element, on one batch, and the fit of each.
- :func:`token_scale_demo`: synthetic tokens of unequal scales, whose LayerNorm cloud bends.

Part of the chapter "Training without normalization"; :mod:`.since2020_nonorm` re-exports
every name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .. import seeding

__all__ = [
    "TanhFit",
    "ALPHA_GRID",
    "fit_tanh",
    "fit_line",
    "LNCurve",
    "ln_curve",
    "TokenScaleDemo",
    "token_scale_demo",
]


@dataclass(frozen=True)
class TanhFit:
    """Least-squares fits of ``y`` against ``x``: ``c * tanh(alpha * x)`` and a straight line.

    ``r2_tanh``, ``r2_line``: the fraction of the variance of ``y`` each fit explains.
    ``slope``, ``intercept``: the line's.
    """

    alpha: float
    c: float
    r2_tanh: float
    slope: float
    intercept: float
    r2_line: float


#: The alphas :func:`fit_tanh` tries (log-spaced), before refining around the best.
ALPHA_GRID = np.geomspace(1e-3, 1e2, 51)


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """``(slope, intercept, r2)`` of the least-squares line through (x, y)."""
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    return float(slope), float(intercept), float(1 - resid.var() / y.var())


def fit_tanh(x, y) -> TanhFit:
    """Fit ``y ~ c * tanh(alpha * x)`` by least squares over 1-D arrays of equal length.

    For a fixed alpha the best c is closed form, ``<y, t> / <t, t>`` with ``t = tanh(alpha
    x)``; alpha is the best of :data:`ALPHA_GRID`, refined on a finer grid around it.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size < 3:
        raise ValueError(f"need x and y of the same length >= 3, got {x.shape} and {y.shape}")

    def sse(alphas):
        t = np.tanh(np.outer(alphas, x))
        c = (t @ y) / np.maximum((t * t).sum(1), 1e-300)
        return ((y - c[:, None] * t) ** 2).sum(1), c

    err, _ = sse(ALPHA_GRID)
    i = int(np.argmin(err))
    lo, hi = ALPHA_GRID[max(i - 1, 0)], ALPHA_GRID[min(i + 1, len(ALPHA_GRID) - 1)]
    fine = np.geomspace(lo, hi, 41)
    err, c = sse(fine)
    j = int(np.argmin(err))
    slope, intercept, r2_line = fit_line(x, y)
    r2 = 1 - err[j] / (y.size * y.var())
    return TanhFit(float(fine[j]), float(c[j]), float(r2), slope, intercept, r2_line)


@dataclass
class LNCurve:
    """LayerNorm's input against its output (before γ and β), in a trained model.

    - names: the LayerNorms, input side first (``"block3.norm1"``, ..., ``"final"``).
    - fits: one :class:`TanhFit` (as a dict) per name, over a random subset of the batch's
      elements (the same positions for every layer).
    - sigma_spread: per name, the largest per-token σ over the smallest, in the batch.
    - shown: the name whose cloud is kept for the figure; ``x``, ``y``: that subset of its
      (input, normalized output) pairs.
    """

    names: list[str]
    fits: list[dict[str, float]]
    sigma_spread: list[float]
    shown: str
    x: list[float]
    y: list[float]

    def fit(self, name: str | None = None) -> TanhFit:
        return TanhFit(**self.fits[self.names.index(name or self.shown)])


def ln_curve(model, batch, points: int = 3000, seed: int = 0) -> LNCurve:
    """Record every LayerNorm of ``model`` on ``batch.x``: its input x and its normalized
    output (x - mean) / sqrt(var + eps), before the affine part, element by element; fit
    :func:`fit_tanh` to ``points`` of them, drawn at random (the same positions in every layer).
    The figure's cloud is the final norm's (the one that reads the whole residual stream)."""
    import torch
    from torch.nn import functional as F

    from ..nn import LayerNorm

    named = {n: m for n, m in model.named_modules() if isinstance(m, LayerNorm)}
    names = [n.replace("blocks.", "block") if n != "final" else n for n in named]
    seen: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
    handles = []
    for name, module in zip(names, named.values(), strict=True):

        def hook(m, inputs, _out, name=name):
            x = inputs[0].detach()
            y = F.layer_norm(x, (x.shape[-1],), eps=m.eps)  # what gamma and beta then scale
            sigma = x.double().var(-1, unbiased=False).add(m.eps).sqrt()
            spread = float(sigma.max() / sigma.min())
            seen[name] = (x.reshape(-1).double().numpy(), y.reshape(-1).double().numpy(), spread)

        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(batch.x.cpu() if batch.x.is_cuda else batch.x)
    finally:
        for h in handles:
            h.remove()
    n_all = seen[names[0]][0].size
    keep = seeding.rng(seed).choice(n_all, size=min(points, n_all), replace=False)
    fits = [asdict(fit_tanh(seen[n][0][keep], seen[n][1][keep])) for n in names]
    shown = "final" if "final" in seen else names[-1]
    x, y, _ = seen[shown]
    spreads = [seen[n][2] for n in names]
    return LNCurve(names, fits, spreads, shown, x[keep].tolist(), y[keep].tolist())


@dataclass(frozen=True)
class TokenScaleDemo:
    """LayerNorm of synthetic tokens whose scales differ: ``x_t = s_t z_t``, z standard
    normal (D,), log s_t normal with standard deviation ``log_spread``. ``fit``: the
    :class:`TanhFit` of the normalized output against the input; ``x``, ``y``: the cloud."""

    log_spread: float
    fit: TanhFit
    x: np.ndarray
    y: np.ndarray


def token_scale_demo(log_spread: float, tokens: int = 200, d: int = 32, seed: int = 0):
    """Why LayerNorm's element-wise cloud bends: each token is a straight line of slope
    1/σ_t, and the large inputs come from the tokens of large σ_t, whose lines are flattest."""
    from .. import functional as Fn

    rng = seeding.rng(seed)
    s = np.exp(log_spread * rng.standard_normal((tokens, 1)))
    x = s * rng.standard_normal((tokens, d))
    y = Fn.layer_norm(x)
    return TokenScaleDemo(log_spread, fit_tanh(x.ravel(), y.ravel()), x.ravel(), y.ravel())
