"""The chapter "Where the norm goes in today's large models": each placement at initialization,
over several seeds.

For every placement and seed, one forward and one backward pass of a freshly initialized
stack on one batch of the reverse task: the RMS of the residual stream after every block,
and, for every block's second feed-forward layer (``mlp.fc2``), the norm of its weight's
gradient, the norm of its bias's gradient and the RMS of the vector it reads (the GELU of
``fc1``'s output). The weight and the bias are kept apart because they scale differently:
the weight's gradient is the product of the vector fc2 reads and the gradient reaching its
output, the bias's gradient that output gradient alone (summed over tokens).

:mod:`normedu.experiments.since2020_placement` runs it (``init_profiles``, on its sizes and
models) and re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["InitProfiles", "measure_init"]


@dataclass
class InitProfiles:
    """Per-seed profiles at initialization of a ``depth``-layer stack of width ``d_model``.

    Every field below maps a placement to a list over the ``seeds`` seeds (seed order) of a
    list over the blocks (block 1 first):

    - stream_seeds: RMS of the residual stream after each block;
    - weight_seeds: norm of the gradient of each block's ``mlp.fc2.weight``;
    - bias_seeds: norm of the gradient of each block's ``mlp.fc2.bias``;
    - input_seeds: RMS of the vector each block's ``mlp.fc2`` reads;
    - outgrad_seeds: RMS of the gradient reaching each block's ``mlp.fc2`` output.

    ``stream`` and ``grads`` are the means over seeds (per block) of ``stream_seeds`` and
    ``weight_seeds``: what the page's table and figure draw.
    """

    depth: int
    d_model: int
    seeds: int
    stream_seeds: dict[str, list[list[float]]]
    weight_seeds: dict[str, list[list[float]]]
    bias_seeds: dict[str, list[list[float]]]
    input_seeds: dict[str, list[list[float]]]
    outgrad_seeds: dict[str, list[list[float]]]

    @property
    def stream(self) -> dict[str, list[float]]:
        return {p: np.mean(v, axis=0).tolist() for p, v in self.stream_seeds.items()}

    @property
    def grads(self) -> dict[str, list[float]]:
        return {p: np.mean(v, axis=0).tolist() for p, v in self.weight_seeds.items()}

    def growth(self, placement: str) -> float:
        """Stream RMS after the last block over that after the first (means over seeds)."""
        s = self.stream[placement]
        return s[-1] / s[0]

    def fitted_last_over_first(self, placement: str) -> list[float]:
        """Per seed, the trend of the fc2 weight gradient through the stack: a straight line
        fitted to log(gradient) against the block index, its value at the last block over its
        value at the first (exp(slope · (depth − 1))). Uses every block, not only the two
        ends, so that one block's scatter does not make or hide a trend."""
        blocks = np.arange(self.depth)
        out = []
        for g in self.weight_seeds[placement]:
            slope = np.polyfit(blocks, np.log(np.asarray(g)), 1)[0]
            out.append(float(np.exp(slope * (self.depth - 1))))
        return out

    def end_stream(self, placement: str) -> list[float]:
        """Per seed, the stream's RMS after the last block."""
        return [s[-1] for s in self.stream_seeds[placement]]

    def ratio(self, field: str, a: str = "deepnorm", b: str = "post") -> list[float]:
        """Per seed, the mean over blocks of placement ``a``'s value over ``b``'s, block by
        block; ``field`` is ``"weight"``, ``"bias"``, ``"input"`` or ``"outgrad"``."""
        table = getattr(self, f"{field}_seeds")
        return [
            float(np.mean(np.asarray(x) / np.asarray(y)))
            for x, y in zip(table[a], table[b], strict=True)
        ]


def measure_init(make_model, make_batch, placements, seeds, loss_fn) -> dict[str, dict]:
    """For each placement and seed: ``make_model(placement, seed)`` (a TinyGPT),
    ``make_batch(seed)`` (a batch of the reverse task), one forward pass recording the
    stream after every block and the input of every ``mlp.fc2``, one backward pass of
    ``loss_fn(model, batch)`` recording the gradient at every ``mlp.fc2`` output. Returns
    ``{"stream"|"weight"|"bias"|"input"|"outgrad": {placement: [per seed [per block]]}}``."""
    out: dict[str, dict] = {k: {} for k in ("stream", "weight", "bias", "input", "outgrad")}
    for placement in placements:
        for k in out:
            out[k][placement] = []
        for seed in seeds:
            model = make_model(placement, seed)
            batch = make_batch(seed)
            rms: list[float] = []
            fc2_in: list[float] = []
            fc2_gout: list[float] = []
            hooks = (
                [
                    blk.register_forward_hook(
                        lambda m, i, o, rms=rms: rms.append(float(o.detach().pow(2).mean().sqrt()))
                    )
                    for blk in model.blocks
                ]
                + [
                    blk.mlp.fc2.register_forward_hook(
                        lambda m, i, o, fc2_in=fc2_in: fc2_in.append(
                            float(i[0].detach().pow(2).mean().sqrt())
                        )
                    )
                    for blk in model.blocks
                ]
                + [
                    blk.mlp.fc2.register_full_backward_hook(
                        lambda m, gi, go, out=fc2_gout: out.append(
                            float(go[0].pow(2).mean().sqrt())
                        )
                    )
                    for blk in model.blocks
                ]
            )
            model.zero_grad(set_to_none=True)
            loss_fn(model, batch).backward()
            for h in hooks:
                h.remove()
            fc2 = [blk.mlp.fc2 for blk in model.blocks]
            out["stream"][placement].append(rms)
            out["input"][placement].append(fc2_in)
            out["outgrad"][placement].append(fc2_gout[::-1])  # backward runs last block first
            out["weight"][placement].append([float(f.weight.grad.norm()) for f in fc2])
            out["bias"][placement].append([float(f.bias.grad.norm()) for f in fc2])
    return out
