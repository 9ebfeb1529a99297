"""Pre-Norm vs Post-Norm: gradient norms at initialization and training stability at depth.

Experiments on :class:`normedu.transformer.TinyGPT` stacks and the synthetic tasks of
:mod:`normedu.sequence_tasks`:

- :func:`init_grad_norms`: for each depth and placement, the gradient norm of every block's
  second FFN matrix (``mlp.fc2``, the W2 of Xiong et al., 2020) at initialization, and the
  norm of the residual stream after every block, averaged over a few seeds. The fits that test
  Xiong et al.'s Theorem 1 (:meth:`InitGradNorms.depth_slope`,
  :meth:`InitGradNorms.stream_slope`) read this one sweep.
- :func:`warmup_sweep`: Post-LN and Pre-LN stacks trained with Adam over a learning-rate x
  warm-up grid (:mod:`.prepost_training`); :func:`train_stability` is its four runs at the
  headline learning rate.

A third, the paper-width gradient check at init (:func:`wide_check`, reference stack against
TinyGPT at Xiong et al.'s width), lives in :mod:`.prepost_width`. The names of both modules
are re-exported here.

All are cached per preset (or size), so the chapter and its claim checks share one run.
``SIZES["cpu"]`` finishes in seconds; ``SIZES["cuda"]`` is the full size that ``python -m
normedu.experiments --store`` runs on a GPU.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..device import choose, pick_device, preset_name
from .prepost_training import (
    CUDA_MATMUL_PRECISION,
    StabilityResult,
    TrainRun,
    WarmupSweep,
    lr_at,
    run_sweep,
)
from .prepost_width import (
    SWITCHES,
    WIDE,
    WideCheck,
    WideProfile,
    WideSize,
    encoder_grad_profile,
    tinygpt_grad_profile,
    wide_profiles,
)
from .scale import scale_experiment, threads

__all__ = [
    "PrePostSize",
    "SIZES",
    "InitGradNorms",
    "EXPECTED_SLOPES",
    "loglog_slope",
    "init_grad_norms",
    "warmup_sweep",
    "train_stability",
    "wide_check",
    # from prepost_training, where the training runs live:
    "TrainRun",
    "StabilityResult",
    "WarmupSweep",
    "lr_at",
    # from prepost_width, where the paper-width check lives:
    "WideSize",
    "WIDE",
    "SWITCHES",
    "WideProfile",
    "WideCheck",
    "encoder_grad_profile",
    "tinygpt_grad_profile",
    "wide_profiles",
]


@dataclass(frozen=True)
class PrePostSize:
    """Sizes of both experiments.

    Gradient norms at init: ``depths`` (layers), ``d_model``, ``n_heads``, ``vocab``,
    ``n_items`` (prompt length), ``batch``, ``seeds`` (averaged).
    Training: ``train_depth``, ``train_d_model``, ``train_heads``, ``train_batch``, ``steps``,
    ``lr`` (Adam peak) and ``warmup`` (steps of linear warm-up) of the headline runs, ``task``;
    the grid of :func:`warmup_sweep`, ``lrs`` x ``warmups`` (empty: the headline ``lr`` with
    no warm-up and with ``warmup``), which must hold the headline values;
    ``train_items`` (prompt items of the training task; None: ``n_items``);
    ``train_seeds``: runs per cell of the grid, each its own initialization and batch stream.
    ``threads``: torch threads while running (None: leave as is).
    ``wide``: the setting of the paper-width check (:func:`wide_check`), the same on every
    device because it is one forward and backward pass per model.
    """

    depths: tuple[int, ...]
    d_model: int
    n_heads: int
    vocab: int
    n_items: int
    batch: int
    seeds: int
    train_depth: int
    train_d_model: int
    train_heads: int
    train_batch: int
    steps: int
    lr: float
    warmup: int
    task: str = "reverse"
    threads: int | None = None
    wide: WideSize = WIDE
    lrs: tuple[float, ...] = ()
    warmups: tuple[int, ...] = ()
    train_items: int | None = None
    train_seeds: int = 1


SIZES: dict[str, PrePostSize] = {
    "cpu": PrePostSize(
        depths=(6, 12, 24, 48),
        d_model=64,
        n_heads=4,
        vocab=16,
        n_items=6,
        batch=16,
        # each seed's profiles and fits are kept: the verdicts on them (last/first ratios per
        # depth, fitted exponents) apply the course's rule over these 5 seeds (about 1.5 CPU-s
        # a seed)
        seeds=5,
        # 18 cells of 45 steps (the CPU budget of the chapter): a 4-layer stack on reversing 4
        # items, where Post-LN without warm-up stalls at lr 1e-2 and trains at 3e-3. A width of
        # 16 learns too slowly in 60 steps to show anything; 6 layers cost half as much again;
        # at 40 steps nothing trains at 3e-3.
        train_depth=4,
        train_d_model=32,
        train_heads=4,
        train_batch=16,
        steps=45,
        lr=1e-2,
        warmup=9,
        threads=1,
        lrs=(3e-3, 1e-2, 3e-2),
        warmups=(0, 9, 27),
        train_items=4,
        # a run costs about 0.17 CPU-s: 5 seeds per cell, the course's rule for cheap runs
        train_seeds=5,
    ),
    "cuda": PrePostSize(
        depths=(6, 12, 24, 48),
        d_model=512,
        n_heads=8,
        vocab=64,
        n_items=16,
        batch=64,
        # the verdicts at init apply the seed rule over these, so at least 3 (one forward and
        # backward pass per model and seed)
        seeds=5,
        train_depth=24,
        train_d_model=512,
        train_heads=8,
        train_batch=64,
        # 18 cells of 500 steps (2 placements x 3 lrs x 3 warm-ups), 3 seeds each; four runs
        # of 1200 steps took about two minutes on one GPU, so one seed of the grid should take
        # about four and the three about twelve (not measured).
        steps=500,
        lr=1e-3,
        warmup=120,
        lrs=(3e-4, 1e-3, 3e-3),
        warmups=(0, 120, 360),
        train_seeds=3,
    ),
}


# --------------------------------------------------------------------------- gradients at init


#: Exponents that Xiong et al.'s argument predicts for the log-log fits of the init sweep:
#: the residual stream's norm after block l against l (``"stream"``), and the last block's
#: FFN-W2 gradient against the depth L (``"last_layer"``).
EXPECTED_SLOPES: dict[str, dict[str, float]] = {
    "stream": {"pre": 0.5, "post": 0.0},
    "last_layer": {"pre": -0.5, "post": 0.0},
}


def loglog_slope(x, y) -> float:
    """Least-squares slope of log(y) against log(x): the exponent k of a power law y ~ x^k.

    ``x``, ``y``: equal-length sequences of positive numbers, at least two.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError(
            "need two equal-length 1-D sequences of at least 2 points, "
            f"got shapes {x.shape} and {y.shape}"
        )
    if (x <= 0).any() or (y <= 0).any() or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("a log-log fit needs positive, finite values")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


@dataclass
class InitGradNorms:
    """Per-layer gradient norms and residual-stream norms at initialization.

    ``norms[placement][str(depth)]`` is a list of L floats (block 0 first): the L2 norm of
    the gradient of that block's ``mlp.fc2`` weight and bias, averaged over ``seeds``.
    ``stream[placement][str(depth)]``: L floats, the root-mean-square over tokens of the
    per-token norm ||x_l|| of the residual stream after block l = 1 .. L (empty in results
    stored before it was measured).
    ``token[placement][str(depth)]``: the per-token gradient of the last block's W2 weight,
    mean over scored tokens t of ||a_t|| * ||h_t|| (h_t: fc2's input at token t, a_t: the
    gradient of token t's own loss at fc2's output), averaged over seeds; step 3 of the chapter
    derives this one-token quantity. ``batch[placement][str(depth)]``: the same matrix's
    gradient of the mean loss, ||sum_t a_t h_t^T|| / n, averaged over seeds (weight only, no
    bias). Both empty in results stored before they were measured.
    ``seed_norms``, ``seed_stream``, ``seed_token``, ``seed_batch``: the same four, one entry
    per seed (``seed_norms[placement][str(depth)][seed]`` a list of L floats, ``seed_stream``
    likewise the per-token root-mean-square ||x_l||, ``seed_token`` / ``seed_batch`` one float
    per seed), for verdicts over seeds (:meth:`seed_last_over_first`, :meth:`seed_slopes`);
    empty in results stored before they were kept.
    """

    depths: list[int]
    norms: dict[str, dict[str, list[float]]]
    d_model: int
    seeds: int
    norm: str = "layernorm"
    stream: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    token: dict[str, dict[str, float]] = field(default_factory=dict)
    batch: dict[str, dict[str, float]] = field(default_factory=dict)
    seed_norms: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    seed_stream: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    seed_token: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    seed_batch: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    @property
    def has_seeds(self) -> bool:
        """Whether each seed's values were kept (not in older stored results)."""
        return bool(self.seed_norms)

    def seed_last_over_first(self, placement: str, depth: int) -> list[float]:
        """Last/first-layer FFN-W2 gradient ratio of each seed's stack of ``depth`` layers."""
        return [p[-1] / p[0] for p in self.seed_norms[placement][str(depth)]]

    def seed_slopes(self, kind: str, placement: str) -> list[float]:
        """One fitted exponent per seed: ``kind`` "stream" (||x_l|| against l over the deepest
        stack), "batch" (last-layer W2 gradient against L) or "token" (its per-token
        gradient against L)."""
        if kind == "stream":
            rows = self.seed_stream[placement][str(max(self.depths))]
            return [loglog_slope(np.arange(1, len(r) + 1), r) for r in rows]
        if kind not in ("batch", "token"):
            raise ValueError(f"kind must be 'stream', 'batch' or 'token', got {kind!r}")
        if kind == "batch":
            per_depth = [[p[-1] for p in self.seed_norms[placement][str(d)]] for d in self.depths]
        else:
            per_depth = [self.seed_token[placement][str(d)] for d in self.depths]
        return [loglog_slope(self.depths, ys) for ys in zip(*per_depth, strict=True)]

    def profile(self, placement: str, depth: int) -> np.ndarray:
        return np.asarray(self.norms[placement][str(depth)])

    def spread(self, placement: str, depth: int) -> float:
        """max / min over layers."""
        p = self.profile(placement, depth)
        return float(p.max() / p.min())

    def last_over_first(self, placement: str, depth: int) -> float:
        p = self.profile(placement, depth)
        return float(p[-1] / p[0])

    def last_layer(self, placement: str) -> np.ndarray:
        """The last block's FFN-W2 gradient norm, one per depth (in ``depths`` order)."""
        return np.array([self.profile(placement, d)[-1] for d in self.depths])

    def depth_slope(self, placement: str) -> float:
        """Exponent k of the fit last-layer gradient ~ L^k over the depths."""
        return loglog_slope(self.depths, self.last_layer(placement))

    @property
    def has_tokens(self) -> bool:
        """Whether the per-token gradients were measured (not in older stored results)."""
        return bool(self.token)

    def last_layer_token(self, placement: str) -> np.ndarray:
        """Per-token last-layer W2 gradient (mean ||a_t||*||h_t||), one per depth."""
        return np.array([self.token[placement][str(d)] for d in self.depths])

    def token_slope(self, placement: str) -> float:
        """Exponent k of the fit per-token last-layer gradient ~ L^k over the depths."""
        return loglog_slope(self.depths, self.last_layer_token(placement))

    def alignment(self, placement: str) -> np.ndarray:
        """||batch gradient|| / mean per-token gradient of the last W2, one per depth.

        1 if every token's gradient a_t h_t^T points the same way, about 1/sqrt(n) for n
        unrelated ones: how much the per-token outer products add up rather than cancel.
        """
        batch = np.array([self.batch[placement][str(d)] for d in self.depths])
        return batch / self.last_layer_token(placement)

    def stream_profile(self, placement: str, depth: int | None = None) -> np.ndarray:
        """||x_l|| after blocks 1 .. L of the stack of ``depth`` layers (None: the deepest)."""
        return np.asarray(self.stream[placement][str(depth or max(self.depths))])

    def stream_slope(self, placement: str, depth: int | None = None) -> float:
        """Exponent k of the fit ||x_l|| ~ l^k over the blocks of one stack (None: deepest)."""
        prof = self.stream_profile(placement, depth)
        return loglog_slope(np.arange(1, len(prof) + 1), prof)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InitGradNorms:
        return cls(**data)


def _task_batch(size_vocab: int, task: str, batch: int, n_items: int, seed: int, device):
    from ..sequence_tasks import make_batch

    return make_batch(task, batch, n_items, size_vocab, seed=seed, device=device)


def _fc2_layers(model) -> dict:
    return {f"block{i}": blk.mlp.fc2 for i, blk in enumerate(model.blocks)}


def init_grad_norms(preset: str | None = None, norm: str = "layernorm") -> InitGradNorms:
    """Gradient norm of each block's FFN W2 at init, per depth and placement.

    Cached per (preset, norm); ``preset=None`` means the device's preset, so a chapter calling
    ``init_grad_norms()`` and its claim checks calling ``init_grad_norms("cpu")`` share a run.
    """
    return _init_grad_norms(preset or preset_name(), norm)


@functools.lru_cache(maxsize=8)
def _init_grad_norms(preset: str, norm: str) -> InitGradNorms:
    from ..gradflow import gradient_profile
    from ..sequence_tasks import lm_loss, seq_len
    from ..transformer import GPTConfig, TinyGPT

    size = SIZES[preset]
    device = pick_device("cuda" if preset == "cuda" else "cpu")
    norms: dict[str, dict[str, list[float]]] = {"post": {}, "pre": {}}
    stream: dict[str, dict[str, list[float]]] = {"post": {}, "pre": {}}
    token: dict[str, dict[str, float]] = {"post": {}, "pre": {}}
    batch: dict[str, dict[str, float]] = {"post": {}, "pre": {}}
    per_seed: dict[str, dict[str, dict[str, list]]] = {
        k: {"post": {}, "pre": {}} for k in ("norms", "stream", "token", "batch")
    }
    t = seq_len(size.task, size.n_items)
    with threads(size.threads):
        for depth in size.depths:
            for placement in ("post", "pre"):
                acc, sq = np.zeros(depth), np.zeros(depth)
                tok = bat = 0.0
                kept: dict[str, list] = {k: [] for k in per_seed}
                for seed in range(size.seeds):
                    cfg = GPTConfig(
                        vocab=size.vocab,
                        d_model=size.d_model,
                        n_heads=size.n_heads,
                        n_layers=depth,
                        max_len=t,
                        placement=placement,
                        norm=norm,
                        seed=seed,
                    )
                    model = TinyGPT(cfg).to(device)
                    b = _task_batch(size.vocab, size.task, size.batch, size.n_items, seed, device)
                    last = model.blocks[-1].mlp.fc2
                    # Only the FFN-W2 gradients are read: the backward skips the other weights'
                    # (the gradients reaching the W2s are the same).
                    for name, p in model.named_parameters():
                        p.requires_grad_(".mlp.fc2." in name)
                    with _stream_norms(model) as seen, _token_grads(last) as per_token:
                        prof = gradient_profile(
                            model, _fc2_layers(model), lambda m, b=b: lm_loss(m(b.x), b)
                        )
                    acc += prof.norms
                    sq += np.asarray(seen)
                    tok += per_token[0]
                    bat += float(last.weight.grad.double().norm())
                    kept["norms"].append(np.asarray(prof.norms, dtype=float).tolist())
                    kept["stream"].append(np.sqrt(np.asarray(seen)).tolist())
                    kept["token"].append(float(per_token[0]))
                    kept["batch"].append(float(last.weight.grad.double().norm()))
                norms[placement][str(depth)] = (acc / size.seeds).tolist()
                stream[placement][str(depth)] = np.sqrt(sq / size.seeds).tolist()
                token[placement][str(depth)] = tok / size.seeds
                batch[placement][str(depth)] = bat / size.seeds
                for k, v in kept.items():
                    per_seed[k][placement][str(depth)] = v
    return InitGradNorms(
        list(size.depths),
        norms,
        size.d_model,
        size.seeds,
        norm,
        stream,
        token,
        batch,
        per_seed["norms"],
        per_seed["stream"],
        per_seed["token"],
        per_seed["batch"],
    )


@contextlib.contextmanager
def _token_grads(layer):
    """Record one backward pass's per-token gradient of ``layer.weight`` (an nn.Linear).

    The weight's gradient of a mean loss over n scored tokens is sum_t a_t h_t^T, with h_t the
    layer's input at token t and a_t the loss's gradient at its output; token t's own loss has
    the gradient n a_t h_t^T, of norm n ||a_t|| ||h_t||. Yields a list that receives, after
    the backward pass, the mean of that norm over the tokens with a_t != 0 (the scored ones:
    an unscored token's last FFN reaches no loss), i.e. sum_t ||a_t|| ||h_t||.
    """
    out: list[float] = []

    def forward_hook(_module, inputs, output):
        h = inputs[0].detach().double().norm(dim=-1)

        def grad_hook(grad):
            out.append(float((grad.detach().double().norm(dim=-1) * h).sum()))

        output.register_hook(grad_hook)

    handle = layer.register_forward_hook(forward_hook)
    try:
        yield out
    finally:
        handle.remove()


@contextlib.contextmanager
def _stream_norms(model):
    """Record, for each block's output x_l, the mean over tokens of ||x_l||^2 (one forward).

    Yields the list the forward hooks fill, block 0 first; the hooks are removed on exit.
    """
    seen: list[float] = []

    def hook(_module, _inputs, out):
        seen.append(float(out.detach().double().pow(2).sum(-1).mean()))

    handles = [blk.register_forward_hook(hook) for blk in model.blocks]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


# --------------------------------------------------------------------------- training

_SWEEPS: dict[str, WarmupSweep] = {}
#: preset -> (the sweep, its four headline runs): one StabilityResult per sweep
_STABILITY: dict[str, tuple[WarmupSweep, StabilityResult]] = {}


def warmup_sweep(preset: str | None = None, progress: bool = False) -> WarmupSweep:
    """Post-LN and Pre-LN trained over the learning-rate x warm-up grid of ``preset``.

    Returns a :class:`WarmupSweep` (``preset=None``: the device's preset). ``progress=True``
    shows a tqdm bar on stderr. Cached per preset (``progress`` is not part of the key), so the
    chapter's heat map, its loss curves (:func:`train_stability`) and its claim checks share
    one run; ``warmup_sweep.cache_clear()`` empties the cache.
    """
    preset = preset or preset_name()
    if preset not in _SWEEPS:
        device = pick_device("cuda" if preset == "cuda" else "cpu")
        _SWEEPS[preset] = run_sweep(SIZES[preset], device, progress)
    return _SWEEPS[preset]


def train_stability(preset: str | None = None, progress: bool = False) -> StabilityResult:
    """The four runs of :func:`warmup_sweep` at the headline learning rate.

    Post-LN and Pre-LN, each without warm-up and with ``SIZES[preset].warmup`` steps of it.
    Shares the sweep's cache: ``train_stability.cache_clear()`` empties it.
    """
    preset = preset or preset_name()
    sweep = warmup_sweep(preset, progress)
    if preset not in _STABILITY or _STABILITY[preset][0] is not sweep:
        _STABILITY[preset] = (sweep, sweep.stability())
    return _STABILITY[preset][1]


def _clear_training() -> None:
    _SWEEPS.clear()
    _STABILITY.clear()


init_grad_norms.cache_clear = _init_grad_norms.cache_clear  # type: ignore[attr-defined]
train_stability.cache_clear = _clear_training  # type: ignore[attr-defined]
warmup_sweep.cache_clear = _clear_training  # type: ignore[attr-defined]


@scale_experiment("prepost")
def stored_run(preset: str) -> dict[str, Any]:
    """The data stored in ``results/gpu/prepost.json``: both experiments at ``preset``."""
    return {
        "preset": preset,
        "size": asdict(SIZES[preset]),
        "init": init_grad_norms(preset).to_json(),
        "sweep": warmup_sweep(preset, progress=True).to_json(),
        "training": train_stability(preset).to_json(),
        "matmul_precision": CUDA_MATMUL_PRECISION if preset == "cuda" else "highest",
    }


# --------------------------------------------------------------------------- paper-width check


def wide_check(preset: str | None = None) -> WideCheck:
    """:func:`wide_profiles` at the ``wide`` size of ``preset`` (None: the device's)."""
    return wide_profiles((SIZES[preset] if preset else choose(SIZES)).wide)
