"""Pre-Norm vs Post-Norm: gradient norms at initialization and training stability at depth.

Two experiments on :class:`normedu.transformer.TinyGPT` stacks and the synthetic tasks of
:mod:`normedu.sequence_tasks`:

- :func:`init_grad_norms`: for each depth and placement, the gradient norm of every block's
  second FFN matrix (``mlp.fc2``, the W2 of Xiong et al., 2020, Fig. 3) at initialization,
  averaged over a few seeds.
- :func:`train_stability`: Post-LN and Pre-LN stacks trained with Adam at a high learning
  rate, with and without linear learning-rate warm-up; which ones train and which stall.

Both are cached (``functools.lru_cache``) per preset, so the chapter and its claim checks
share one run. ``SIZES["cpu"]`` finishes in seconds; ``SIZES["cuda"]`` is the full size that
``python -m normedu.experiments --store`` runs on a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..device import choose, pick_device, preset_name
from .scale import scale_experiment, threads

__all__ = [
    "PrePostSize",
    "SIZES",
    "InitGradNorms",
    "TrainRun",
    "StabilityResult",
    "init_grad_norms",
    "train_stability",
    "lr_at",
    "WideSize",
    "WIDE",
    "SWITCHES",
    "WideProfile",
    "WideCheck",
    "encoder_grad_profile",
    "tinygpt_grad_profile",
    "wide_check",
    "wide_profiles",
]


@dataclass(frozen=True)
class WideSize:
    """The setting of the paper-width gradient check (one forward and backward per model).

    ``d_model`` 512 as in Xiong et al. (2020); ``n_layers`` blocks; a batch of ``batch``
    sequences of ``seq_len`` positions; a cross-entropy head over ``classes`` classes with
    random labels; ``seeds`` initialisations averaged. The reference stack is
    ``torch.nn.TransformerEncoderLayer`` (dropout 0, ReLU FFN of width 4 d_model,
    Xavier-uniform on every 2-D weight) fed unit-variance inputs.
    """

    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 12
    # 128 positions per pass, half the time of 32 x 8 (the check runs in every build). Measured
    # at both: the same verdict ("depends") and the same direction for both implementations
    # and both placements; single switches move by up to 0.12 either way.
    seq_len: int = 16
    batch: int = 8
    classes: int = 16
    seeds: int = 2
    threads: int | None = 1


WIDE = WideSize()


@dataclass(frozen=True)
class PrePostSize:
    """Sizes of both experiments.

    Gradient norms at init: ``depths`` (layers), ``d_model``, ``n_heads``, ``vocab``,
    ``n_items`` (prompt length), ``batch``, ``seeds`` (averaged).
    Training: ``train_depth``, ``train_d_model``, ``train_heads``, ``train_batch``, ``steps``,
    ``lr`` (Adam peak), ``warmup`` (steps of linear warm-up in the warm-up runs), ``task``.
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


SIZES: dict[str, PrePostSize] = {
    "cpu": PrePostSize(
        depths=(6, 12, 24, 48),
        d_model=64,
        n_heads=4,
        vocab=16,
        n_items=6,
        batch=16,
        seeds=2,
        train_depth=8,
        train_d_model=32,
        train_heads=4,
        train_batch=16,
        steps=120,
        lr=5e-3,
        warmup=30,
        threads=1,
    ),
    "cuda": PrePostSize(
        depths=(6, 12, 24, 48),
        d_model=512,
        n_heads=8,
        vocab=64,
        n_items=16,
        batch=64,
        seeds=2,
        train_depth=24,
        train_d_model=512,
        train_heads=8,
        train_batch=64,
        # 4 runs of 1200 steps: about two minutes on one GPU, sized to fit a short lease.
        steps=1200,
        lr=1e-3,
        warmup=240,
    ),
}


# --------------------------------------------------------------------------- gradients at init


@dataclass
class InitGradNorms:
    """Per-layer gradient norms at initialization.

    ``norms[placement][str(depth)]`` is a list of L floats (block 0 first): the L2 norm of
    the gradient of that block's ``mlp.fc2`` weight and bias, averaged over ``seeds``.
    """

    depths: list[int]
    norms: dict[str, dict[str, list[float]]]
    d_model: int
    seeds: int
    norm: str = "layernorm"

    def profile(self, placement: str, depth: int) -> np.ndarray:
        return np.asarray(self.norms[placement][str(depth)])

    def spread(self, placement: str, depth: int) -> float:
        """max / min over layers."""
        p = self.profile(placement, depth)
        return float(p.max() / p.min())

    def last_over_first(self, placement: str, depth: int) -> float:
        p = self.profile(placement, depth)
        return float(p[-1] / p[0])

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
    t = seq_len(size.task, size.n_items)
    with threads(size.threads):
        for depth in size.depths:
            for placement in ("post", "pre"):
                acc = np.zeros(depth)
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
                    prof = gradient_profile(
                        model, _fc2_layers(model), lambda m, b=b: lm_loss(m(b.x), b)
                    )
                    acc += prof.norms
                norms[placement][str(depth)] = (acc / size.seeds).tolist()
    return InitGradNorms(list(size.depths), norms, size.d_model, size.seeds, norm)


# --------------------------------------------------------------------------- training

#: torch.set_float32_matmul_precision while training on CUDA ("high" = TF32 products).
CUDA_MATMUL_PRECISION = "high"


def lr_at(step: int, peak: float, warmup: int) -> float:
    """Learning rate at ``step`` (0-based): linear warm-up over ``warmup`` steps, then ``peak``."""
    if warmup < 0 or peak < 0:
        raise ValueError(f"warmup and peak must be >= 0, got warmup={warmup}, peak={peak}")
    return peak * min(1.0, (step + 1) / warmup) if warmup > 0 else peak


@dataclass
class TrainRun:
    """One training run: its switches, the loss per step, and the outcome.

    - losses: training loss per step (NaN once it diverged).
    - final_loss: mean loss over the last tenth of the steps.
    - accuracy: answer-token accuracy on a held-out batch after training.
    - diverged: a loss became NaN or infinite.
    - trained: final_loss below half of the chance-level loss ln(V).
    - grad_norms_end: per-block FFN-W2 gradient norm after training (block 0 first).
    """

    placement: str
    warmup: int
    losses: list[float]
    final_loss: float
    accuracy: float
    diverged: bool
    trained: bool
    grad_norms_end: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        w = f"warm-up {self.warmup}" if self.warmup else "no warm-up"
        return f"{self.placement.capitalize()}-LN, {w}"


@dataclass
class StabilityResult:
    """All runs of :func:`train_stability` plus the size they used."""

    runs: list[TrainRun]
    depth: int
    d_model: int
    steps: int
    lr: float
    task: str
    chance_loss: float

    def run(self, placement: str, warmup: bool) -> TrainRun:
        for r in self.runs:
            if r.placement == placement and bool(r.warmup) == warmup:
                return r
        raise KeyError(f"no run with placement={placement!r}, warmup={warmup}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StabilityResult:
        data = dict(data)
        data["runs"] = [TrainRun(**r) for r in data["runs"]]
        return cls(**data)


def _train_one(size: PrePostSize, placement: str, warmup: int, device, progress=None) -> TrainRun:
    import torch

    from ..gradflow import gradient_profile
    from ..sequence_tasks import accuracy, lm_loss, seq_len
    from ..training import adam
    from ..transformer import GPTConfig, TinyGPT

    t = seq_len(size.task, size.n_items)
    cfg = GPTConfig(
        vocab=size.vocab,
        d_model=size.train_d_model,
        n_heads=size.train_heads,
        n_layers=size.train_depth,
        max_len=t,
        placement=placement,
        seed=0,
    )
    model = TinyGPT(cfg).to(device)
    opt = adam(model.parameters(), lr=size.lr, betas=(0.9, 0.98))
    losses: list[float] = []
    diverged = False
    for step in range(size.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, size.lr, warmup)
        # A fresh batch every step (seeded by the step): the same data for every run.
        b = _task_batch(
            size.vocab, size.task, size.train_batch, size.n_items, 10_000 + step, device
        )
        loss = lm_loss(model(b.x), b)
        if not torch.isfinite(loss):
            diverged = True
            losses.extend([float("nan")] * (size.steps - step))
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress.update(1)
    tail = losses[-max(1, size.steps // 10) :]
    final = float(np.mean(tail)) if not diverged else float("nan")
    held = _task_batch(size.vocab, size.task, 256, size.n_items, 1, device)
    with torch.no_grad():
        acc = accuracy(model(held.x), held) if not diverged else 0.0
    grads: list[float] = []
    if not diverged:
        prof = gradient_profile(model, _fc2_layers(model), lambda m: lm_loss(m(held.x), held))
        grads = prof.norms.tolist()
    trained = (not diverged) and final < 0.5 * math.log(size.vocab)
    return TrainRun(placement, warmup, losses, final, acc, diverged, trained, grads)


_STABILITY: dict[str, StabilityResult] = {}


def train_stability(preset: str | None = None, progress: bool = False) -> StabilityResult:
    """Train Post-LN and Pre-LN stacks, each without and with warm-up.

    Returns a :class:`StabilityResult` with four runs. ``progress=True`` shows a tqdm bar on
    stderr. Cached per preset (``None`` = the device's preset; ``progress`` is not part of the
    key), so the chapter and its claim checks share one run; ``train_stability.cache_clear()``
    empties the cache.
    """
    preset = preset or preset_name()
    if preset not in _STABILITY:
        _STABILITY[preset] = _train_stability(preset, progress)
    return _STABILITY[preset]


def _train_stability(preset: str, progress: bool) -> StabilityResult:
    size = SIZES[preset]
    device = pick_device("cuda" if preset == "cuda" else "cpu")
    bar = None
    if progress:
        import sys

        # tqdm.std, not tqdm.auto: in a notebook tqdm.auto draws an ipywidget, which a static
        # page shows as raw JSON; the text bar goes to stderr, which the book removes.
        from tqdm.std import tqdm

        bar = tqdm(
            total=4 * size.steps, desc="training Post-LN / Pre-LN", leave=False, file=sys.stderr
        )
    import torch

    runs = []
    precision = torch.get_float32_matmul_precision()
    if device.type == "cuda":
        # TF32 matrix products: several times faster on a GPU, and a question about
        # stability at depth does not hinge on the last mantissa bits of the products.
        torch.set_float32_matmul_precision(CUDA_MATMUL_PRECISION)
    try:
        with threads(size.threads):
            for placement in ("post", "pre"):
                for warmup in (0, size.warmup):
                    runs.append(_train_one(size, placement, warmup, device, bar))
    finally:
        torch.set_float32_matmul_precision(precision)
    if bar is not None:
        bar.close()
    return StabilityResult(
        runs,
        size.train_depth,
        size.train_d_model,
        size.steps,
        size.lr,
        size.task,
        math.log(size.vocab),
    )


init_grad_norms.cache_clear = _init_grad_norms.cache_clear  # type: ignore[attr-defined]
train_stability.cache_clear = _STABILITY.clear  # type: ignore[attr-defined]


@scale_experiment("prepost")
def stored_run(preset: str) -> dict[str, Any]:
    """The data stored in ``results/gpu/prepost.json``: both experiments at ``preset``."""
    return {
        "preset": preset,
        "size": asdict(SIZES[preset]),
        "init": init_grad_norms(preset).to_json(),
        "training": train_stability(preset, progress=True).to_json(),
        "matmul_precision": CUDA_MATMUL_PRECISION if preset == "cuda" else "highest",
    }


# --------------------------------------------------------------------------- paper-width check


#: TinyGPT's differences from the reference stack, each as the GPTConfig change that removes
#: it. The chapter flips them one at a time, then all together.
SWITCHES: dict[str, dict[str, Any]] = {
    "no causal mask": {"causal": False},
    "ReLU instead of GELU": {"activation": "relu"},
    "unit-variance embeddings": {"embed_std": 2**-0.5},
    "no final norm": {"final_norm": False},
}


@dataclass
class WideProfile:
    """One model's per-layer gradient profile at init.

    ``norms``: L floats (block 0 first), the L2 norm of the gradient of each block's second
    FFN weight (``linear2.weight`` / ``mlp.fc2.weight``), averaged over seeds.
    ``seed_ratios``: last/first of each seed's own profile (how much one initialization
    moves the ratio).
    """

    model: str
    placement: str
    changes: str
    norms: list[float]
    seed_ratios: list[float] = field(default_factory=list)

    @property
    def last_over_first(self) -> float:
        return self.norms[-1] / self.norms[0]


@dataclass
class WideCheck:
    """All profiles of :func:`wide_check` plus the setting they used."""

    profiles: list[WideProfile]
    size: WideSize

    def get(self, model: str, placement: str, changes: str = "") -> WideProfile:
        for p in self.profiles:
            if (p.model, p.placement, p.changes) == (model, placement, changes):
                return p
        raise KeyError(f"no profile for {model!r}, {placement!r}, {changes!r}")

    def switch_rows(self, placement: str) -> list[WideProfile]:
        """TinyGPT's profiles at ``placement``: as is, each switch alone, all switches."""
        return [p for p in self.profiles if p.model == "TinyGPT" and p.placement == placement]


def _wide_batch(size: WideSize, seed: int):
    import torch

    gen = torch.Generator().manual_seed(1000 + seed)
    shape = (size.batch, size.seq_len)
    x = torch.randn(*shape, size.d_model, generator=gen)
    idx = torch.randint(0, size.classes, shape, generator=gen)
    labels = torch.randint(0, size.classes, shape, generator=gen)
    return x, idx, labels


@contextlib.contextmanager
def _no_kaiming_draw():
    """Build modules without ``nn.Linear``'s default Kaiming draw of its weight.

    Every 2-D weight is drawn again (Xavier) right after construction, so the first draw is
    wasted time: a third of building a 12-layer, 512-wide stack. Biases keep their defaults.
    """
    import torch

    original = torch.nn.init.kaiming_uniform_
    torch.nn.init.kaiming_uniform_ = lambda tensor, *args, **kwargs: tensor
    try:
        yield
    finally:
        torch.nn.init.kaiming_uniform_ = original


def _only_grad_of(module, suffix: str) -> None:
    """Ask autograd for the gradients of the parameters named ``*suffix`` only.

    The gradient reaching them is unchanged; the backward skips the other weight gradients,
    a third of its work.
    """
    for name, p in module.named_parameters():
        p.requires_grad_(name.endswith(suffix))


def encoder_grad_profile(placement: str, seed: int, size: WideSize = WIDE) -> np.ndarray:
    """Per-layer ``linear2.weight`` gradient norm of a ``torch.nn.TransformerEncoderLayer`` stack.

    ``size.n_layers`` layers with ``norm_first = (placement == "pre")``, no final norm, a
    linear head to ``size.classes`` classes; Xavier-uniform on every 2-D weight (biases keep
    PyTorch's default init). Input: unit-variance Gaussian (B, T, D); loss: cross-entropy
    against random labels over all B * T positions. One forward and one backward pass.
    Returns an array of ``n_layers`` floats, layer 0 first.
    """
    import torch
    from torch import nn

    x, _, labels = _wide_batch(size, seed)
    with torch.random.fork_rng(), _no_kaiming_draw():
        torch.manual_seed(seed)
        layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                size.d_model,
                size.n_heads,
                4 * size.d_model,
                dropout=0.0,
                activation="relu",
                batch_first=True,
                norm_first=placement == "pre",
            )
            for _ in range(size.n_layers)
        )
        head = nn.Linear(size.d_model, size.classes)
        for p in [*layers.parameters(), *head.parameters()]:
            if p.dim() == 2:
                nn.init.xavier_uniform_(p)
    _only_grad_of(layers, "linear2.weight")
    h = x
    for layer in layers:
        h = layer(h)
    loss = nn.functional.cross_entropy(head(h).flatten(0, 1), labels.flatten())
    loss.backward()
    return np.array([float(layer.linear2.weight.grad.norm()) for layer in layers])


def tinygpt_grad_profile(
    placement: str, changes: dict[str, Any] | None, seed: int, size: WideSize = WIDE
) -> np.ndarray:
    """Per-layer ``mlp.fc2.weight`` gradient norm of a :class:`TinyGPT` at init.

    The model reads random token ids (vocabulary ``size.classes``) and is scored by
    cross-entropy against random labels at every position, as in
    :func:`encoder_grad_profile`; ``changes`` are GPTConfig fields (see :data:`SWITCHES`).
    One forward and one backward pass; returns ``n_layers`` floats, block 0 first. Results
    are remembered per arguments, so asking again for a profile :func:`wide_check` measured
    costs nothing.
    """
    key = (placement, tuple(sorted((changes or {}).items())), seed, size)
    if key not in _TINY_PROFILES:
        _TINY_PROFILES[key] = _tinygpt_grad_profile(placement, changes, seed, size)
    return _TINY_PROFILES[key].copy()


_TINY_PROFILES: dict[tuple, np.ndarray] = {}


def _tinygpt_grad_profile(
    placement: str, changes: dict[str, Any] | None, seed: int, size: WideSize
) -> np.ndarray:
    from torch.nn import functional as F

    from ..transformer import GPTConfig, TinyGPT

    _, idx, labels = _wide_batch(size, seed)
    cfg = GPTConfig(
        vocab=size.classes,
        d_model=size.d_model,
        n_heads=size.n_heads,
        n_layers=size.n_layers,
        max_len=size.seq_len,
        placement=placement,
        seed=seed,
        **(changes or {}),
    )
    with _no_kaiming_draw():
        model = TinyGPT(cfg)  # its reset_parameters draws every weight from cfg.seed
    _only_grad_of(model, "mlp.fc2.weight")
    loss = F.cross_entropy(model(idx).flatten(0, 1), labels.flatten())
    loss.backward()
    return np.array([float(b.mlp.fc2.weight.grad.norm()) for b in model.blocks])


def _changes_model(base, changes: dict[str, Any]) -> bool:
    """Whether ``changes`` alter the model built from ``base`` (final_norm=False on a Post-LN
    stack, which has none, does not)."""
    other = base.with_(**changes)
    if other.has_final_norm != base.has_final_norm:
        return True
    return any(getattr(other, k) != getattr(base, k) for k in changes if k != "final_norm")


def _profile(model: str, placement: str, changes: str, fn, size: WideSize, *args) -> WideProfile:
    """Average ``fn(*args, seed, size=size)`` over the seeds into a :class:`WideProfile`."""
    runs = [fn(*args, seed, size=size) for seed in range(size.seeds)]
    mean = sum(runs) / size.seeds
    ratios = [float(r[-1] / r[0]) for r in runs]
    return WideProfile(model, placement, changes, mean.tolist(), ratios)


def wide_check(preset: str | None = None) -> WideCheck:
    """:func:`wide_profiles` at the ``wide`` size of ``preset`` (None: the device's)."""
    return wide_profiles((SIZES[preset] if preset else choose(SIZES)).wide)


@functools.lru_cache(maxsize=4)
def wide_profiles(size: WideSize = WIDE) -> WideCheck:
    """Gradient profiles at init at the paper's width: reference stack against TinyGPT.

    Rows: ``torch.nn.TransformerEncoderLayer`` (Post-LN and Pre-LN); TinyGPT as is (both
    placements); for Post-LN each of :data:`SWITCHES` alone (a switch that does not change the
    configuration, like removing a final norm Post-LN never had, is run on Pre-LN instead);
    all switches together (both placements). Cached per size: the chapter and its claims
    share one run.
    """
    from ..transformer import GPTConfig

    profiles = []
    with threads(size.threads):
        for placement in ("post", "pre"):
            ref = "nn.TransformerEncoderLayer"
            profiles.append(_profile(ref, placement, "", encoder_grad_profile, size, placement))
        for placement in ("post", "pre"):
            rows: list[tuple[str, dict[str, Any]]] = [("", {})]
            # Each switch alone once: on Post-LN if it changes a Post-LN model, otherwise (the
            # final norm, which only Pre-LN has) on Pre-LN.
            post = GPTConfig(placement="post")
            rows += [
                (n, ch)
                for n, ch in SWITCHES.items()
                if _changes_model(post, ch) == (placement == "post")
            ]
            everything = {k: v for ch in SWITCHES.values() for k, v in ch.items()}
            rows.append(("all switches", everything))
            for name, ch in rows:
                profiles.append(
                    _profile("TinyGPT", placement, name, tinygpt_grad_profile, size, placement, ch)
                )
    return WideCheck(profiles, size)
