"""Chapter 2 experiments where BatchNorm has no batch to pool: sequences and streams.

- :func:`padding_demo`: a sequence batch-normalized with short vs long, zero-padded
  batchmates (the pads enter BatchNorm's statistics; LayerNorm does not see them).
- :func:`online_demo`: learning from a stream, one example at a time (training-mode
  BatchNorm refuses a batch of one; a LayerNorm MLP learns).
- :func:`causal_leak_demo`: over token features, BatchNorm lets the last token change the
  first position's output (the future leaks into the past); LayerNorm does not.

Re-exported by :mod:`normedu.experiments.batchnorm`, where the chapter finds them.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from .. import seeding
from ..conventions import DEFAULT_EPS
from ..data import digits
from ..mlp import deep_mlp
from ..nn import BatchNorm1d, LayerNorm
from ..training import accuracy

__all__ = ["padding_demo", "online_demo", "causal_leak_demo"]


def padding_demo(
    d: int = 8, lengths_a=(6, 5, 4, 6), lengths_b=(6, 40, 40, 40), seed: int = 0
) -> dict:
    """The same sequence batch-normalized with short vs long (zero-padded) batchmates.

    Sequence 0 (length ``lengths_a[0] == lengths_b[0]``) is identical in both batches; its
    batchmates differ. Tensors are (N, C=d, L) for BatchNorm (statistics over N and L, pads
    included, as a plain ``BatchNorm1d`` does) and (N, L, d) for LayerNorm.

    Returns ``bn_max_diff`` and ``ln_max_diff``: max |output difference| over sequence 0's real
    tokens between the two batches; ``pad_share_a``, ``pad_share_b``: fraction of the values in
    BatchNorm's statistics that are padding; ``masked_bn_max_diff``: the same difference for a
    BatchNorm that excludes pads from its statistics (still depends on the batchmates).
    """
    if lengths_a[0] != lengths_b[0]:
        raise ValueError(
            f"sequence 0 must have the same length in both batches, got {lengths_a[0]} and "
            f"{lengths_b[0]}"
        )
    gen = seeding.generator(seed)
    seq0 = torch.randn(lengths_a[0], d, generator=gen) + 1.0

    def batch(lengths):
        L = max(lengths)
        x = torch.zeros(len(lengths), L, d)
        mask = torch.zeros(len(lengths), L, dtype=torch.bool)
        x[0, : lengths[0]] = seq0
        mask[0, : lengths[0]] = True
        for i, n in enumerate(lengths[1:], start=1):
            x[i, :n] = torch.randn(n, d, generator=gen) + 1.0
            mask[i, :n] = True
        return x, mask

    xa, ma = batch(lengths_a)
    xb, mb = batch(lengths_b)
    bn = BatchNorm1d(d)
    ln = LayerNorm(d)
    n0 = lengths_a[0]
    with torch.no_grad():
        ya = bn(xa.transpose(1, 2)).transpose(1, 2)[0, :n0]
        yb = bn(xb.transpose(1, 2)).transpose(1, 2)[0, :n0]
        la, lb = ln(xa)[0, :n0], ln(xb)[0, :n0]

        def masked_bn(x, m):
            vals = x[m]  # (tokens, d): real tokens only
            mu, var = vals.mean(0), vals.var(0, unbiased=False)
            return ((x - mu) / torch.sqrt(var + DEFAULT_EPS))[0, :n0]

        mdiff = float((masked_bn(xa, ma) - masked_bn(xb, mb)).abs().max())
    return {
        "bn_max_diff": float((ya - yb).abs().max()),
        "ln_max_diff": float((la - lb).abs().max()),
        "masked_bn_max_diff": mdiff,
        "pad_share_a": float(1 - ma.float().mean()),
        "pad_share_b": float(1 - mb.float().mean()),
    }


@lru_cache(maxsize=2)
def online_demo(seed: int = 0) -> dict:
    """Learning from a stream, one example at a time (no batch to average over).

    Returns ``bn_error`` (the message training-mode BatchNorm raises on a batch of one, from
    normedu and from torch), and ``ln_online_acc``: test accuracy of a LayerNorm MLP after one
    pass of per-example SGD over the training digits.
    """
    data = digits()
    msgs = {}
    x1 = data.x_train[:1]
    for name, bn in (("normedu", BatchNorm1d(64)), ("torch", nn.BatchNorm1d(64))):
        bn.train()
        try:
            bn(x1)
            msgs[name] = "(no error)"
        except (ValueError, RuntimeError) as e:
            msgs[name] = str(e).split("\n")[0]
    model = deep_mlp(64, 64, 10, 3, norm="layernorm", act="relu", seed=seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(len(data.x_train)):
        loss = F.cross_entropy(model(data.x_train[i : i + 1]), data.y_train[i : i + 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = accuracy(model(data.x_test), data.y_test)
    return {"bn_error": msgs, "ln_online_acc": acc}


def causal_leak_demo(batch: int = 4, t: int = 16, d: int = 32, seed: int = 0) -> dict:
    """Does the output at position 0 depend on the token at position T-1?

    Training-mode BatchNorm over (B, T, D) token features pools statistics over every position
    of every sequence, so changing the *last* token changes the *first* position's output: the
    future leaks into the past, which an autoregressive model must never allow. LayerNorm
    normalizes each token alone. Returns ``bn_change`` and ``ln_change``: max |change| at
    position 0 after replacing token T-1 of sequence 0 by a different random vector.
    """
    gen = seeding.generator(seed)
    x = torch.randn(batch, t, d, generator=gen)
    x2 = x.clone()
    x2[0, -1] = 3.0 * torch.randn(d, generator=gen)
    bn, ln = BatchNorm1d(d), LayerNorm(d)
    with torch.no_grad():

        def bn_tokens(z):  # (B, T, D) -> tokens as BN's batch
            return bn(z.reshape(-1, d)).reshape(z.shape)

        bn_change = float((bn_tokens(x)[0, 0] - bn_tokens(x2)[0, 0]).abs().max())
        ln_change = float((ln(x)[0, 0] - ln(x2)[0, 0]).abs().max())
    return {"bn_change": bn_change, "ln_change": ln_change, "shape": (batch, t, d)}
