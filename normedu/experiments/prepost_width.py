"""Pre-Norm vs Post-Norm at the paper's width: per-layer gradient profiles at initialization.

One forward and backward pass per model at ``d_model`` 512 and 6 layers (the encoder of Xiong
et al., 2020): the reference stack, ``torch.nn.TransformerEncoderLayer``, against
:class:`normedu.transformer.TinyGPT`, as is and with all of its differences from the reference
(:data:`SWITCHES`) removed (and, with ``one_at_a_time``, with each removed alone).
:func:`wide_profiles` measures them all for one :class:`WideSize`;
:func:`normedu.experiments.prepost.wide_check` picks the size of a preset. The names are
re-exported by :mod:`normedu.experiments.prepost`, where the chapter finds them.
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import seeding
from .scale import threads

__all__ = [
    "WideSize",
    "WIDE",
    "SWITCHES",
    "WideProfile",
    "WideCheck",
    "encoder_grad_profile",
    "encoder_stack",
    "tinygpt_grad_profile",
    "tinygpt_at_init",
    "wide_profiles",
]


@dataclass(frozen=True)
class WideSize:
    """The setting of the paper-width gradient check (one forward and backward per model).

    ``d_model`` 512 and ``n_layers`` 6 as in the encoder of Xiong et al. (2020); a batch of
    ``batch`` sequences of ``seq_len`` positions; a cross-entropy head over ``classes``
    classes with random labels; ``seeds`` initialisations averaged. The reference stack is
    ``torch.nn.TransformerEncoderLayer`` (dropout 0, ReLU FFN of width 4 d_model,
    Xavier-uniform on every 2-D weight) fed unit-variance inputs. ``one_at_a_time``: also
    measure TinyGPT with each switch of :data:`SWITCHES` alone (four more profiles).
    """

    d_model: int = 512
    n_heads: int = 8
    # 6 layers, the paper's encoder, and 4 seeds (the fewest whose agreement the claims read as
    # a direction) cost what 12 layers and 2 seeds did: the chapter runs this in every build.
    n_layers: int = 6
    # 64 positions per pass. At 12 layers 16 x 8 gave the same verdicts as 32 x 8; at 6 layers
    # 16 x 4 gives the same directions and the same verdicts as 16 x 8, in a fifth less time.
    seq_len: int = 16
    batch: int = 4
    classes: int = 16
    seeds: int = 4
    threads: int | None = 1
    one_at_a_time: bool = False


WIDE = WideSize()


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

    gen = seeding.generator(1000 + seed)
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
    Returns an array of ``n_layers`` floats, layer 0 first. Both placements are measured on
    one stack (its weights do not depend on ``norm_first``) and remembered per seed and size.
    """
    key = (seed, size)
    if key not in _ENCODER_PROFILES:
        _ENCODER_PROFILES[key] = _encoder_grad_profiles(seed, size)
    return _ENCODER_PROFILES[key][placement].copy()


_ENCODER_PROFILES: dict[tuple, dict[str, np.ndarray]] = {}


def encoder_stack(seed: int, size: WideSize = WIDE, norm_first: bool = False):
    """The reference stack of :func:`encoder_grad_profile` and its head, freshly initialized."""
    import torch
    from torch import nn

    with torch.random.fork_rng(), _no_kaiming_draw():
        seeding.manual_seed(seed)
        layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                size.d_model,
                size.n_heads,
                4 * size.d_model,
                dropout=0.0,
                activation="relu",
                batch_first=True,
                norm_first=norm_first,
            )
            for _ in range(size.n_layers)
        )
        head = nn.Linear(size.d_model, size.classes)
        for p in [*layers.parameters(), *head.parameters()]:
            if p.dim() == 2:
                nn.init.xavier_uniform_(p)
    return layers, head


def _encoder_grad_profiles(seed: int, size: WideSize) -> dict[str, np.ndarray]:
    from torch import nn

    x, _, labels = _wide_batch(size, seed)
    # Drawing the weights costs more than the passes; norm_first only changes the forward,
    # which reads it at every call, so one stack serves both placements.
    layers, head = encoder_stack(seed, size)
    _only_grad_of(layers, "linear2.weight")
    out = {}
    for placement in ("post", "pre"):
        for layer in layers:
            layer.norm_first = placement == "pre"
            layer.linear2.weight.grad = None
        h = x
        for layer in layers:
            h = layer(h)
        loss = nn.functional.cross_entropy(head(h).flatten(0, 1), labels.flatten())
        loss.backward()
        out[placement] = np.array([float(layer.linear2.weight.grad.norm()) for layer in layers])
    return out


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

    from ..transformer import GPTConfig

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
    model = tinygpt_at_init(cfg)
    _only_grad_of(model, "mlp.fc2.weight")
    loss = F.cross_entropy(model(idx).flatten(0, 1), labels.flatten())
    loss.backward()
    return np.array([float(b.mlp.fc2.weight.grad.norm()) for b in model.blocks])


#: Xavier weights of the TinyGPTs built last, by (seed and every shape), at most
#: ``WIDE.seeds`` of them (about 75 MB each at d_model 512): every switch and both placements
#: of one seed draw the same weights (:func:`tinygpt_at_init`).
_DRAWS: OrderedDict[tuple, list] = OrderedDict()


def _draw_key(cfg) -> tuple:
    return (cfg.seed, cfg.vocab, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.ff, cfg.max_len)


@contextlib.contextmanager
def _no_uniform_draw():
    """Build modules without drawing any uniform numbers (the weights are copied in after)."""
    import torch

    own = "uniform_" in vars(torch.Tensor)
    original = torch.Tensor.uniform_
    torch.Tensor.uniform_ = lambda tensor, *args, **kwargs: tensor
    try:
        yield
    finally:
        if own:
            torch.Tensor.uniform_ = original
        else:
            del torch.Tensor.uniform_


def tinygpt_at_init(cfg):
    """``TinyGPT(cfg)`` at initialization, the same bit for bit, built faster in a sweep.

    Drawing the Xavier weights of a 512-wide stack costs more than a forward and backward pass.
    They depend on the seed and the shapes only, not on the placement or any switch of
    :data:`SWITCHES` (the embeddings, which ``embed_std`` scales, are drawn first and drawn
    again), so a model of a seed met recently copies them from the last one built.
    """
    from torch import nn

    from ..transformer import TinyGPT

    key = _draw_key(cfg)
    if cfg.init != "xavier":
        with _no_kaiming_draw():
            return TinyGPT(cfg)
    if key in _DRAWS:
        _DRAWS.move_to_end(key)
        with _no_kaiming_draw(), _no_uniform_draw():
            model = TinyGPT(cfg)
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        for m, w in zip(linears, _DRAWS[key], strict=True):
            m.weight.data.copy_(w)
        return model
    with _no_kaiming_draw():
        model = TinyGPT(cfg)  # its reset_parameters draws every weight from cfg.seed
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    _DRAWS[key] = [m.weight.detach().clone() for m in linears]
    while len(_DRAWS) > WIDE.seeds:
        _DRAWS.popitem(last=False)
    return model


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


@functools.lru_cache(maxsize=4)
def wide_profiles(size: WideSize = WIDE) -> WideCheck:
    """Gradient profiles at init at the paper's width: reference stack against TinyGPT.

    Rows: ``torch.nn.TransformerEncoderLayer`` (Post-LN and Pre-LN); TinyGPT as is (both
    placements); with ``size.one_at_a_time``, each of :data:`SWITCHES` alone on Post-LN (a
    switch that does not change the configuration, like removing a final norm Post-LN never
    had, is run on Pre-LN instead); all switches together (both placements). Cached per size:
    the chapter and its claims share one run.
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
                if size.one_at_a_time and _changes_model(post, ch) == (placement == "post")
            ]
            everything = {k: v for ch in SWITCHES.values() for k, v in ch.items()}
            rows.append(("all switches", everything))
            for name, ch in rows:
                profiles.append(
                    _profile("TinyGPT", placement, name, tinygpt_grad_profile, size, placement, ch)
                )
    return WideCheck(profiles, size)
