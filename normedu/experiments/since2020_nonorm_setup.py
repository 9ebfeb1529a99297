"""Training without normalization: the sizes and variants of the chapter's stacks.

:class:`NoNormSize` and :data:`SIZES` (per preset), :data:`VARIANTS` (the ``GPTConfig``
switches of each stack) and :data:`LABELS`, :func:`variant_config` and the batches of the
comparison's task. Part of the chapter "Training without normalization";
:mod:`.since2020_nonorm` re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "NoNormSize",
    "SIZES",
    "VARIANTS",
    "LABELS",
    "variant_config",
    "stream_seed",
    "held_seed",
]


@dataclass(frozen=True)
class NoNormSize:
    """Sizes of :func:`compare`: ``depth`` (blocks), ``d_model``, ``n_heads``, ``vocab``,
    ``n_items`` (prompt length), ``batch``, ``steps`` (Adam steps, the same for every variant),
    ``lr`` (constant, no warm-up), ``task``; ``curve_batch``: sequences whose LayerNorm inputs
    :func:`ln_curve` collects; ``curve_points``: how many (input, output) pairs it keeps for
    the figure; ``threads``: torch threads while running (None: leave as is);
    ``long_steps``: the step count to which the variants named in ``long_variants`` keep
    training after the lockstep part (0: none do)."""

    depth: int
    d_model: int
    n_heads: int
    vocab: int
    n_items: int
    batch: int
    steps: int
    lr: float
    task: str = "reverse"
    curve_batch: int = 32
    curve_points: int = 3000
    threads: int | None = None
    long_steps: int = 0
    long_variants: tuple[str, ...] = ()


SIZES: dict[str, NoNormSize] = {
    # 8 blocks, 80 + 240 steps (it was 10 blocks, 90 + 270: 71% of the work). The multi-seed
    # record (normedu.records "nonorm_seeds") holds what every seed gives; at depth 6 no norm
    # trained within 90 steps: the depth is what makes leaving the norm out cost.
    "cpu": NoNormSize(
        depth=8,
        d_model=32,
        n_heads=4,
        vocab=16,
        n_items=6,
        batch=16,
        steps=80,
        lr=5e-3,
        threads=1,
        long_steps=240,
        long_variants=("dyt", "rezero", "none"),
    ),
    "cuda": NoNormSize(
        depth=24,
        d_model=256,
        n_heads=8,
        vocab=64,
        n_items=16,
        batch=64,
        steps=1000,
        lr=1e-3,
        curve_batch=256,
        long_steps=3000,
        long_variants=("dyt", "rezero", "none"),
    ),
}

#: The variants compared, in the order of the tables: the GPTConfig switches of each.
VARIANTS: dict[str, dict[str, Any]] = {
    "layernorm": {"norm": "layernorm"},
    "rmsnorm": {"norm": "rmsnorm"},
    "dyt": {"norm": "dyt"},
    # Zhu et al.'s LLaMA setting: a learnable scalar sqrt(D) after the embedding (their App. A)
    "dyt_scaled": {"norm": "dyt", "embed_scale": True},
    "rezero": {"norm": "none", "residual_scale": "rezero"},
    "none": {"norm": "none"},
}
#: How the page names each variant.
LABELS = {
    "layernorm": "LayerNorm",
    "rmsnorm": "RMSNorm",
    "dyt": "DyT",
    "dyt_scaled": "DyT + embedding scalar",
    "rezero": "ReZero (no norm)",
    "none": "no norm",
}


def variant_config(name: str, size: NoNormSize, seed: int = 0):
    """The :class:`~normedu.transformer.GPTConfig` of variant ``name`` at ``size`` (Pre-Norm)."""
    from ..sequence_tasks import seq_len
    from ..transformer import GPTConfig

    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose one of {tuple(VARIANTS)}")
    return GPTConfig(
        vocab=size.vocab,
        d_model=size.d_model,
        n_heads=size.n_heads,
        n_layers=size.depth,
        max_len=seq_len(size.task, size.n_items),
        placement="pre",
        seed=seed,
        **VARIANTS[name],
    )


def stream_seed(run_seed: int, step: int) -> int:
    """The seed of training batch ``step`` of the run with seed ``run_seed``: seed 0 draws the
    stream 10 000, 10 001, ...; each further seed a stream of its own, 1000 further on (the
    runs are shorter than 1000 steps)."""
    return 10_000 + 1000 * run_seed + step


def held_seed(run_seed: int, which: int) -> int:
    """The seed of the held-out batch ``which`` (1: gradients, 2: the LayerNorm curve)."""
    return 100 * run_seed + which


def _batch(size: NoNormSize, batch: int, seed: int, device):
    from ..sequence_tasks import make_batch

    return make_batch(size.task, batch, size.n_items, size.vocab, seed=seed, device=device)
