"""A small GPT-style Transformer whose norm placement and kind are switches.

The stack is the decoder-only model of GPT-2 cut down to what the course needs: token and
position embeddings, ``n_layers`` blocks of causal multi-head self-attention and a two-layer
MLP, an optional final norm, and a linear LM head. Every block has the two sub-blocks wired
one of two ways (``placement``):

- ``"post"`` (Vaswani et al., 2017): ``x = Norm(x + Sublayer(x))`` for each sub-block, so
  every path from input to output crosses a norm.
- ``"pre"`` (GPT-2, LLaMA): ``x = x + Sublayer(Norm(x))``; the residual stream is never
  normalized, and a final norm sits after the last block (``final_norm=None`` picks this).
- the placements of today's large models, ``"sandwich"``/``"peri"``, ``"olmo2"`` and
  ``"deepnorm"``, are in :mod:`normedu.placements`, as is ``qk_norm`` (an RMSNorm over each
  head's queries and keys); ``record_logits`` makes the attention keep the largest |logit| of
  its last forward pass.

``norm`` is a per-token norm of :data:`normedu.norms.NORMS` (``"layernorm"``,
``"rmsnorm"``, ``"dyt"``) or ``"none"`` (built with :func:`normedu.nn.make_norm`), and
``residual=False`` removes the skip connections (the ablation of the gradient-highway
experiment). ``residual_scale="rezero"`` multiplies each sub-block's branch by a learnable
scalar that starts at 0 (ReZero, Bachlechner et al.; SkipInit, De and Smith): the stack starts
as the identity on the residual stream. ``causal``, ``activation`` and ``embed_std``
switch off the ways the stack differs from a plain encoder layer stack such as
``torch.nn.TransformerEncoderLayer`` (no mask, ReLU, unit-variance inputs); the Pre/Post-Norm
chapter flips them one at a time.

Shapes: token ids ``idx`` (B, T) int64 with T <= ``max_len``; hidden states (B, T, D);
logits (B, T, V). Initialisation is deterministic given ``seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from . import norms, placements, seeding
from .nn import make_norm, norm_classes

__all__ = [
    "GPTConfig",
    "CausalSelfAttention",
    "MLP",
    "Block",
    "TinyGPT",
    "count_norms",
]

PLACEMENTS = placements.PLACEMENTS
#: The per-token norms of the registry, and no norm.
NORMS = (*norms.kinds(per_token=True), norms.NONE)
INITS = ("xavier", "gpt2")
ACTIVATIONS = ("gelu", "relu")
#: ``residual_scale``: no gate, or ReZero's learnable scalar per branch, initialized at 0.
RESIDUAL_SCALES = ("none", "rezero")


@dataclass(frozen=True)
class GPTConfig:
    """Hyper-parameters of :class:`TinyGPT`.

    - vocab: number of token ids V.
    - d_model: width D; must be divisible by ``n_heads``.
    - n_heads: attention heads H (head size D / H).
    - n_layers: number of blocks L.
    - d_ff: hidden width of the MLP (default 4 D).
    - max_len: longest sequence T the position embedding covers.
    - placement: ``"pre"`` or ``"post"``, or one of :data:`normedu.placements.PLACEMENTS`.
    - norm: ``"layernorm"``, ``"rmsnorm"`` or ``"none"``.
    - residual: keep the skip connections.
    - final_norm: norm after the last block; None means "where the stream is never
      normalized" (pre, sandwich/peri, olmo2: :data:`normedu.placements.FINAL_NORM_BY_DEFAULT`).
    - init: ``"xavier"`` (Xavier-uniform weights, as in Xiong et al., 2020; Vaswani et al.'s
      paper does not state its initialization)
      or ``"gpt2"`` (normal with std 0.02, output projections scaled by 1/sqrt(2 L)).
    - seed: seed of the initialisation.
    - causal: mask the future in attention (False: every position sees every position).
    - activation: the MLP's non-linearity, ``"gelu"`` (GPT-2) or ``"relu"`` (Vaswani et al.).
    - embed_std: std of the token and the position embedding weights; None keeps the
      ``init`` default (D^-1/2 for xavier, 0.02 for gpt2). 2^-1/2 makes their sum, the input
      of block 0, unit-variance.
    - residual_scale: ``"none"``, or ``"rezero"``: each sub-block adds ``a * branch`` with a
      learnable scalar ``a`` per branch that starts at 0 (needs ``residual``); ReZero pairs it
      with ``norm="none"``. ReZero's own Transformer has ONE gate per block, shared by both
      branches (Bachlechner et al.'s ``resweight``); two per block is this course's variant.
    - embed_scale: multiply the embeddings' sum (the stream entering block 0) by a learnable
      scalar initialized at sqrt(D), as Zhu et al. do for LLaMA with DyT (their Appendix A:
      without it the activations are too small at the start of training).
    - qk_norm: RMSNorm (learnable gains) over each head's Dh features of q and k.
    """

    vocab: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int | None = None
    max_len: int = 64
    placement: str = "pre"
    norm: str = "layernorm"
    residual: bool = True
    final_norm: bool | None = None
    init: str = "xavier"
    seed: int = 0
    causal: bool = True
    activation: str = "gelu"
    embed_std: float | None = None
    residual_scale: str = "none"
    qk_norm: bool = False
    embed_scale: bool = False

    def __post_init__(self) -> None:
        placements.check_placement(self.placement)
        if not isinstance(self.qk_norm, bool):
            raise ValueError(f"qk_norm must be True or False, got {self.qk_norm!r}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.residual_scale not in RESIDUAL_SCALES:
            raise ValueError(
                f"residual_scale must be one of {RESIDUAL_SCALES}, got {self.residual_scale!r}"
            )
        if self.residual_scale != "none" and not self.residual:
            raise ValueError("residual_scale scales the residual branch: it needs residual=True")
        if self.residual_scale != "none" and self.placement not in placements.CLASSIC:
            raise ValueError(
                f"residual_scale={self.residual_scale!r} works with the classic placements "
                f"{placements.CLASSIC}, not {self.placement!r}"
            )
        if self.embed_std is not None and self.embed_std <= 0:
            raise ValueError(f"embed_std must be positive, got {self.embed_std}")
        for name in ("vocab", "d_model", "n_heads", "n_layers", "max_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")

    @property
    def ff(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def has_final_norm(self) -> bool:
        if self.norm == "none":
            return False
        if self.final_norm is None:
            return self.placement in placements.FINAL_NORM_BY_DEFAULT
        return self.final_norm

    def with_(self, **changes) -> GPTConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t attends to positions <= t (``causal``).

    ``qkv`` is one (D -> 3D) linear map whose output splits into queries, keys and values in
    that order (the layout of ``nn.MultiheadAttention.in_proj_weight``); ``proj`` maps the
    concatenated heads back to D. Input (B, T, D) -> output (B, T, D). With
    ``causal=False`` every position attends to every position. ``qk_norm=True`` normalizes
    each head's queries and keys (:class:`normedu.placements.QKNorm`) before the product;
    ``record_logits = True`` keeps the largest |logit| of each forward in ``max_logit``.
    """

    def __init__(
        self, d_model: int, n_heads: int, causal: bool = True, qk_norm: bool = False
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.causal = d_model, n_heads, causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.qk_norm = placements.QKNorm(d_model // n_heads) if qk_norm else None
        #: Set True to keep the largest |logit| of each forward in ``max_logit`` (a float).
        self.record_logits = False
        self.max_logit = float("nan")

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"expected x of shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        # (B, T, D) -> (B, H, T, D/H): each head attends on its own slice of the width.
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)
        if self.record_logits:
            self.max_logit = placements.max_abs_logit(q, k, self.causal)
        # softmax(q k^T / sqrt(D/H), future positions at -inf) v, in one fused kernel. Written
        # out as scores, mask and softmax it is the same up to float rounding, but on a CPU
        # PyTorch's softmax is about ten times slower per element over rows shorter than 16
        # positions, and the chapter's sequences are 12 long: its experiments took a sixth
        # longer that way.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    """Position-wise feed-forward network ``fc2(act(fc1(x)))``: (..., D) -> (..., D).

    ``activation`` is ``"gelu"`` (default) or ``"relu"``.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.act = F.gelu if activation == "gelu" else F.relu

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """One Transformer block: attention then MLP, each with its norm and (optional) residual.

    With ``placement="pre"``: ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``.
    With ``placement="post"``: ``norm1(x + attn(x))`` then ``norm2(x + mlp(x))``.
    The placements since 2020 (``"sandwich"``/``"peri"`` with ``norm1_out``/``norm2_out``,
    ``"olmo2"``, ``"deepnorm"`` with ``alpha``) are :func:`normedu.placements.sublayer`.
    Without residual the ``x +`` is dropped. With ``residual_scale="rezero"`` each branch is
    multiplied by its scalar ``gate1`` / ``gate2`` (0 at init) before it is added.
    Input and output (B, T, D).
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.placement, self.residual = cfg.placement, cfg.residual
        self.norm1 = make_norm(cfg.norm, cfg.d_model)
        self.attn = CausalSelfAttention(cfg.d_model, cfg.n_heads, cfg.causal, cfg.qk_norm)
        self.norm2 = make_norm(cfg.norm, cfg.d_model)
        self.mlp = MLP(cfg.d_model, cfg.ff, cfg.activation)
        # ReZero: one scalar per branch, at 0, so that every block starts as the identity.
        self.gate1 = self.gate2 = None
        if cfg.residual_scale == "rezero":
            self.gate1, self.gate2 = nn.Parameter(torch.zeros(())), nn.Parameter(torch.zeros(()))
        # The placements since 2020 (normedu.placements): sandwich/peri's output norms and
        # DeepNorm's weight of the residual.
        if cfg.placement in placements.OUTPUT_NORMED:
            self.norm1_out = make_norm(cfg.norm, cfg.d_model)
            self.norm2_out = make_norm(cfg.norm, cfg.d_model)
        self.alpha = placements.residual_alpha(cfg.placement, cfg.n_layers)

    def _sub(self, x: Tensor, norm: nn.Module, layer: nn.Module, out=None, gate=None) -> Tensor:
        if self.placement not in placements.CLASSIC:
            return placements.sublayer(
                self.placement, x, norm, layer, out, self.alpha, self.residual
            )
        if self.placement == "pre":
            y = layer(norm(x))
            y = y if gate is None else gate * y
            return x + y if self.residual else y
        y = layer(x)
        y = y if gate is None else gate * y
        return norm(x + y if self.residual else y)

    def forward(self, x: Tensor) -> Tensor:
        x = self._sub(x, self.norm1, self.attn, getattr(self, "norm1_out", None), self.gate1)
        return self._sub(x, self.norm2, self.mlp, getattr(self, "norm2_out", None), self.gate2)


class TinyGPT(nn.Module):
    """Token + position embedding, ``n_layers`` :class:`Block` s, optional final norm, LM head.

    ``forward(idx)`` takes token ids (B, T) and returns logits (B, T, V).
    ``blocks`` is an ``nn.ModuleList``; :meth:`layers` names them ``"block0"`` ... for
    :mod:`normedu.gradflow`.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.final = make_norm(cfg.norm, cfg.d_model) if cfg.has_final_norm else nn.Identity()
        self.head = nn.Linear(cfg.d_model, cfg.vocab)
        # DyT's learnable scalar after the embedding (Zhu et al., App. A), sqrt(D) at init.
        self.embed_gain = nn.Parameter(torch.ones(())) if cfg.embed_scale else None
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Deterministic init from ``cfg.seed``; norms start as identity (gamma 1, beta 0)."""
        gen = seeding.generator(self.cfg.seed)
        n_layers = self.cfg.n_layers
        # Drawn in place: the same numbers, bit for bit, as rand(shape) * 2 * bound - bound and
        # randn(shape) * std, without three temporary copies of every weight (a fifth of the
        # time to build a 512-wide model).
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                w = module.weight
                if self.cfg.init == "xavier":
                    bound = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
                    w.uniform_(generator=gen).mul_(2).mul_(bound).sub_(bound)
                else:
                    std = 0.02
                    # GPT-2 scales the projections that write into the residual stream.
                    if name.endswith(("attn.proj", "mlp.fc2")):
                        std /= math.sqrt(2 * n_layers)
                    w.normal_(generator=gen).mul_(std)
                module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                # Xavier-scale embeddings keep the input of block 0 at unit-ish variance.
                std = self.cfg.d_model**-0.5 if self.cfg.init == "xavier" else 0.02
                if self.cfg.embed_std is not None:
                    std = self.cfg.embed_std
                module.weight.normal_(generator=gen).mul_(std)
        for module in self.modules():
            # make_norm's modules already start at gamma = 1, beta = 0; reset in case of reuse.
            if isinstance(module, norm_classes()) and getattr(module, "weight", None) is not None:
                module.weight.fill_(1.0)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
                if hasattr(module, "alpha0"):  # DyT's scalar back to its start
                    module.alpha.fill_(module.alpha0)
            if isinstance(module, Block) and module.gate1 is not None:
                module.gate1.zero_()
                module.gate2.zero_()
            if isinstance(module, placements.QKNorm):
                module.q_weight.fill_(1.0)
                module.k_weight.fill_(1.0)
        if self.embed_gain is not None:
            self.embed_gain.fill_(math.sqrt(self.cfg.d_model))
        if self.cfg.placement == "deepnorm":
            placements.apply_deepnorm_init(self, placements.deepnorm_beta(n_layers))

    def hidden(self, idx: Tensor) -> Tensor:
        """Residual stream after the last block (before the final norm): (B, T, D)."""
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (B, T), got {tuple(idx.shape)}")
        if idx.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"idx must hold integer token ids, got dtype {idx.dtype}")
        t = idx.shape[1]
        if t > self.cfg.max_len:
            raise ValueError(f"sequence length {t} exceeds max_len={self.cfg.max_len}")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return x

    def embed(self, idx: Tensor) -> Tensor:
        """The stream entering block 0: token + position embedding (times ``embed_gain`` with
        ``embed_scale``), (B, T) ids -> (B, T, D)."""
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return x if self.embed_gain is None else self.embed_gain * x

    def forward(self, idx: Tensor) -> Tensor:
        return self.head(self.final(self.hidden(idx)))

    def record_logits(self, on: bool = True) -> None:
        """Make every attention keep the largest |logit| of its forward passes (``on``)."""
        for block in self.blocks:
            block.attn.record_logits = on

    def max_logits(self) -> list[float]:
        """The largest |attention logit| of each block in the last forward (block 0 first)."""
        return [block.attn.max_logit for block in self.blocks]

    def layers(self) -> dict[str, nn.Module]:
        """The blocks by name, ``{"block0": ..., "block{L-1}": ...}``, input side first."""
        return {f"block{i}": b for i, b in enumerate(self.blocks)}


def count_norms(model: nn.Module) -> int:
    """Number of per-token norm modules (LayerNorm, RMSNorm; normedu's or torch's) in ``model``."""
    kinds = norm_classes(per_token=True)
    return sum(isinstance(m, kinds) for m in model.modules())
