"""Many copies of one small :class:`normedu.transformer.TinyGPT`, trained in one pass per step.

The warm-up grid of :mod:`.prepost_training` trains the same model (same seed, same batches)
at several peak learning rates and warm-up lengths. At the chapter's CPU size one model's step
is a few hundred tiny operations, so the time goes to launching them, not to arithmetic.
Stacking the n copies' parameters on a leading axis (``(n, *shape)``) and running every layer
as one batched product does n steps for about the launches of one.

:func:`stacked_logits` is TinyGPT's forward (Pre-LN or Post-LN, LayerNorm, causal attention,
GELU, biases) on stacked parameters; a test checks it against TinyGPT copy by copy.
:class:`StackedAdam` is Adam with one learning rate per copy.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from ..training import WrittenAdam

__all__ = ["check_stackable", "stack_params", "unstack", "stacked_logits", "StackedAdam"]


def check_stackable(cfg) -> None:
    """Refuse a :class:`~normedu.transformer.GPTConfig` that :func:`stacked_logits` does not
    reproduce (it implements the classic placements with LayerNorm, causal attention and GELU
    only)."""
    wanted = {
        "norm": "layernorm",
        "residual": True,
        "causal": True,
        "activation": "gelu",
        "residual_scale": "none",
        "qk_norm": False,
    }
    off = {k: getattr(cfg, k) for k, v in wanted.items() if getattr(cfg, k) != v}
    if cfg.placement not in ("pre", "post") or off:
        raise ValueError(
            f"stacked training covers Pre-LN and Post-LN TinyGPT with {wanted}; got placement "
            f"{cfg.placement!r} and {off}"
        )


def stack_params(model, n: int) -> dict[str, Tensor]:
    """n copies of ``model``'s parameters, each (n, *shape), leaves that require grad."""
    return {
        k: p.detach().unsqueeze(0).repeat(n, *([1] * p.dim())).requires_grad_()
        for k, p in model.named_parameters()
    }


def unstack(params: dict[str, Tensor], i: int) -> dict[str, Tensor]:
    """Copy ``i``'s parameters, a state dict for a TinyGPT of the same configuration."""
    return {k: p[i].detach().clone() for k, p in params.items()}


def _linear(p: dict[str, Tensor], name: str, x: Tensor) -> Tensor:
    """x (n, M, in) @ W^T + b, W (n, out, in), b (n, out) -> (n, M, out)."""
    return torch.baddbmm(p[name + ".bias"].unsqueeze(1), x, p[name + ".weight"].transpose(1, 2))


def _layer_norm(p: dict[str, Tensor], name: str, x: Tensor, eps: float) -> Tensor:
    y = F.layer_norm(x, x.shape[-1:], eps=eps)
    return torch.addcmul(p[name + ".bias"].unsqueeze(1), y, p[name + ".weight"].unsqueeze(1))


def stacked_logits(cfg, p: dict[str, Tensor], idx: Tensor, eps: float = 1e-5) -> Tensor:
    """TinyGPT(cfg)'s logits for each of the n stacked copies ``p``: idx (B, T) -> (n, B, T, V).

    The same input for every copy. ``eps``: the LayerNorms' (TinyGPT's default).
    """
    n = p["tok.weight"].shape[0]
    b, t = idx.shape
    d, h = cfg.d_model, cfg.n_heads
    x = (p["tok.weight"][:, idx] + p["pos.weight"][:, :t].unsqueeze(1)).reshape(n, b * t, d)

    def attn(i: int, z: Tensor) -> Tensor:
        q, k, v = _linear(p, f"blocks.{i}.attn.qkv", z).split(d, dim=-1)
        # copies and sequences together on the batch axis of one attention call
        q, k, v = (u.reshape(n * b, t, h, d // h).transpose(1, 2) for u in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return _linear(p, f"blocks.{i}.attn.proj", o.transpose(1, 2).reshape(n, b * t, d))

    def mlp(i: int, z: Tensor) -> Tensor:
        return _linear(p, f"blocks.{i}.mlp.fc2", F.gelu(_linear(p, f"blocks.{i}.mlp.fc1", z)))

    for i in range(cfg.n_layers):
        for norm, sub in (("norm1", attn), ("norm2", mlp)):
            name = f"blocks.{i}.{norm}"
            if cfg.placement == "pre":
                x = x + sub(i, _layer_norm(p, name, x, eps))
            else:
                x = _layer_norm(p, name, x + sub(i, x), eps)
    if cfg.has_final_norm:
        x = _layer_norm(p, "final", x, eps)
    return _linear(p, "head", x).reshape(n, b, t, -1)


class StackedAdam(WrittenAdam):
    """Adam (no weight decay, no amsgrad) on stacked parameters (:func:`stack_params`), one
    learning rate per copy: ``step(lrs)`` with ``lrs`` (n,), each copy's rate at this step.
    The update of ``torch.optim.Adam`` (:class:`normedu.training.WrittenAdam`)."""

    def __init__(self, params: dict[str, Tensor], betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(params.values(), None, betas, eps)
