"""Chapter 3 experiments: LayerNorm's computation, properties, parameters and what they learn.

Deterministic and cached like the other chapters' runners. Nothing here is scale-dependent
except :func:`trained_gamma`, whose size comes from :data:`SIZES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import functional as Fn
from .. import seeding
from ..conventions import DEFAULT_EPS
from ..data import digits
from ..device import choose, pick_device
from ..mlp import deep_mlp, norm_layers
from ..nn import LayerNorm, layer_norm
from ..stacked import StackedMLP, stacked_accuracy, train_stacked
from ..training import accuracy, adam, train_epoch

__all__ = [
    "SIZES",
    "GammaSize",
    "walkthrough",
    "properties",
    "GPT2_SMALL",
    "HF_GPT2_SMALL_PARAMS",
    "gpt2_small",
    "gpt2_small_counts",
    "logit_floor",
    "affine_demo",
    "trained_gamma",
    "var_pitfall",
    "gpt2_small_closed_form",
    "position_stats",
    "small_width_model",
    "small_width",
    "works_from",
]


def walkthrough(x=(2.0, 4.0, -1.0, 3.0), eps: float = DEFAULT_EPS, gamma=None, beta=None) -> dict:
    """Every intermediate of LayerNorm on one vector, in float64.

    Returns ``x``, ``mu``, ``centered`` (x - mu), ``squared`` ((x - mu)^2), ``var`` (biased),
    ``std`` (sqrt(var + eps)), ``x_hat``, ``y`` (gamma * x_hat + beta; gamma=1, beta=0 by
    default), ``x_hat_mean``, ``x_hat_var`` and ``reference`` (``normedu.functional.layer_norm``
    on the same input, an independent implementation).
    """
    v = np.asarray(x, dtype=np.float64)
    if v.ndim != 1 or v.size < 1:
        raise ValueError(f"x must be a non-empty 1-D vector, got shape {v.shape}")
    g = np.ones_like(v) if gamma is None else np.asarray(gamma, dtype=np.float64)
    b = np.zeros_like(v) if beta is None else np.asarray(beta, dtype=np.float64)
    mu = v.sum() / v.size
    centered = v - mu
    squared = centered**2
    var = squared.sum() / v.size
    std = math.sqrt(var + eps)
    x_hat = centered / std
    return {
        "x": v,
        "mu": mu,
        "centered": centered,
        "squared": squared,
        "var": var,
        "eps": eps,
        "std": std,
        "x_hat": x_hat,
        "gamma": g,
        "beta": b,
        "y": g * x_hat + b,
        "x_hat_mean": float(x_hat.mean()),
        "x_hat_var": float(x_hat.var()),
        "reference": Fn.layer_norm(v[None, :], g, b, eps=eps)[0],
    }


def properties(d: int = 16, seed: int = 0) -> dict:
    """Demonstrate LayerNorm's four key properties with :class:`normedu.nn.LayerNorm`.

    Returns max absolute differences (0.0 means bit-identical):
    - ``sample_independent``: row 0 normalized alone vs inside a batch of 64.
    - ``train_eval``: the module in ``train()`` vs ``eval()`` mode.
    - ``length_agnostic``: a token inside a length-5 vs a length-5000 sequence (B, T, D).
    - ``gradcheck``: ``torch.autograd.gradcheck`` of the layer (float64) passed (bool).
    """
    gen = seeding.generator(seed)
    ln = LayerNorm(d)
    with torch.no_grad():
        ln.weight.copy_(1 + 0.3 * torch.randn(d, generator=gen))
        ln.bias.copy_(0.3 * torch.randn(d, generator=gen))
    x = torch.randn(64, d, generator=gen) * 3 + 1
    seq_long = torch.randn(1, 5000, d, generator=gen)
    seq_short = seq_long[:, :5].clone()
    with torch.no_grad():
        alone = ln(x[:1])[0]
        batched = ln(x)[0]
        ln.train()
        tr = ln(x)
        ln.eval()
        ev = ln(x)
        short = ln(seq_short)[0, 2]
        long = ln(seq_long)[0, 2]
    ln64 = LayerNorm(d).double()
    xin = torch.randn(3, d, generator=gen, dtype=torch.float64, requires_grad=True)
    ok = torch.autograd.gradcheck(lambda t: ln64(t), (xin,), eps=1e-6, atol=1e-5)
    return {
        "sample_independent": float((alone - batched).abs().max()),
        "train_eval": float((tr - ev).abs().max()),
        "length_agnostic": float((short - long).abs().max()),
        "gradcheck": bool(ok),
    }


# --------------------------------------------------------------------------- GPT-2 small


@dataclass(frozen=True)
class GPT2Config:
    """GPT-2 small's shape (Radford et al., 2019; the Hugging Face ``gpt2`` checkpoint)."""

    n_layer: int = 12
    d_model: int = 768
    n_head: int = 12
    d_ff: int = 3072
    vocab: int = 50257
    n_ctx: int = 1024


GPT2_SMALL = GPT2Config()

#: ``sum(p.numel() for p in GPT2LMHeadModel.from_pretrained("gpt2").parameters())``
#: (tied embeddings counted once). The GPT-2 paper's Table 2 lists the smallest model as 117M.
HF_GPT2_SMALL_PARAMS = 124_439_808


class _Block(nn.Module):
    """Pre-Norm GPT-2 block: ln_1 -> attention (qkv + proj), ln_2 -> MLP (fc + proj)."""

    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.d_model)
        self.attn_qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.attn_proj = nn.Linear(c.d_model, c.d_model)
        self.ln_2 = nn.LayerNorm(c.d_model)
        self.mlp_fc = nn.Linear(c.d_model, c.d_ff)
        self.mlp_proj = nn.Linear(c.d_ff, c.d_model)


class _GPT2Shape(nn.Module):
    """GPT-2's parameter layout without a forward pass: for counting only."""

    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.d_model)
        self.wpe = nn.Embedding(c.n_ctx, c.d_model)
        self.h = nn.ModuleList(_Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: the output layer reuses the embedding


def gpt2_small(config: GPT2Config = GPT2_SMALL) -> nn.Module:
    """GPT-2-small-shaped modules on the ``meta`` device (shapes only, no memory, no download)."""
    with torch.device("meta"):
        return _GPT2Shape(config)


def gpt2_small_counts(config: GPT2Config = GPT2_SMALL) -> dict:
    """Parameter counts of :func:`gpt2_small`.

    Returns ``total`` (unique parameters; tied weights once), ``layernorms`` (number of
    LayerNorm modules), ``per_layernorm`` (parameters of one), ``layernorm_total``,
    ``layernorm_share`` (fraction of ``total``), ``embeddings``, ``blocks``.
    """
    model = gpt2_small(config)
    total = sum(p.numel() for p in model.parameters())  # parameters() skips the tied duplicate
    lns = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    ln_total = sum(p.numel() for m in lns for p in m.parameters())
    return {
        "total": total,
        "layernorms": len(lns),
        "per_layernorm": sum(p.numel() for p in lns[0].parameters()),
        "layernorm_total": ln_total,
        "layernorm_share": ln_total / total,
        "embeddings": model.wte.weight.numel() + model.wpe.weight.numel(),
        "blocks": sum(p.numel() for p in model.h.parameters()),
    }


# --------------------------------------------------------------------------- gamma and beta


def logit_floor(n_classes: int) -> float:
    """Smallest cross-entropy reachable when the logits are layer-normalized without gamma/beta.

    Normalized logits have mean 0 and (biased) variance 1, so their squares sum to n. The
    correct class's logit is then at most sqrt(n - 1) (the others all equal -1/sqrt(n - 1)),
    which caps its softmax probability and floors the loss at
    ``-log(e^a / (e^a + (n - 1) e^(-1/a)))`` with ``a = sqrt(n - 1)``.
    """
    if n_classes < 2:
        raise ValueError(f"n_classes must be >= 2, got {n_classes}")
    a = math.sqrt(n_classes - 1)
    top = math.exp(a)
    rest = (n_classes - 1) * math.exp(-1 / a)
    return -math.log(top / (top + rest))


class _NormalizedLogits(nn.Module):
    """MLP whose logits pass through a LayerNorm, with or without gamma/beta."""

    def __init__(self, affine: bool, seed: int) -> None:
        super().__init__()
        seeding.manual_seed(seed)
        self.body = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        self.affine = affine
        self.norm = LayerNorm(10) if affine else None

    def forward(self, x):
        z = self.body(x)
        return self.norm(z) if self.affine else layer_norm(z)


@lru_cache(maxsize=2)
def affine_demo(epochs: int = 10, seed: int = 0) -> dict:
    """Train the same net with LayerNorm-ed logits, once with gamma/beta and once without.

    Returns per variant (``"affine"``, ``"no_affine"``): ``loss`` (training loss per epoch,
    full-batch evaluation), ``final_loss``, ``test_acc``; plus ``floor`` =
    :func:`logit_floor` (10) and ``gamma`` (the learned gamma of the affine variant).
    """
    data = digits()
    out: dict = {"floor": logit_floor(10)}
    for affine in (True, False):
        model = _NormalizedLogits(affine, seed)
        opt = adam(model.parameters(), lr=3e-3)  # fused: one kernel per tensor, same algorithm
        gen = seeding.generator(seed + 1)
        curve = []
        for _ in range(epochs):
            train_epoch(model, opt, data.x_train, data.y_train, 64, gen)
            with torch.no_grad():
                curve.append(float(F.cross_entropy(model(data.x_train), data.y_train)))
        with torch.no_grad():
            acc = accuracy(model(data.x_test), data.y_test)
        key = "affine" if affine else "no_affine"
        out[key] = {"loss": np.array(curve), "final_loss": curve[-1], "test_acc": acc}
        if affine:
            out["gamma"] = model.norm.weight.detach().numpy().copy()
    return out


@dataclass(frozen=True)
class GammaSize:
    """Trained-gamma experiment: MLP depth/width, epochs of Adam on digits."""

    depth: int
    width: int
    epochs: int


SIZES = {"cpu": GammaSize(4, 128, 20), "cuda": GammaSize(8, 512, 200)}


@lru_cache(maxsize=2)
def trained_gamma(seed: int = 0) -> dict:
    """Train a LayerNorm MLP on digits (Adam, lr 1e-3) and collect every LayerNorm's gamma/beta.

    Returns ``gamma`` and ``beta`` (1-D arrays, all LayerNorms concatenated), ``test_acc``,
    ``share_near_1`` (|gamma - 1| < 0.1), ``share_high`` (1.5 <= gamma <= 2.0),
    ``share_low`` (0.3 <= gamma <= 0.5), ``quantiles`` (1%, 50%, 99%), and the config.
    """
    size = choose(SIZES)
    dev = pick_device()
    data = digits().to(dev)
    seeding.manual_seed(seed)
    model = deep_mlp(64, size.width, 10, size.depth, norm="layernorm", act="relu", seed=seed)
    model.to(dev)
    opt = adam(model.parameters(), lr=1e-3)
    gen = seeding.generator(seed + 1)
    for _ in range(size.epochs):
        train_epoch(model, opt, data.x_train, data.y_train, 64, gen)
    with torch.no_grad():
        acc = accuracy(model(data.x_test), data.y_test)
    lns = norm_layers(model)
    g = torch.cat([m.weight.detach() for m in lns]).cpu().numpy()
    b = torch.cat([m.bias.detach() for m in lns]).cpu().numpy()
    return {
        "gamma": g,
        "beta": b,
        "test_acc": acc,
        "share_near_1": float(np.mean(np.abs(g - 1) < 0.1)),
        "share_high": float(np.mean((g >= 1.5) & (g <= 2.0))),
        "share_low": float(np.mean((g >= 0.3) & (g <= 0.5))),
        "quantiles": tuple(float(q) for q in np.quantile(g, [0.01, 0.5, 0.99])),
        "config": {
            "depth": size.depth,
            "width": size.width,
            "epochs": size.epochs,
            "layernorms": len(lns),
        },
    }


def position_stats(batch: int = 64, t: int = 32, d: int = 16, seed: int = 0) -> dict:
    """Per-position feature means of token vectors that carry a position signal.

    Tokens are random embeddings plus a sinusoidal position encoding (as in Vaswani et al.
    2017), shape (B, T, D). Returns ``per_position_mean`` (T, D): the mean over the batch at
    each position (what a per-position BatchNorm would subtract), ``pooled_mean`` (D,): the
    mean over batch and positions (what BN over all tokens subtracts), and ``spread``: the
    largest difference between two positions' means of the same feature.
    """
    gen = seeding.generator(seed)
    pos = torch.arange(t, dtype=torch.float32)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float32)
    angle = pos / (10000 ** (i / d))
    pe = torch.zeros(t, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    x = 0.5 * torch.randn(batch, t, d, generator=gen) + pe
    per_pos = x.mean(0)
    return {
        "per_position_mean": per_pos.numpy(),
        "pooled_mean": x.mean((0, 1)).numpy(),
        "spread": float((per_pos.max(0).values - per_pos.min(0).values).max()),
        "shape": (batch, t, d),
    }


def var_pitfall(dims: tuple[int, ...] = (4, 64, 768), rows: int = 256, seed: int = 0) -> list[dict]:
    """LayerNorm written with ``torch.var(x, dim=-1)`` (unbiased, divides by D - 1) vs the real one.

    For each D, ``rows`` random rows (N(0, 1), float64) are normalized twice: with the unbiased
    variance and with ``F.layer_norm`` (biased, divides by D). Returns rows ``{"D", "ratio"}``
    (``D / (D - 1)``, the ratio of the two variances), ``"max_diff"`` (max |difference| of the
    two outputs) and ``"scale"`` (the wrong output over the right one, median; about
    ``sqrt((D - 1) / D)``).
    """
    gen = seeding.generator(seed)
    out = []
    for d in dims:
        x = torch.randn(rows, d, generator=gen, dtype=torch.float64)
        mu = x.mean(-1, keepdim=True)
        wrong = (x - mu) / torch.sqrt(torch.var(x, dim=-1, keepdim=True) + DEFAULT_EPS)
        right = F.layer_norm(x, (d,))
        out.append(
            {
                "D": d,
                "ratio": d / (d - 1),
                "max_diff": float((wrong - right).abs().max()),
                "scale": float((wrong / right).median()),
            }
        )
    return out


def gpt2_small_closed_form(config: GPT2Config = GPT2_SMALL) -> int:
    """GPT-2 small's parameter count from its configuration, by hand (tied output layer).

    Token embedding V·d + position embedding T·d; per block two LayerNorms (2·2d), attention
    (qkv d·3d + 3d, projection d·d + d) and MLP (d·f + f, f·d + d, f = d_ff = 4d); a final
    LayerNorm 2d.
    The output layer reuses the token embedding, so it adds nothing.
    """
    v, t, d, f, n = config.vocab, config.n_ctx, config.d_model, config.d_ff, config.n_layer
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    return v * d + t * d + n * block + 2 * d


def small_width_model(width: int, norm: str, seed: int) -> nn.Sequential:
    """``64 -> Linear(width) -> norm -> ReLU -> Linear(10)``: the small-width experiment's MLP.

    ``norm``: ``"layernorm"`` or ``"none"``; one hidden layer, He init, seeded
    (:func:`normedu.mlp.deep_mlp`). Input (N, 64) digits -> logits (N, 10).
    """
    return deep_mlp(64, width, 10, 1, norm=norm, act="relu", seed=seed)


#: The small-width experiment's seeds: its runs train side by side in well under 2 CPU-s
#: each, so five (the course's rule for cheap runs).
SMALL_WIDTH_SEEDS = seeding.seeds(5)


def small_width(
    widths: tuple[int, ...] = (1, 2, 3, 4, 8, 16, 64),
    seeds: tuple[int, ...] = SMALL_WIDTH_SEEDS,
    epochs: int = 10,
) -> dict:
    """Test accuracy of :func:`small_width_model` with and without LayerNorm, per width.

    Adam (lr 2e-2), minibatches of 128, ``epochs`` passes over the 1,347 training digits, one
    run per seed. Returns ``{"widths", "seeds", "epochs", "acc": {"layernorm" | "none":
    [[per seed] per width]}, "largest_class": share of the test set's most frequent class,
    "two_largest": share of its two most frequent classes}`` (the best test accuracy of a
    model with one, or two, distinct outputs). Cached: the chapter and its claims share a run.
    """
    return _small_width(tuple(widths), tuple(seeds), epochs)


@lru_cache(maxsize=2)
def _small_width(widths: tuple[int, ...], seeds: tuple[int, ...], epochs: int) -> dict:
    data = digits()
    acc: dict[str, list[list[float]]] = {"layernorm": [], "none": []}
    # The runs train side by side (normedu.stacked), each with its own weights, batch order
    # (its seed) and Adam state, as if alone: same runs, less dispatch. A stack pads its
    # narrower models to its widest, so a width more than twice the last starts a new stack.
    stacks: list[list[int]] = []
    for width in sorted(widths):
        if stacks and width <= 2 * stacks[-1][-1]:
            stacks[-1].append(width)
        else:
            stacks.append([width])
    accs = {}
    for stack in stacks:
        runs = [(norm, width, seed) for norm in acc for width in stack for seed in seeds]
        net = StackedMLP([small_width_model(w, n, s) for n, w, s in runs], [n for n, _, _ in runs])
        train_stacked(
            net,
            data.x_train,
            data.y_train,
            [s for *_, s in runs],
            batch=128,
            epochs=epochs,
            lr=2e-2,
        )
        accs.update(zip(runs, stacked_accuracy(net, data.x_test, data.y_test), strict=True))
    for norm, rows in acc.items():
        rows += [[accs[norm, w, s] for s in seeds] for w in widths]
    counts = np.sort(np.bincount(data.y_test.numpy()))[::-1] / len(data.y_test)
    return {
        "widths": list(widths),
        "seeds": list(seeds),
        "epochs": epochs,
        "acc": acc,
        "largest_class": float(counts[0]),
        "two_largest": float(counts[:2].sum()),
    }


def works_from(res: dict, tolerance: float = 0.02) -> int | None:
    """The smallest width from which LayerNorm's mean accuracy stays within ``tolerance`` of
    (or above) the no-norm model's, at that width and every larger one; None if it never does.

    ``res``: :func:`small_width`'s result.
    """
    gap = [
        np.mean(n) - np.mean(ln)
        for ln, n in zip(res["acc"]["layernorm"], res["acc"]["none"], strict=True)
    ]
    found = None
    for width, g in reversed(list(zip(res["widths"], gap, strict=True))):
        if g > tolerance:
            break
        found = width
    return found
