"""Half-precision accuracy in units in the last place (ULPs), for the tests of norms that take
float16/bfloat16 inputs and promise to compute in float32.

A norm that accumulates in float32 and rounds once at the end lands within one ULP of the
output dtype of the exact (float64) result: the correctly rounded value is within half a ULP
and float32's own error is a small fraction of a half-precision ULP. A norm whose mean, variance
and products are each rounded to the half dtype is off by tens to thousands of ULPs once the
rows carry an offset (the rounded mean is off by up to half the dtype's spacing *at the offset*).
:func:`naive_half_layer_norm` is that naive norm, the negative control of those tests.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Outputs smaller than this in magnitude are measured in the ULP of FLOOR. Near zero the spacing
#: of a half dtype shrinks towards its subnormals while float32's absolute error of cancelling
#: the mean (about |offset| / std * 2**-24) does not, so an exact-ULP count there would fail
#: even torch's own float32 LayerNorm; 2**-4 keeps that error under 0.1 ULP for offsets
#: up to a few hundred standard deviations.
FLOOR = 2.0**-4


def ulp_error(got: Tensor, ref64: Tensor) -> float:
    """Largest ``|got - ref64|`` in ULPs of ``got.dtype`` at ``ref64`` (float64, same shape).

    The ULP of a value v is ``2**floor(log2 |v|) * finfo.eps``, with ``|v|`` raised to
    :data:`FLOOR` first. ``ref64.to(dtype)`` scores at most 0.5.
    """
    spacing = torch.exp2(torch.floor(torch.log2(ref64.abs().clamp_min(FLOOR))))
    spacing = spacing * torch.finfo(got.dtype).eps
    return ((got.double() - ref64).abs() / spacing).max().item()


def naive_half_layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """LayerNorm over the last axis with every intermediate stored in x's (half) dtype."""
    mean = x.mean(dim=-1, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(dim=-1, keepdim=True)
    out = centered * torch.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out
