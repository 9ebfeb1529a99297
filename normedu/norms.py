"""The registry of the norms the course builds models from: one entry per norm.

Everything that needs to know "what is a norm" reads :data:`NORMS`:

- :func:`normedu.nn.make_norm` builds a module from its ``kind`` (the ``norm=`` switch of
  :func:`normedu.mlp.deep_mlp` and :class:`normedu.transformer.GPTConfig`);
- :func:`normedu.nn.norm_classes` lists the module classes (normedu's and torch's), which
  :func:`normedu.mlp.norm_layers` and :func:`normedu.transformer.count_norms` look for;
- the transformer accepts the ``per_token`` norms (a (B, T, D) hidden state is normalized
  per token; a norm with statistics over the batch or over channel groups is not one);
- the anti-shortcut guard (:mod:`normedu.grading.guard`) blocks every ``function`` and module
  name here, in normedu and in torch.

Registering one more norm is one :class:`NormSpec` line in :data:`NORMS` (after its module
exists in :mod:`normedu.nn`, or in ``torch.nn`` written ``"torch.nn.Name"``).

This module imports neither torch nor numpy: the guard runs in numpy-only exercises.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["NONE", "NormSpec", "NORMS", "get", "kinds", "groups_for"]

#: The switch value for "no normalization" (an identity, not a registered norm).
NONE = "none"


@dataclass(frozen=True)
class NormSpec:
    """One norm.

    - kind: the lower-case switch value, e.g. ``"layernorm"``.
    - module: the module class: a name in :mod:`normedu.nn` (``"LayerNorm"``), or
      ``"torch.nn.Name"`` for a norm the course takes from torch. Built as
      ``cls(d, eps=eps)``, or ``cls(groups_for(d), d, eps=eps)`` when ``grouped``, or
      ``cls(d)`` when it has no ``eps`` (``has_eps=False``).
    - function: the functional entry point's name, in normedu and in torch (``"layer_norm"``).
    - torch_modules: torch.nn classes of the same norm (the guard blocks them; the model
      helpers count them as norms).
    - per_token: statistics per row over the last axis only, so that it applies to each
      token of a (B, T, D) hidden state.
    - grouped: the constructor takes a number of groups first (torch's ``GroupNorm``).
    - has_eps: the norm divides by a statistic and takes an ``eps``; False for an
      element-wise map such as DyT, which divides by nothing and has no ``eps`` argument.
    - color, linestyle, marker: how every figure of the book draws this norm (an Okabe-Ito
      colour, and a second cue so that no line is told apart by colour alone); read by
      :mod:`normedu.plots`, so a new norm is drawn without an edit there.
    """

    kind: str
    module: str
    function: str
    torch_modules: tuple[str, ...]
    per_token: bool
    grouped: bool = False
    has_eps: bool = field(default=True, kw_only=True)
    color: str = field(default="#000000", kw_only=True)
    linestyle: str | tuple = field(default="-", kw_only=True)
    marker: str = field(default="o", kw_only=True)

    @property
    def class_name(self) -> str:
        """The module class's own name (``"GroupNorm"`` for ``"torch.nn.GroupNorm"``)."""
        return self.module.rpartition(".")[2]


NORMS: tuple[NormSpec, ...] = (
    NormSpec(
        "batchnorm",
        "BatchNorm1d",
        "batch_norm",
        ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"),
        False,
        color="#D55E00",
        linestyle="--",
        marker="s",
    ),
    NormSpec(
        "layernorm", "LayerNorm", "layer_norm", ("LayerNorm",), True, color="#0072B2", marker="o"
    ),
    NormSpec(
        "rmsnorm",
        "RMSNorm",
        "rms_norm",
        ("RMSNorm",),
        True,
        color="#009E73",
        linestyle="-.",
        marker="^",
    ),
    NormSpec(
        "groupnorm",
        "GroupNorm",
        "group_norm",
        ("GroupNorm",),
        False,
        True,
        color="#CC79A7",
        linestyle=(0, (5, 1, 1, 1, 1, 1)),
        marker="D",
    ),
    # Dynamic Tanh (Zhu et al., 2025): gamma * tanh(alpha x) + beta, element-wise, with a
    # learnable scalar alpha; no statistic, so no eps. torch has no module of its own.
    NormSpec(
        "dyt",
        "DyT",
        "dyt",
        (),
        True,
        has_eps=False,
        color="#E69F00",
        linestyle=(0, (3, 1, 1, 1)),
        marker="h",
    ),
)


def kinds(*, per_token: bool | None = None) -> tuple[str, ...]:
    """The registered kinds (all, or only those with the given ``per_token``)."""
    return tuple(s.kind for s in NORMS if per_token is None or s.per_token == per_token)


def get(kind: str) -> NormSpec:
    """The entry of ``kind`` (case-insensitive); ValueError naming the choices otherwise."""
    for spec in NORMS:
        if spec.kind == kind.lower():
            return spec
    raise ValueError(f"unknown norm {kind!r}; choose one of {sorted((*kinds(), NONE))}")


def groups_for(width: int) -> int:
    """Groups of 8 features, or one group if ``width`` is not a multiple of 8.

    Wu & He (2018) found 32 groups best for ResNet's wide channel counts; the course's
    layers are narrow, so a fixed group size keeps several features per group.
    """
    return width // 8 if width % 8 == 0 else 1
