"""Deep MLPs with a normalization switch, the test subjects of chapters 1-3.

One hidden block is ``Linear -> norm -> activation`` (the norm sits before the non-linearity,
as in Ioffe & Szegedy 2015 and Karpathy's lecture). With ``norm="none"`` the block is
``Linear -> activation``. Weights are drawn ``N(0, (gain / sqrt(fan_in))**2)`` so that
``gain`` is literally the per-layer amplification of a linear layer's output std.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import seeding
from .nn import make_norm, norm_classes

__all__ = ["ACTIVATION_GAINS", "deep_mlp", "activation", "hidden_linears", "norm_layers"]

#: The gain that keeps activations at a stable scale for each non-linearity
#: (``torch.nn.init.calculate_gain``: 5/3 for tanh, sqrt(2) for ReLU, 1 for identity).
ACTIVATION_GAINS: dict[str, float] = {"tanh": 5 / 3, "relu": math.sqrt(2.0), "identity": 1.0}


def activation(name: str) -> nn.Module:
    """``"tanh"``, ``"relu"`` or ``"identity"`` as a module."""
    table = {"tanh": nn.Tanh, "relu": nn.ReLU, "identity": nn.Identity}
    try:
        return table[name.lower()]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(table)}") from None


def deep_mlp(
    d_in: int,
    width: int,
    d_out: int,
    depth: int,
    norm: str = "none",
    act: str = "tanh",
    gain: float | None = None,
    seed: int | None = 0,
    bias: bool = True,
) -> nn.Sequential:
    """A deep MLP: ``[Linear(d, width) -> norm -> act] * depth -> Linear(width, d_out)``.

    Inputs:
    - d_in, width, d_out: input features, hidden width, outputs (e.g. classes).
    - depth: number of hidden blocks (>= 1).
    - norm: ``"none"`` or a kind of :data:`normedu.norms.NORMS` (``"batchnorm"``,
      ``"layernorm"``, ``"rmsnorm"``, ``"groupnorm"``), built by :func:`normedu.nn.make_norm`.
    - act: ``"tanh"``, ``"relu"`` or ``"identity"``.
    - gain: hidden weights ~ N(0, (gain/sqrt(fan_in))^2); default :data:`ACTIVATION_GAINS`
      of ``act``. The output layer is scaled by 0.1 so the initial softmax is near uniform.
    - seed: seed for the weights (None: use the global RNG).
    - bias: whether hidden Linears have a bias (a norm with a shift makes it redundant).

    Returns an ``nn.Sequential``; input (N, d_in) -> logits (N, d_out).
    """
    for name, v in (("d_in", d_in), ("width", width), ("d_out", d_out), ("depth", depth)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    activation(act)  # validates the name before anything is built
    g = ACTIVATION_GAINS[act.lower()] if gain is None else gain
    if g is None or g <= 0:
        raise ValueError(f"gain must be positive, got {gain!r}")
    gen = seeding.generator(seed) if seed is not None else None
    layers: list[nn.Module] = []
    d = d_in
    for _ in range(depth):
        lin = nn.Linear(d, width, bias=bias)
        _init(lin, g, gen)
        layers += [lin, make_norm(norm, width), activation(act)]
        d = width
    head = nn.Linear(d, d_out)
    _init(head, 0.1, gen)
    layers.append(head)
    # Drop the Identity placeholders of norm="none" so the model prints as what it is.
    return nn.Sequential(
        *[m for m in layers if not isinstance(m, nn.Identity) or act == "identity"]
    )


def _init(lin: nn.Linear, gain: float, gen: torch.Generator | None) -> None:
    with torch.no_grad():
        w = torch.randn(lin.weight.shape, generator=gen) * (gain / math.sqrt(lin.in_features))
        lin.weight.copy_(w)
        if lin.bias is not None:
            lin.bias.zero_()


def hidden_linears(model: nn.Module) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of ``model`` in order, without the output layer."""
    lins = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return lins[:-1]


def norm_layers(model: nn.Module) -> list[nn.Module]:
    """Every normalization module of ``model``: the registered norms, normedu's or torch's."""
    kinds = norm_classes()
    return [m for m in model.modules() if isinstance(m, kinds)]
