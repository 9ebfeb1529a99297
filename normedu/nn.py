"""Textbook PyTorch norms: functions and ``nn.Module`` s the experiments build models from.

They are written out of elementary tensor ops (autograd provides the backward) so that a
reader sees every step, and they follow the conventions of :mod:`normedu.functional`:
eps inside the square root, biased variance to normalize, unbiased running variance,
momentum on the new value, two-pass variance, half precision computed in float32.

Shapes:
- :func:`layer_norm`, :func:`rms_norm`, :class:`LayerNorm`, :class:`RMSNorm`: x (..., D).
- :func:`batch_norm`, :class:`BatchNorm1d`: x (N, C) or (N, C, L).
- :func:`group_norm`, :class:`GroupNorm`: x (N, C) or (N, C, *spatial), C divisible by the
  number of groups G; groups are adjacent channels.
- :func:`dyt`, :class:`DyT`: x (..., D); an element-wise map, no statistics and no eps.

``tests/test_nn.py`` checks each against ``torch.nn.functional`` and ``torch.nn``.
"""

from __future__ import annotations

import math
import sys

import torch
from torch import Tensor, nn

from . import norms
from .conventions import DEFAULT_EPS, DEFAULT_MOMENTUM

__all__ = [
    "layer_norm",
    "rms_norm",
    "batch_norm",
    "group_norm",
    "dyt",
    "LayerNorm",
    "RMSNorm",
    "BatchNorm1d",
    "GroupNorm",
    "DyT",
    "make_norm",
    "norm_classes",
]


def _upcast(x: Tensor) -> Tensor:
    if not torch.is_floating_point(x):
        raise TypeError(
            f"expected a floating-point tensor, got dtype {x.dtype} (shape {tuple(x.shape)})"
        )
    # Half-precision reductions over hundreds of features lose most of their digits.
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _check_param(p: Tensor | None, size: int, name: str, x: Tensor, axis: str) -> None:
    if p is not None and tuple(p.shape) != (size,):
        raise ValueError(
            f"{name} has shape {tuple(p.shape)}, expected ({size},) to match {axis} of x with "
            f"shape {tuple(x.shape)}"
        )


def _check_last(x: Tensor) -> int:
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}: it needs a non-empty last (feature) axis")
    return x.shape[-1]


def layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = DEFAULT_EPS
) -> Tensor:
    """LayerNorm over the last axis: x (..., D), weight/bias (D,) or None -> (..., D)."""
    d = _check_last(x)
    _check_param(weight, d, "weight", x, "the last axis")
    _check_param(bias, d, "bias", x, "the last axis")
    xf = _upcast(x)
    centered = xf - xf.mean(dim=-1, keepdim=True)
    var = (centered * centered).mean(dim=-1, keepdim=True)
    out = centered * torch.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.to(x.dtype)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = DEFAULT_EPS) -> Tensor:
    """RMSNorm over the last axis: ``weight * x / sqrt(mean(x**2) + eps)``; x (..., D)."""
    d = _check_last(x)
    _check_param(weight, d, "weight", x, "the last axis")
    xf = _upcast(x)
    out = xf * torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    return out.to(x.dtype)


def batch_norm(
    x: Tensor,
    *,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    training: bool = True,
    momentum: float = DEFAULT_MOMENTUM,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """BatchNorm for x (N, C) or (N, C, L), updating ``running_*`` **in place** in training.

    Everything after ``x`` is keyword-only; the four (C,) tensors are ``weight, bias,
    running_mean, running_var``, the order of :func:`normedu.functional.batch_norm`'s
    ``gamma, beta, running_mean, running_var`` (``torch.nn.functional.batch_norm`` puts the
    running statistics first, which is why no position is trusted). ``running_*`` None: no
    tracking (training mode only).

    The in-place update mirrors ``F.batch_norm`` so that the module below can hold the
    running statistics as buffers.
    """
    if x.dim() < 2:
        raise ValueError(f"batch_norm needs x of shape (N, C) or (N, C, L), got {tuple(x.shape)}")
    c = x.shape[1]
    for p, name in (
        (weight, "weight"),
        (bias, "bias"),
        (running_mean, "running_mean"),
        (running_var, "running_var"),
    ):
        _check_param(p, c, name, x, "the channel axis (axis 1)")
    xf = _upcast(x)
    axes = [0] + list(range(2, x.dim()))
    bshape = [1, c] + [1] * (x.dim() - 2)
    if training:
        m = x.numel() // c
        if m < 2:
            raise ValueError(
                f"training-mode batch_norm needs more than 1 value per channel, "
                f"got {tuple(x.shape)}"
            )
        mean = xf.mean(dim=axes, keepdim=True)
        centered = xf - mean
        var = (centered * centered).mean(dim=axes, keepdim=True)
        out = centered * torch.rsqrt(var + eps)
        if running_mean is not None and running_var is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(
                    momentum * mean.reshape(c).to(running_mean.dtype)
                )
                unbiased = var.reshape(c) * (m / (m - 1))
                running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
    else:
        if running_mean is None or running_var is None:
            raise ValueError("eval-mode batch_norm needs running_mean and running_var")
        out = (xf - running_mean.reshape(bshape)) * torch.rsqrt(running_var.reshape(bshape) + eps)
    if weight is not None:
        out = out * weight.reshape(bshape)
    if bias is not None:
        out = out + bias.reshape(bshape)
    return out.to(x.dtype)


def group_norm(
    x: Tensor,
    groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """GroupNorm: x (N, C, *spatial) -> same shape; weight/bias (C,) or None.

    The arguments come in PyTorch's order, ``(x, groups, weight, bias, eps)`` as in
    ``torch.nn.functional.group_norm`` that this function mirrors; the NumPy reference
    :func:`normedu.functional.group_norm` and the exercise take ``(x, gamma, beta, G, eps)``.

    Each sample's C channels are cut into ``groups`` groups of adjacent channels, and every
    (sample, group) is normalized over its channels and spatial positions: LayerNorm of the
    rows of ``x.reshape(N, groups, -1)``. No batch statistics, so no running buffers.
    """
    if x.dim() < 2:
        raise ValueError(f"group_norm needs x of shape (N, C, *spatial), got {tuple(x.shape)}")
    n, c = x.shape[0], x.shape[1]
    if groups < 1 or c % groups != 0:
        raise ValueError(
            f"the C = {c} channels cannot be split into G = {groups} groups of equal size: "
            "C must be divisible by G"
        )
    _check_param(weight, c, "weight", x, "the channel axis (axis 1)")
    _check_param(bias, c, "bias", x, "the channel axis (axis 1)")
    # The group's size spelled out: with -1, an empty batch (N = 0) leaves it undefined.
    xf = _upcast(x).reshape(n, groups, (c // groups) * math.prod(x.shape[2:]))
    centered = xf - xf.mean(dim=-1, keepdim=True)
    var = (centered * centered).mean(dim=-1, keepdim=True)
    out = (centered * torch.rsqrt(var + eps)).reshape(x.shape)
    bshape = [1, c] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(bshape)
    if bias is not None:
        out = out + bias.reshape(bshape)
    return out.to(x.dtype)


class LayerNorm(nn.Module):
    """LayerNorm over the last axis; learnable ``weight`` (gamma, ones), ``bias`` (beta, zeros).

    Parameters: 2 * d (d with ``bias=False``). Input (..., d) -> output (..., d).
    """

    def __init__(self, d: int, eps: float = DEFAULT_EPS, bias: bool = True) -> None:
        super().__init__()
        if d <= 0:
            raise ValueError(f"d must be positive, got {d}")
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}, bias={self.bias is not None}"


class RMSNorm(nn.Module):
    """RMSNorm over the last axis with a learnable ``weight`` (gamma, ones) and no bias.

    Parameters: d. Input (..., d) -> output (..., d). eps defaults to 1e-5 (the LLaMA value),
    whereas ``torch.nn.RMSNorm(eps=None)`` uses the machine epsilon of the type it
    computes in (float32's for float16 and bfloat16 inputs).
    """

    def __init__(self, d: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        if d <= 0:
            raise ValueError(f"d must be positive, got {d}")
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"


class BatchNorm1d(nn.Module):
    """BatchNorm over (N, C) or (N, C, L) with PyTorch's conventions.

    Parameters: ``weight``, ``bias`` (C each); buffers ``running_mean`` (zeros), ``running_var``
    (ones): 2C parameters + 2C buffers. ``train()`` uses batch statistics and updates the
    buffers; ``eval()`` uses the buffers.
    """

    def __init__(
        self, c: int, eps: float = DEFAULT_EPS, momentum: float = DEFAULT_MOMENTUM
    ) -> None:
        super().__init__()
        if c <= 0:
            raise ValueError(f"c must be positive, got {c}")
        self.c, self.eps, self.momentum = c, eps, momentum
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c))
        self.register_buffer("running_mean", torch.zeros(c))
        self.register_buffer("running_var", torch.ones(c))

    def forward(self, x: Tensor) -> Tensor:
        return batch_norm(
            x,
            weight=self.weight,
            bias=self.bias,
            running_mean=self.running_mean,
            running_var=self.running_var,
            training=self.training,
            momentum=self.momentum,
            eps=self.eps,
        )

    def extra_repr(self) -> str:
        return f"{self.c}, eps={self.eps}, momentum={self.momentum}"


class GroupNorm(nn.Module):
    """GroupNorm over (N, C, *spatial) with ``groups`` groups of adjacent channels.

    Parameters: ``weight`` (gamma, ones) and ``bias`` (beta, zeros), C each (none with
    ``affine=False``); no buffers: train and eval mode compute the same thing.
    ``GroupNorm(1, C)`` is LayerNorm over (C, *spatial); ``GroupNorm(C, C)`` is InstanceNorm.
    """

    def __init__(self, groups: int, c: int, eps: float = DEFAULT_EPS, affine: bool = True) -> None:
        super().__init__()
        if c <= 0 or groups <= 0 or c % groups != 0:
            raise ValueError(
                f"GroupNorm needs positive C divisible by G, got C = {c} and G = {groups}"
            )
        self.groups, self.c, self.eps = groups, c, eps
        self.weight = nn.Parameter(torch.ones(c)) if affine else None
        self.bias = nn.Parameter(torch.zeros(c)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return group_norm(x, self.groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.groups}, {self.c}, eps={self.eps}, affine={self.weight is not None}"


def dyt(
    x: Tensor, alpha: Tensor | float, weight: Tensor | None = None, bias: Tensor | None = None
) -> Tensor:
    """Dynamic Tanh (Zhu et al., 2025): ``weight * tanh(alpha * x) + bias``.

    x (..., D); alpha a scalar (a 0-d tensor or a float); weight (gamma) and bias (beta) (D,) or
    None -> (..., D). Element by element: no mean, no variance, so no eps.
    """
    d = _check_last(x)
    _check_param(weight, d, "weight", x, "the last axis")
    _check_param(bias, d, "bias", x, "the last axis")
    if isinstance(alpha, Tensor) and alpha.numel() != 1:
        raise ValueError(f"alpha must be a scalar, got shape {tuple(alpha.shape)}")
    out = torch.tanh(alpha * _upcast(x))
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.to(x.dtype)


class DyT(nn.Module):
    """Dynamic Tanh, a drop-in replacement for LayerNorm (Zhu et al., 2025).

    ``y = weight * tanh(alpha * x) + bias`` over the last axis, element by element. Parameters:
    ``alpha`` (a 0-d scalar, starts at ``alpha0``; the paper's default is 0.5), ``weight``
    (gamma, (d,), ones) and ``bias`` (beta, (d,), zeros): 2 d + 1 in all. Input (..., d) ->
    output (..., d). No ``eps``: nothing is divided.
    """

    def __init__(self, d: int, alpha0: float = 0.5) -> None:
        super().__init__()
        if d <= 0:
            raise ValueError(f"d must be positive, got {d}")
        self.d, self.alpha0 = d, alpha0
        self.alpha = nn.Parameter(torch.tensor(float(alpha0)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: Tensor) -> Tensor:
        return dyt(x, self.alpha, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.d}, alpha0={self.alpha0}"


nn_module = sys.modules[__name__]


def _module_class(spec: norms.NormSpec) -> type[nn.Module]:
    # "torch.nn.Name": a norm the course takes from torch; otherwise a class of this module.
    return getattr(nn if spec.module.startswith("torch.nn.") else nn_module, spec.class_name)


def make_norm(kind: str, d: int, eps: float = DEFAULT_EPS) -> nn.Module:
    """Build the norm ``kind`` of :data:`normedu.norms.NORMS` for width ``d``, or ``"none"``.

    ``"layernorm"``, ``"rmsnorm"``, ``"batchnorm"``, ``"groupnorm"`` (groups of
    :func:`normedu.norms.groups_for`), ``"dyt"`` (``eps`` unused: DyT has none) or ``"none"``
    (an ``nn.Identity``); case-insensitive.
    Models that take a ``norm=`` switch call this so every experiment spells the kinds the same.
    ``"groupnorm"`` expects inputs (N, d, *spatial), channels on axis 1.
    """
    if kind.lower() == norms.NONE:
        return nn.Identity()
    spec = norms.get(kind)
    cls = _module_class(spec)
    # A norm without eps (DyT) divides by nothing: it is built from the width alone.
    kw = {"eps": eps} if spec.has_eps else {}
    if spec.grouped:
        return cls(norms.groups_for(d), d, **kw)
    return cls(d, **kw)


def norm_classes(*, per_token: bool | None = None) -> tuple[type[nn.Module], ...]:
    """The module classes of the registered norms, normedu's and torch's (for isinstance).

    ``per_token``: only the norms that do (True) or do not (False) normalize each row alone.
    """
    found: list[type[nn.Module]] = []
    for spec in norms.NORMS:
        if per_token is None or spec.per_token == per_token:
            found.append(_module_class(spec))
            found += [getattr(nn, n) for n in spec.torch_modules if hasattr(nn, n)]
    return tuple(dict.fromkeys(found))
