"""A small convolutional network for the 8x8 digits, with a normalization switch.

The one CNN of the GroupNorm chapter (BatchNorm against GroupNorm across batch sizes, the
choice of G) and of the BatchNorm chapter's section on convolutional networks (the norm
before or after the non-linearity)::

    (N, 1, 8, 8) -> conv 3x3 (1 -> C1) -> block -> conv 3x3 (C1 -> C2) -> block
                 -> max-pool 2x2 -> flatten (N, C2 * 4 * 4) -> linear -> (N, 10) logits

where a block is ``norm -> ReLU`` (``norm_position="before"``, as in Ioffe & Szegedy 2015) or
``ReLU -> norm`` (``"after"``). Both convolutions keep the 8x8 size (padding 1), so every norm
layer sees (N, C, 8, 8) activations: BatchNorm takes each channel's statistics over N * 64
values, GroupNorm each group's over (C / G) * 64 values of one image.

The norms are torch's own modules (``BatchNorm2d``, ``GroupNorm``: one fused kernel each,
which keeps the chapter's training runs within a CPU budget); which norms qualify is read
from :data:`normedu.norms.NORMS` (those with statistics over channels, not per token), and
``tests/test_convnet.py`` checks the GroupNorm layer against
:func:`normedu.functional.group_norm`.
"""

from __future__ import annotations

from torch import nn

from . import norms, seeding

__all__ = ["POSITIONS", "IMAGE", "conv_kinds", "conv_norm", "conv_net", "norm_modules"]

#: Where the norm sits relative to the ReLU in each block.
POSITIONS = ("before", "after")
#: Height and width of a digit image.
IMAGE = 8


def conv_kinds() -> tuple[str, ...]:
    """The registered norms that apply to (N, C, H, W) feature maps: those that are not
    per token (a per-token norm would normalize over the width axis W alone)."""
    return norms.kinds(per_token=False)


def conv_norm(kind: str, channels: int, groups: int | None = None) -> nn.Module:
    """The norm ``kind`` for ``channels`` feature maps (N, C, H, W); ``"none"``: identity.

    - ``"batchnorm"``: ``torch.nn.BatchNorm2d`` (statistics per channel over N, H and W,
      running statistics for eval mode).
    - ``"groupnorm"``: ``torch.nn.GroupNorm(groups, channels)``, groups of adjacent channels
      (``groups`` must divide ``channels``; None: :func:`normedu.norms.groups_for`).
    """
    if kind.lower() == norms.NONE:
        return nn.Identity()
    spec = norms.get(kind)
    if spec.kind not in conv_kinds():
        raise ValueError(
            f"{kind!r} normalizes per token, not per channel map; the convnet takes one of "
            f"{sorted((*conv_kinds(), norms.NONE))}"
        )
    if spec.grouped:
        g = norms.groups_for(channels) if groups is None else groups
        if g < 1 or channels % g:
            raise ValueError(f"G = {g} groups must divide the {channels} channels")
        return getattr(nn, spec.class_name)(g, channels)
    # The 2-d variant among the torch modules of the same norm (BatchNorm2d).
    name = next(n for n in spec.torch_modules if n.endswith("2d"))
    return getattr(nn, name)(channels)


def conv_net(
    norm: str = "batchnorm",
    *,
    groups: int | None = None,
    norm_position: str = "before",
    channels: tuple[int, int] = (16, 16),
    seed: int | None = 0,
) -> nn.Sequential:
    """The digits CNN: input (N, 1, 8, 8) -> logits (N, 10).

    - norm: ``"batchnorm"``, ``"groupnorm"`` or ``"none"`` (see :func:`conv_norm`).
    - groups: GroupNorm's G in both norm layers (must divide both widths); None: the
      registry's default, groups of 8 channels.
    - norm_position: ``"before"`` (conv -> norm -> ReLU) or ``"after"`` (conv -> ReLU -> norm).
    - channels: widths (C1, C2) of the two convolutions. Equal widths by default, so that one
      G means the same in both layers (G = C is InstanceNorm in every layer).
    - seed: seeds torch's default initialization (None: the global RNG as it is).

    A convolution followed directly by a norm has no bias (the norm's mean subtraction removes
    it); with the norm after the ReLU, the bias shifts what the ReLU cuts, so it is kept.
    """
    if norm_position not in POSITIONS:
        raise ValueError(f"norm_position must be one of {POSITIONS}, got {norm_position!r}")
    if seed is not None:
        seeding.manual_seed(seed)
    bias = norm.lower() == norms.NONE or norm_position == "after"
    layers: list[nn.Module] = []
    c_in = 1
    for c in channels:
        layers.append(nn.Conv2d(c_in, c, 3, padding=1, bias=bias))
        block = [conv_norm(norm, c, groups), nn.ReLU()]
        layers += block if norm_position == "before" else block[::-1]
        c_in = c
    layers += [nn.MaxPool2d(2), nn.Flatten(), nn.Linear(c_in * (IMAGE // 2) ** 2, 10)]
    return nn.Sequential(*[m for m in layers if not isinstance(m, nn.Identity)])


def norm_modules(model: nn.Module) -> list[nn.Module]:
    """The norm layers of a :func:`conv_net`, in order (BatchNorm2d or GroupNorm)."""
    return [m for m in model if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm))]
