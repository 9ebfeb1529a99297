"""Per-layer gradient norms for any torch model whose layers you name.

Two measurements, because they answer different questions:

- :func:`param_grad_norms`: the L2 norm of the gradient of each named layer's parameters
  (what the optimizer sees; Xiong et al., 2020 plot this per layer).
- :class:`OutputGradRecorder`: the L2 norm of dL/d(output) of each named layer, i.e. the
  gradient flowing *into* that layer from above (what the gradient highway carries).

:func:`gradient_profile` runs one forward/backward pass and returns either as a
:class:`GradProfile`. Layers are given as a mapping ``{name: module}`` in input-to-output
order, e.g. ``TinyGPT.layers()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from torch import Tensor, nn

__all__ = [
    "GradProfile",
    "param_grad_norms",
    "OutputGradRecorder",
    "gradient_profile",
    "spread",
]


def _check_layers(layers: Mapping[str, nn.Module]) -> None:
    if not isinstance(layers, Mapping) or not layers:
        raise TypeError(
            f"layers must be a non-empty mapping {{name: nn.Module}}, got {type(layers).__name__}"
        )
    bad = [k for k, m in layers.items() if not isinstance(m, nn.Module)]
    if bad:
        raise TypeError(f"layers {bad} are not nn.Module instances")


def param_grad_norms(layers: Mapping[str, nn.Module]) -> dict[str, float]:
    """``{name: ||grad of the layer's parameters||_2}`` after a backward pass.

    The norm is over all of the layer's parameters together (a parameter without a
    gradient counts as zero). Raises ValueError if no parameter of any layer has a gradient,
    which almost always means backward was not called.
    """
    _check_layers(layers)
    out: dict[str, float] = {}
    seen = False
    for name, module in layers.items():
        sq = 0.0
        for p in module.parameters():
            if p.grad is not None:
                seen = True
                sq += float(p.grad.detach().double().pow(2).sum())
        out[name] = sq**0.5
    if not seen:
        raise ValueError("no parameter of the named layers has a .grad: call loss.backward() first")
    return out


class OutputGradRecorder:
    """Context manager recording ||dL/d(output)|| of named layers during backward.

    Usage::

        with OutputGradRecorder(model.layers()) as rec:
            loss_fn(model).backward()
        rec.norms  # {name: float}, input side first

    A layer called several times in one forward pass reports sqrt(sum over calls of
    ||dL/d(output of that call)||^2). A layer whose output receives no gradient reports 0.0.
    """

    def __init__(self, layers: Mapping[str, nn.Module]) -> None:
        _check_layers(layers)
        self.layers = dict(layers)
        self._sq: dict[str, float] = {}
        self._handles: list = []

    def _forward_hook(self, name: str):
        def hook(_module, _inputs, output):
            if isinstance(output, Tensor) and output.requires_grad:

                def grad_hook(grad: Tensor) -> None:
                    self._sq[name] = self._sq.get(name, 0.0) + float(
                        grad.detach().double().pow(2).sum()
                    )

                output.register_hook(grad_hook)

        return hook

    def __enter__(self) -> OutputGradRecorder:
        self._sq = {}
        self._handles = [
            m.register_forward_hook(self._forward_hook(n)) for n, m in self.layers.items()
        ]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    @property
    def norms(self) -> dict[str, float]:
        return {n: self._sq.get(n, 0.0) ** 0.5 for n in self.layers}


@dataclass(frozen=True)
class GradProfile:
    """Gradient norm per layer: ``names`` (L,) input side first, ``norms`` (L,) float64."""

    names: tuple[str, ...]
    norms: np.ndarray
    kind: str  # "param" or "output"

    @property
    def spread(self) -> float:
        """max / min of the norms (inf if a norm is 0)."""
        return spread(self.norms)

    @property
    def last_over_first(self) -> float:
        """norm of the output-side layer divided by that of the input-side layer."""
        return float(self.norms[-1] / self.norms[0]) if self.norms[0] > 0 else float("inf")


def spread(norms) -> float:
    """``max(norms) / min(norms)`` of a 1-D sequence of non-negative numbers."""
    arr = np.asarray(norms, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"norms must be a non-empty 1-D sequence, got shape {arr.shape}")
    lo = arr.min()
    return float(arr.max() / lo) if lo > 0 else float("inf")


def gradient_profile(
    model: nn.Module,
    layers: Mapping[str, nn.Module],
    loss_fn: Callable[[nn.Module], Tensor],
    kind: str = "param",
) -> GradProfile:
    """One forward/backward pass of ``loss_fn(model)`` and the per-layer gradient norms.

    Inputs:
    - model: the model; its existing ``.grad`` s are cleared first.
    - layers: ``{name: submodule}`` in input-to-output order.
    - loss_fn: callable returning a scalar loss tensor for ``model``.
    - kind: ``"param"`` (norm of each layer's parameter gradients) or ``"output"``
      (norm of the gradient with respect to each layer's output).

    Returns a :class:`GradProfile`.
    """
    if kind not in ("param", "output"):
        raise ValueError(f"kind must be 'param' or 'output', got {kind!r}")
    _check_layers(layers)
    model.zero_grad(set_to_none=True)
    if kind == "output":
        with OutputGradRecorder(layers) as rec:
            loss = loss_fn(model)
            _check_loss(loss)
            loss.backward()
        norms = rec.norms
    else:
        loss = loss_fn(model)
        _check_loss(loss)
        loss.backward()
        norms = param_grad_norms(layers)
    names = tuple(layers)
    return GradProfile(names, np.array([norms[n] for n in names], dtype=np.float64), kind)


def _check_loss(loss) -> None:
    if not isinstance(loss, Tensor) or loss.dim() != 0:
        shape = tuple(loss.shape) if isinstance(loss, Tensor) else type(loss).__name__
        raise ValueError(f"loss_fn must return a scalar tensor, got {shape}")
