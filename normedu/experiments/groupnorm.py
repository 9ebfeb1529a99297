"""GroupNorm chapter measurement: one sample's output among different batchmates.

GroupNorm's statistics come from one sample, so the sample's output cannot depend on the rest
of the batch; BatchNorm's (training mode) come from the whole batch. The chapter's training
runs are elsewhere: on an MLP, the BatchNorm chapter's sweep
(:func:`normedu.experiments.batchnorm.batch_size_sweep` and its stored full-size run); on a
CNN, :mod:`normedu.experiments.convnet` (batch sizes, the choice of G).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import functional as Fn
from .. import seeding

__all__ = ["batchmates"]


@lru_cache(maxsize=8)
def batchmates(
    batch: int = 8,
    n_batches: int = 20,
    channels: int = 6,
    groups: int = 3,
    size: int = 5,
    seed: int = 0,
) -> dict:
    """Normalize the same sample inside ``n_batches`` batches with different batchmates.

    Sample 0 is fixed, of shape (channels, size, size); the other ``batch - 1`` samples of each
    batch are drawn fresh, each batch from a normal distribution with its own offset and scale
    (as batches of real data differ). Each batch goes through BatchNorm (training mode, batch
    statistics) and GroupNorm with ``groups`` groups, both without affine parameters.

    Returns a dict:
    - ``"batchnorm"``, ``"groupnorm"``: the output at (sample 0, channel 0, position (0, 0)) in
      each batch (lists of ``n_batches`` floats);
    - ``"alone"``: GroupNorm's output there with sample 0 in a batch of its own;
    - ``"max_change"``: per norm, the largest absolute change of any of sample 0's outputs
      between batches (0.0 means independent of the batchmates);
    - the parameters.
    """
    if batch < 2:
        raise ValueError(f"batch must be >= 2 (sample 0 and at least one batchmate), got {batch}")
    rng = seeding.rng(seed)
    shape = (channels, size, size)
    sample = rng.normal(size=shape)
    outs: dict[str, list[np.ndarray]] = {"batchnorm": [], "groupnorm": []}
    for _ in range(n_batches):
        mates = rng.normal(rng.normal(0, 1), rng.uniform(0.5, 2.0), size=(batch - 1, *shape))
        x = np.concatenate([sample[None], mates])
        outs["batchnorm"].append(Fn.batch_norm(x)[0][0])
        outs["groupnorm"].append(Fn.group_norm(x, None, None, groups)[0])
    result: dict = {
        "batch": batch,
        "n_batches": n_batches,
        "groups": groups,
        "alone": float(Fn.group_norm(sample[None], None, None, groups)[0, 0, 0, 0]),
        "max_change": {},
    }
    for key, arrs in outs.items():
        stack = np.stack(arrs)
        result[key] = [float(a[0, 0, 0]) for a in arrs]
        result["max_change"][key] = float(np.max(stack.max(axis=0) - stack.min(axis=0)))
    return result
