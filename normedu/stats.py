"""Per-layer activation and gradient statistics from any torch model, collected with hooks.

These are the diagnostic views of Karpathy's BatchNorm lecture (makemore part 3): for every
chosen layer, the mean, standard deviation and histogram of its output, the share of
saturated units, and the same for the gradient of the loss with respect to that output.

Usage::

    with StatsRecorder(model) as rec:          # hooks on every activation module
        loss = loss_fn(model(x), y)
        loss.backward()
    rec.records                                # list[LayerStats], in forward order

The recorder removes its hooks when the ``with`` block ends (or on :meth:`StatsRecorder.close`),
so the model is left exactly as it was. If a layer runs several times in one block, the last
call wins. Gradients are recorded only for outputs that require grad and only if ``backward``
is called inside the block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "ACTIVATIONS",
    "LayerStats",
    "StatsRecorder",
    "saturation",
    "histogram",
]

#: Module types recorded by default: the non-linearities, whose outputs are "the activations".
ACTIVATIONS: tuple[type[nn.Module], ...] = (
    nn.Tanh,
    nn.ReLU,
    nn.Sigmoid,
    nn.GELU,
    nn.LeakyReLU,
    nn.SiLU,
)

#: |tanh| above this counts as saturated (its local gradient 1 - 0.97**2 is below 0.06).
TANH_SATURATION = 0.97


def saturation(module: nn.Module, out: Tensor, threshold: float = TANH_SATURATION) -> float:
    """Share (in %) of the output of ``module`` sitting where its local gradient is (near) zero.

    - Tanh: ``|out| > threshold``; Sigmoid: ``out > threshold`` or ``out < 1 - threshold``.
    - ReLU: ``out == 0`` (the unit passes no gradient back).
    - Any other module: NaN (saturation is not defined).
    """
    with torch.no_grad():
        if isinstance(module, nn.Tanh):
            return float((out.abs() > threshold).float().mean()) * 100
        if isinstance(module, nn.Sigmoid):
            return float(((out > threshold) | (out < 1 - threshold)).float().mean()) * 100
        if isinstance(module, nn.ReLU):
            return float((out == 0).float().mean()) * 100
    return float("nan")


def histogram(values: Tensor, bins: int = 60, range: tuple[float, float] | None = None):
    """``(counts, edges)`` of a tensor as float64 numpy arrays; density-normalised counts.

    ``range`` defaults to the symmetric ``(-m, m)`` with ``m = max |values|`` so that
    histograms of different layers are centred alike. Non-finite values are dropped.
    """
    v = values.detach().double().flatten().cpu().numpy()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.zeros(bins), np.linspace(-1.0, 1.0, bins + 1)
    if range is None:
        m = float(np.abs(v).max()) or 1.0
        range = (-m, m)
    counts, edges = np.histogram(v, bins=bins, range=range, density=True)
    return counts, edges


@dataclass
class LayerStats:
    """Statistics of one layer's output (``act_*``) and of dLoss/d(output) (``grad_*``).

    - name: the module's qualified name in the model (``model.named_modules()``).
    - kind: the module's class name, e.g. ``"Tanh"``.
    - index: position in forward order among the recorded layers (0 = first).
    - shape: shape of the output tensor.
    - act_mean, act_std: mean and (biased) std over every element of the output.
    - saturation: % of saturated units (see :func:`saturation`; NaN if undefined).
    - act_hist: ``(counts, edges)`` density histogram of the output.
    - grad_mean, grad_std, grad_norm: of the gradient w.r.t. the output (NaN if none);
      ``grad_norm`` is the Frobenius norm of the whole gradient tensor.
    - grad_hist: ``(counts, edges)`` or None.
    """

    name: str
    kind: str
    index: int
    shape: tuple[int, ...]
    act_mean: float
    act_std: float
    saturation: float
    act_hist: tuple[np.ndarray, np.ndarray]
    grad_mean: float = float("nan")
    grad_std: float = float("nan")
    grad_norm: float = float("nan")
    grad_hist: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)


Selector = tuple[type[nn.Module], ...] | Callable[[str, nn.Module], bool]


class StatsRecorder:
    """Record :class:`LayerStats` for chosen modules of ``model`` while active.

    Inputs:
    - model: any ``nn.Module``.
    - select: a tuple of module types (default :data:`ACTIVATIONS`) or a predicate
      ``(name, module) -> bool`` choosing which modules to record.
    - bins: number of histogram bins.
    - act_range, grad_range: fixed histogram ranges, or None for a symmetric range per layer.
    - saturation_threshold: passed to :func:`saturation`.

    Use as a context manager, or call :meth:`attach` and :meth:`close` yourself.
    """

    def __init__(
        self,
        model: nn.Module,
        select: Selector = ACTIVATIONS,
        bins: int = 60,
        act_range: tuple[float, float] | None = None,
        grad_range: tuple[float, float] | None = None,
        saturation_threshold: float = TANH_SATURATION,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got {bins}")
        if isinstance(select, tuple):
            types = select
            self._select: Callable[[str, nn.Module], bool] = lambda n, m: isinstance(m, types)
        elif callable(select):
            self._select = select
        else:
            raise TypeError(
                f"select must be a tuple of module types or a predicate, got {select!r}"
            )
        self.model = model
        self.bins, self.act_range, self.grad_range = bins, act_range, grad_range
        self.threshold = saturation_threshold
        self._handles: list = []
        self._stats: dict[str, LayerStats] = {}
        self._order: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def attach(self) -> StatsRecorder:
        if self._handles:
            raise RuntimeError("StatsRecorder is already attached")
        chosen = [(n, m) for n, m in self.model.named_modules() if n and self._select(n, m)]
        if not chosen and self._select("", self.model):
            chosen = [("", self.model)]
        if not chosen:
            raise ValueError(
                f"no module of {type(self.model).__name__} matches the selection; "
                "pass select=(SomeModuleType, ...) or a predicate"
            )
        for name, module in chosen:
            self._handles.append(module.register_forward_hook(self._make_hook(name)))
        return self

    def close(self) -> None:
        """Remove every hook (idempotent); the records stay available."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> StatsRecorder:
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- hooks -------------------------------------------------------------------------------
    def _make_hook(self, name: str):
        def hook(module: nn.Module, inputs, out):
            if not isinstance(out, Tensor):
                return
            if name not in self._stats:
                self._order.append(name)
            o = out.detach()
            self._stats[name] = LayerStats(
                name=name,
                kind=type(module).__name__,
                index=self._order.index(name),
                shape=tuple(o.shape),
                act_mean=float(o.float().mean()),
                act_std=float(o.float().std(unbiased=False)),
                saturation=saturation(module, o, self.threshold),
                act_hist=histogram(o, self.bins, self.act_range),
            )
            if out.requires_grad:
                out.register_hook(self._make_grad_hook(name))

        return hook

    def _make_grad_hook(self, name: str):
        def grad_hook(grad: Tensor):
            g = grad.detach().float()
            s = self._stats[name]
            s.grad_mean = float(g.mean())
            s.grad_std = float(g.std(unbiased=False))
            s.grad_norm = float(g.norm())
            s.grad_hist = histogram(g, self.bins, self.grad_range)
            return None

        return grad_hook

    # -- results -----------------------------------------------------------------------------
    @property
    def records(self) -> list[LayerStats]:
        """The recorded layers in forward order."""
        return [self._stats[n] for n in self._order]

    def table(self) -> list[dict]:
        """Records as plain dicts without the histograms (for tables and JSON)."""
        keys = (
            "index",
            "name",
            "kind",
            "act_mean",
            "act_std",
            "saturation",
            "grad_std",
            "grad_norm",
        )
        return [{k: getattr(s, k) for k in keys} for s in self.records]
