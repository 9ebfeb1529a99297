"""Where the norm goes since 2020: the placements of :class:`normedu.transformer.TinyGPT`
beyond Pre- and Post-Norm, DeepNorm's constants, and QK-norm.

One sub-block (attention or MLP, written ``F``) of a residual stream ``x`` (B, T, D):

===============  ==========================================  =================================
placement        sub-block                                   used by
===============  ==========================================  =================================
``"post"``       ``Norm(x + F(x))``                          Vaswani et al., 2017
``"pre"``        ``x + F(Norm(x))``                          GPT-2, LLaMA
``"sandwich"``   ``x + Norm_out(F(Norm_in(x)))``             CogView (Ding et al., 2021)
``"peri"``       the same block as ``"sandwich"``            Peri-LN (Kim et al., 2025), Gemma 2
``"olmo2"``      ``x + Norm(F(x))``                          OLMo 2
``"deepnorm"``   ``Norm(alpha x + F(x))``, beta-scaled init  DeepNet (Wang et al., 2022)
===============  ==========================================  =================================

``"pre"`` and ``"post"`` live in :class:`~normedu.transformer.Block` itself; this module
computes the others (:func:`sublayer`). DeepNorm's constants for a decoder-only stack of N
layers: ``alpha = (2N)^(1/4)`` (:func:`deepnorm_alpha`), and the weights of the feed-forward
layers, the value projection and the output projection start multiplied by
``beta = (8N)^(-1/4)`` (:func:`deepnorm_beta`, applied by :func:`apply_deepnorm_init`).

QK-norm (:class:`QKNorm`): an RMSNorm over each head's Dh features of the queries and of the
keys, with learnable gains, before the dot product (OLMo 2 normalizes over the full width
instead; Gemma 3 and Qwen3 per head, as here). Its logits obey
``|q_hat . k_hat| / sqrt(Dh) <= sqrt(Dh) max|g_q| max|g_k|`` (:func:`qk_logit_bound`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .conventions import DEFAULT_EPS

__all__ = [
    "PLACEMENTS",
    "CLASSIC",
    "OUTPUT_NORMED",
    "FINAL_NORM_BY_DEFAULT",
    "check_placement",
    "deepnorm_alpha",
    "deepnorm_beta",
    "residual_alpha",
    "sublayer",
    "apply_deepnorm_init",
    "max_abs_logit",
    "qk_logit_bound",
    "QKNorm",
]

#: The placements of Pre/Post-Norm (computed in Block itself, unchanged).
CLASSIC = ("pre", "post")
#: Every placement TinyGPT knows, the classic ones first.
PLACEMENTS = (*CLASSIC, "sandwich", "peri", "olmo2", "deepnorm")
#: Placements with a second norm on the sub-layer's output (``Norm_out``).
OUTPUT_NORMED = ("sandwich", "peri")
#: Placements whose residual stream is never normalized, so a final norm is needed before the
#: head (``GPTConfig.final_norm=None`` picks one for these).
FINAL_NORM_BY_DEFAULT = ("pre", "sandwich", "peri", "olmo2")


def check_placement(placement: str) -> str:
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    return placement


def _check_layers(n_layers: int) -> None:
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers must be a positive integer, got {n_layers!r}")


def deepnorm_alpha(n_layers: int) -> float:
    """DeepNorm's residual weight for a decoder-only stack of N layers: ``(2N)^(1/4)``."""
    _check_layers(n_layers)
    return (2 * n_layers) ** 0.25


def deepnorm_beta(n_layers: int) -> float:
    """DeepNorm's init scale of the FF, value and output projections: ``(8N)^(-1/4)``."""
    _check_layers(n_layers)
    return (8 * n_layers) ** -0.25


def residual_alpha(placement: str, n_layers: int) -> float:
    """The weight of ``x`` in the residual sum: DeepNorm's alpha, 1 for every other placement."""
    check_placement(placement)
    return deepnorm_alpha(n_layers) if placement == "deepnorm" else 1.0


def sublayer(placement, x, norm, layer, norm_out=None, alpha=1.0, residual=True):
    """One sub-block of a post-2020 ``placement`` (not ``"pre"``/``"post"``): (B, T, D) in
    and out. ``norm`` is the block's norm (the input norm for sandwich/peri, the output norm
    for olmo2, the norm of the sum for deepnorm); ``norm_out`` the sandwich's output norm;
    ``alpha`` DeepNorm's weight of ``x``. ``residual=False`` drops the ``x`` term."""
    if placement in OUTPUT_NORMED:
        if norm_out is None:
            raise ValueError(f"placement {placement!r} needs an output norm")
        y = norm_out(layer(norm(x)))
        return x + y if residual else y
    if placement == "olmo2":
        y = norm(layer(x))
        return x + y if residual else y
    if placement == "deepnorm":
        y = layer(x)
        return norm(alpha * x + y if residual else y)
    raise ValueError(f"sublayer() computes {PLACEMENTS[2:]}, got {placement!r}")


def apply_deepnorm_init(model, beta: float) -> None:
    """Give every block's MLP (``fc1``, ``fc2``), value projection (the last third of
    ``attn.qkv``'s rows) and output projection (``attn.proj``) DeepNet's init scale: ``beta``
    times the Xavier scale of the matrix DeepNet has. Queries and keys keep gain 1.

    DeepNet draws these from Xavier-normal with gain beta; scaling the model's own Xavier
    draw is the same up to the distribution's shape for ``fc1``, ``fc2`` and ``proj``. The
    value projection is a slice of the fused (3D, D) ``qkv`` whose Xavier bound uses the fan
    sum 4D (variance 1/(2D)), where DeepNet's separate (D, D) value matrix has variance 1/D:
    under the ``"xavier"`` init it is therefore scaled by ``beta * sqrt(4D / 2D)``, so that its
    entries have variance ``beta^2 / D``. (Under ``"gpt2"`` every matrix has std 0.02 whatever
    its shape: ``beta`` alone.)"""
    xavier = getattr(getattr(model, "cfg", None), "init", "xavier") == "xavier"
    with torch.no_grad():
        for block in model.blocks:
            d = block.attn.d_model
            qkv = block.attn.qkv.weight  # (3D, D)
            fused_to_square = math.sqrt(sum(qkv.shape) / (2 * d)) if xavier else 1.0
            qkv[2 * d :].mul_(beta * fused_to_square)
            for lin in (block.attn.proj, block.mlp.fc1, block.mlp.fc2):
                lin.weight.mul_(beta)


@torch.no_grad()
def max_abs_logit(q: Tensor, k: Tensor, causal: bool) -> float:
    """Largest |q . k / sqrt(Dh)| over every head and every position a query may attend to
    (the past and itself if ``causal``); q, k (B, H, T, Dh). Computed only when asked: the
    attention's own fused kernel never forms the logits."""
    scores = (q @ k.transpose(-2, -1)).abs() / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        scores = scores.masked_fill(
            torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), 0.0
        )
    return float(scores.max())


def qk_logit_bound(head_dim: int, g_q, g_k) -> float:
    """Largest possible |logit| with QK-norm: ``sqrt(Dh) * max|g_q| * max|g_k|``.

    After the RMSNorm (eps > 0 only shrinks it) a head's query has ``||q_hat|| <= max|g_q|
    sqrt(Dh)``, its key likewise, and the logit is ``q_hat . k_hat / sqrt(Dh)``; by
    Cauchy-Schwarz ``|logit| <= max|g_q| max|g_k| Dh / sqrt(Dh)``."""
    gq = float(torch.as_tensor(g_q).detach().abs().max())
    gk = float(torch.as_tensor(g_k).detach().abs().max())
    return math.sqrt(head_dim) * gq * gk


class QKNorm(nn.Module):
    """RMSNorm over the last axis (a head's Dh features) of queries and keys, each with its own
    learnable gain (``q_weight``, ``k_weight``, (Dh,), ones). ``forward(q, k)`` takes and
    returns (B, H, T, Dh) tensors."""

    def __init__(self, head_dim: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        if head_dim <= 0:
            raise ValueError(f"head_dim must be positive, got {head_dim}")
        self.head_dim, self.eps = head_dim, eps
        self.q_weight = nn.Parameter(torch.ones(head_dim))
        self.k_weight = nn.Parameter(torch.ones(head_dim))

    def _rms(self, z: Tensor, g: Tensor) -> Tensor:
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + self.eps) * g

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return self._rms(q, self.q_weight), self._rms(k, self.k_weight)
