"""Training without normalization: what a freshly built stack's stream and branches see.

- :func:`stream_rms`: the residual stream's RMS after every block, at initialization.
- :func:`init_scales`: what the branches read (the RMS of every norm's output) and the RMS of
  the logits, at initialization.
- :func:`branch_gains`: the gain g² = Var(branch output) / Var(branch input) of every
  attention and every MLP branch of a freshly built stack, block by block.

Part of the chapter "Training without normalization"; :mod:`.since2020_nonorm` re-exports
every name and holds the sizes and variants these read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .since2020_nonorm_setup import SIZES, _batch, variant_config

__all__ = ["stream_rms", "InitScales", "init_scales", "branch_gains"]


def _fresh(
    names, preset: str | None, seed: int, depth: int | None = None, alpha0: float | None = None
):
    """``(name, model, x, batch)`` for each variant: a freshly built stack of the comparison's
    size (``depth`` blocks if given; every DyT starting from ``alpha0`` if given), the stream
    entering its first block ``x`` on one batch of its task, and the batch."""
    from ..device import choose
    from ..nn import DyT
    from ..transformer import TinyGPT

    size = SIZES[preset] if preset else choose(SIZES)
    size = size if depth is None else replace(size, depth=depth)
    b = _batch(size, 16, seed, None)
    for name in names:
        model = TinyGPT(variant_config(name, size, seed))
        if alpha0 is not None:
            for m in model.modules():
                if isinstance(m, DyT):
                    m.alpha.data.fill_(alpha0)
        yield name, model, model.embed(b.x), b


def _rms(t) -> float:
    return float(t.pow(2).mean().sqrt())


def stream_rms(
    names=("layernorm", "none", "rezero"),
    preset: str | None = None,
    seed: int = 0,
    depth: int | None = None,
):
    """RMS of the residual stream at initialization: ``{name: [entering block 1, after block
    1, ..., after block L]}`` for each variant, on one batch of the comparison's task and size
    (``depth`` blocks if given: one forward pass, cheap at any depth)."""
    import torch

    out = {}
    with torch.no_grad():
        for name, model, x, _ in _fresh(names, preset, seed, depth):
            rms = [_rms(x)]
            for block in model.blocks:
                x = block(x)
                rms.append(_rms(x))
            out[name] = rms
    return out


@dataclass(frozen=True)
class InitScales:
    """What a freshly built stack's branches read, on one batch of the comparison.

    - embedding_rms: RMS of the stream entering block 1 (what the first norm reads).
    - branch_input_rms: mean over the blocks' norms (norm1, norm2) of the RMS of their outputs,
      which is what the attention and MLP branches read.
    - logits_rms: RMS of the logits.
    """

    embedding_rms: float
    branch_input_rms: float
    logits_rms: float


def init_scales(names=("layernorm", "dyt"), preset: str | None = None, seed: int = 0, alpha0=None):
    """``{name: InitScales}`` for freshly built stacks of the comparison's size (every DyT
    starting from ``alpha0`` if given)."""
    import torch

    out = {}
    with torch.no_grad():
        for name, model, x, b in _fresh(names, preset, seed, alpha0=alpha0):
            read: list[float] = []
            hooks = [
                norm.register_forward_hook(lambda _m, _i, o, read=read: read.append(_rms(o)))
                for blk in model.blocks
                for norm in (blk.norm1, blk.norm2)
            ]
            logits = model(b.x)
            for h in hooks:
                h.remove()
            out[name] = InitScales(_rms(x), float(np.mean(read)), _rms(logits))
    return out


def branch_gains(name: str = "none", preset: str | None = None, seed: int = 0, depth=None):
    """``{"attn": [g² of block 1, ...], "mlp": [...]}`` for variant ``name`` at initialization:
    each branch's output variance over its input's (what it reads: the stream itself without a
    norm), on one batch of the comparison's task (``depth`` blocks if given)."""
    import torch

    gains: dict[str, list[float]] = {"attn": [], "mlp": []}
    with torch.no_grad():
        for _, model, x, _ in _fresh((name,), preset, seed, depth):
            hooks = [
                getattr(blk, kind).register_forward_hook(
                    lambda _m, i, o, kind=kind: gains[kind].append(float(o.var() / i[0].var()))
                )
                for blk in model.blocks
                for kind in ("attn", "mlp")
            ]
            for blk in model.blocks:
                x = blk(x)
            for h in hooks:
                h.remove()
    return gains
