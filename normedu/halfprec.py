"""A norm's statistics computed in a low-precision type: why kernels keep them in float32.

Three ways to compute the (biased) variance of a row ``x`` of n numbers, each of them keeping
every statistic it forms (sums, means, running states) **in the dtype it is given**
(``torch.float16``, ``torch.bfloat16``, ``torch.float32``): each torch operation on such a
tensor rounds its result to that dtype, as a kernel storing its state in it would.

- :func:`one_pass`: ``E[x^2] - E[x]^2``, one sweep over the data; cancels catastrophically
  when the mean is large against the spread.
- :func:`two_pass`: the mean first, then ``E[(x - mean)^2]``; a second sweep.
- :func:`welford_chan`: Welford's running mean and sum of squared deviations over chunks of
  the row (one sweep; what a thread of a GPU kernel keeps), the chunks' states then merged
  pairwise with Chan et al.'s formula (what the threads of a block do).

:func:`sum_of_squares` shows the other failure, float16's overflow: 65504 is its largest
finite value, so a sum of squares of a few thousand moderate numbers is infinite.

Torch's own reductions (``sum``, ``mean``) accumulate in float32 internally even for float16
and bfloat16 tensors and round only their result, so the errors measured here come from the
statistics being *stored* in the dtype, not from the accumulation inside one reduction.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "ALGORITHMS",
    "DTYPES",
    "LARGE_MEAN",
    "PrecisionResult",
    "one_pass",
    "two_pass",
    "welford_chan",
    "sum_of_squares",
    "precision_errors",
]

#: The dtypes compared, by name.
DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
}


def _check(x: Tensor) -> None:
    if x.dim() != 1 or x.numel() < 2:
        raise ValueError(f"x must be a 1-D tensor of at least 2 numbers, got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"x must hold floating-point numbers, got {x.dtype}")


def one_pass(x: Tensor) -> Tensor:
    """``mean(x^2) - mean(x)^2``, every intermediate in ``x.dtype``; x (n,) -> scalar."""
    _check(x)
    m = x.mean()
    return (x * x).mean() - m * m


def two_pass(x: Tensor) -> Tensor:
    """``mean((x - mean(x))^2)``, every intermediate in ``x.dtype``; x (n,) -> scalar."""
    _check(x)
    d = x - x.mean()
    return (d * d).mean()


def welford_chan(x: Tensor, chunks: int = 32) -> Tensor:
    """Welford over ``chunks`` interleaved chunks (one running state per chunk, all chunks
    advanced together), then Chan's pairwise merge of the states; every state in
    ``x.dtype``. x (n,) with n divisible by ``chunks`` (a power of 2) -> scalar.

    Welford: ``k += 1; delta = x - mean; mean += delta / k; m2 += delta * (x - mean)``.
    Chan: merging (n_a, mean_a, m2_a) and (n_b, mean_b, m2_b), ``delta = mean_b - mean_a``,
    ``mean = mean_a + delta n_b / n``, ``m2 = m2_a + m2_b + delta^2 n_a n_b / n``.
    """
    _check(x)
    n = x.numel()
    if chunks < 1 or chunks & (chunks - 1) or n % chunks:
        raise ValueError(f"chunks must be a power of 2 dividing n={n}, got {chunks}")
    cols = x.view(n // chunks, chunks)  # column c is chunk c
    mean = torch.zeros(chunks, dtype=x.dtype)
    m2 = torch.zeros(chunks, dtype=x.dtype)
    for k in range(1, cols.shape[0] + 1):
        v = cols[k - 1]
        delta = v - mean
        mean = mean + delta / k
        m2 = m2 + delta * (v - mean)
    count = float(cols.shape[0])
    while mean.numel() > 1:
        ma, mb = mean[0::2], mean[1::2]
        delta = mb - ma
        total = 2 * count
        mean = ma + delta * (count / total)
        m2 = m2[0::2] + m2[1::2] + delta * delta * (count * count / total)
        count = total
    return m2[0] / count


#: name -> function, in the order of the chapter's table.
ALGORITHMS = {"one-pass": one_pass, "two-pass": two_pass, "Welford/Chan": welford_chan}


def sum_of_squares(x: Tensor) -> Tensor:
    """``sum(x^2)`` in ``x.dtype`` (float16: infinite beyond 65504); x (n,) -> scalar."""
    _check(x)
    return (x * x).sum()


# --------------------------------------------------------------------------- the experiment


#: Per dtype, a mean large against the spread (std 1) for its precision: about 2^(3p/4) for
#: p significand bits, so the one-pass formula's cancellation (mean^2 2^-p) exceeds the
#: variance while the data itself still has spread in that dtype (mean < 2^p). float16's is
#: also below sqrt(65504), so that its E[x^2] does not overflow.
LARGE_MEAN = {"float16": 200.0, "bfloat16": 64.0, "float32": 2.0**18}
N_ROW = 4096


@dataclass
class PrecisionResult:
    """``errors[dtype][str(mean)][algorithm]``: relative error of the variance against
    float64 on the same (rounded) row; algorithm ``"float32 state"`` is two-pass on the row
    upcast to float32. ``sumsq``: float16 and float32 sums of squares of a row of std
    ``sumsq_std`` (rounded to float16 first, the same numbers for all three) and their
    float64 value."""

    n: int
    errors: dict[str, dict[str, dict[str, float]]]
    sumsq_std: float
    sumsq: dict[str, float]


@functools.lru_cache(maxsize=2)
def precision_errors() -> PrecisionResult:
    """The variance errors of this module's algorithms against float64 (the same on every
    device; cached)."""
    z = torch.randn(N_ROW, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    errors: dict[str, dict[str, dict[str, float]]] = {}
    for name, dtype in DTYPES.items():
        errors[name] = {}
        for mean in (0.0, LARGE_MEAN[name]):
            x = (mean + z).to(dtype)
            truth = float(x.double().var(unbiased=False))
            algos = dict(ALGORITHMS)
            if dtype != torch.float32:
                algos["float32 state"] = lambda r: two_pass(r.float())
            errors[name][str(mean)] = {
                a: abs(float(f(x).double()) - truth) / truth for a, f in algos.items()
            }
    std = 8.0
    row = std * z
    sumsq = {
        "float16": float(sum_of_squares(row.half())),
        "float32": float(sum_of_squares(row.half().float())),
        "float64": float((row.half().double() ** 2).sum()),
    }
    return PrecisionResult(N_ROW, errors, std, sumsq)
