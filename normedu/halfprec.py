"""A norm's statistics computed in a low-precision type: why kernels keep them in float32.

Ways to compute the (biased) variance of a row ``x`` of n numbers in the dtype it is given
(``torch.float16``, ``torch.bfloat16``, ``torch.float32``). They differ in where they add up:

- :func:`one_pass`: ``E[x^2] - E[x]^2``, one sweep over the data; cancels catastrophically
  when the mean is large against the spread. Its two means are torch reductions.
- :func:`two_pass`: the mean first, then ``E[(x - mean)^2]``; a second sweep. Its two means
  are torch reductions.
- :func:`two_pass_chunked`: the same two sweeps, with running sums over chunks of the row
  **stored in the dtype** after every element, as :func:`welford_chan`'s state is.
- :func:`welford_chan`: Welford's running mean and sum of squared deviations over chunks of
  the row (one sweep; what a thread of a GPU kernel keeps), the chunks' states then merged
  pairwise with Chan et al.'s formula (what the threads of a block do); every state stored
  in the dtype (or ``m2`` in ``m2_dtype``).

:func:`sum_of_squares` shows the other failure, float16's overflow: 65504 is its largest
finite value, so a sum of squares of a few thousand moderate numbers is infinite.

Torch's own reductions (``sum``, ``mean``) accumulate in float32 internally even for float16
and bfloat16 tensors and round only their result: :func:`one_pass` and :func:`two_pass`
therefore get a float32 accumulator for free, while :func:`two_pass_chunked` and
:func:`welford_chan` round their running state to the dtype at every element.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from . import seeding

__all__ = [
    "ALGORITHMS",
    "DTYPES",
    "LARGE_MEAN",
    "N_ROWS",
    "PrecisionResult",
    "one_pass",
    "two_pass",
    "two_pass_chunked",
    "welford_chan",
    "sum_of_squares",
    "overflow_row",
    "precision_errors",
    "FLOAT32_STATS",
    "ROUNDING_FLOOR",
    "WELFORD_FLOAT32",
    "WELFORD_M2_FLOAT32",
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


def _chunk_check(x: Tensor, chunks: int) -> Tensor:
    n = x.numel()
    if chunks < 1 or chunks & (chunks - 1) or n % chunks:
        raise ValueError(f"chunks must be a power of 2 dividing n={n}, got {chunks}")
    return x.view(n // chunks, chunks)  # column c is chunk c


def _chunked_mean(cols: Tensor) -> Tensor:
    """Mean of (rows, chunks) ``cols``: a running sum per chunk stored in ``cols.dtype``
    after every row, then the chunks' means averaged pairwise, in that dtype too."""
    s = torch.zeros(cols.shape[1], dtype=cols.dtype)
    for row in cols:
        s = s + row
    m = s / cols.shape[0]
    while m.numel() > 1:
        m = (m[0::2] + m[1::2]) / 2
    return m[0]


def two_pass_chunked(x: Tensor, chunks: int = 32) -> Tensor:
    """:func:`two_pass` with its sums over ``chunks`` interleaved chunks kept as running
    sums **in** ``x.dtype`` (rounded after every element, as :func:`welford_chan`'s state
    is), the chunks' means then averaged pairwise. x (n,), n divisible by ``chunks`` (a power
    of 2) -> scalar."""
    _check(x)
    cols = _chunk_check(x, chunks)
    d = cols - _chunked_mean(cols)
    return _chunked_mean(d * d)


def welford_chan(x: Tensor, chunks: int = 32, m2_dtype: torch.dtype | None = None) -> Tensor:
    """Welford over ``chunks`` interleaved chunks (one running state per chunk, all chunks
    advanced together), then Chan's pairwise merge of the states; every state in
    ``x.dtype``, except ``m2`` (the running sum of squared deviations) in ``m2_dtype`` if
    given. x (n,) with n divisible by ``chunks`` (a power of 2) -> scalar (``x.dtype``).

    Welford: ``k += 1; delta = x - mean; mean += delta / k; m2 += delta * (x - mean)``.
    Chan: merging (n_a, mean_a, m2_a) and (n_b, mean_b, m2_b), ``delta = mean_b - mean_a``,
    ``mean = mean_a + delta n_b / n``, ``m2 = m2_a + m2_b + delta^2 n_a n_b / n``.
    """
    _check(x)
    cols = _chunk_check(x, chunks)
    m2_dtype = m2_dtype or x.dtype
    mean = torch.zeros(chunks, dtype=x.dtype)
    m2 = torch.zeros(chunks, dtype=m2_dtype)
    for k in range(1, cols.shape[0] + 1):
        v = cols[k - 1]
        delta = v - mean
        mean = mean + delta / k
        m2 = m2 + (delta.to(m2_dtype) * (v - mean).to(m2_dtype))
    count = float(cols.shape[0])
    while mean.numel() > 1:
        ma, mb = mean[0::2], mean[1::2]
        delta = mb - ma
        total = 2 * count
        mean = ma + delta * (count / total)
        d2 = delta.to(m2_dtype) * delta.to(m2_dtype)
        m2 = m2[0::2] + m2[1::2] + d2 * (count * count / total)
        count = total
    return (m2[0] / count).to(x.dtype)


#: name -> function, in the order of the chapter's table.
ALGORITHMS = {
    "one-pass": one_pass,
    "two-pass": two_pass,
    "two-pass, sums in dtype": two_pass_chunked,
    "Welford/Chan": welford_chan,
}
#: Name of the table's last column: two-pass on the half-precision row upcast to float32,
#: its result left in float32 (so it is not rounded to the dtype as the other columns are).
FLOAT32_STATS = "two-pass, float32 statistics and result"
#: The error of storing the exact (float64) variance in the row's dtype: no algorithm that
#: returns the dtype can do better, so the columns that return the dtype are read against it.
ROUNDING_FLOOR = "exact variance stored in dtype"
#: Welford/Chan on the half-precision row upcast to float32 (a ledger check only).
WELFORD_FLOAT32 = "Welford/Chan, float32"
#: Welford/Chan with only its sum of squared deviations kept in float32 (mean in the dtype).
WELFORD_M2_FLOAT32 = "Welford/Chan, M2 in float32"


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


#: Standard deviation of :func:`overflow_row`: 4096 numbers of RMS 8 have sum(x^2) ~ 262144.
SUMSQ_STD = 8.0


#: Rows (seeds) of the experiment: the error of one row depends on its rounding, so every
#: verdict rests on several.
N_ROWS = 5


def _row(seed: int = 0) -> Tensor:
    """One of the chapter's rows: N_ROW standard normal numbers in float64 from ``seed``."""
    return torch.randn(N_ROW, generator=seeding.generator(seed), dtype=torch.float64)


def overflow_row() -> Tensor:
    """The float16 row (N_ROW,) of std SUMSQ_STD whose sum of squares the chapter shows
    overflowing; the same numbers as :class:`PrecisionResult`'s ``sumsq``."""
    return (SUMSQ_STD * _row()).half()


@dataclass
class PrecisionResult:
    """``per_row[dtype][str(mean)][algorithm]``: relative error of the variance against
    float64 on the same (rounded) row, one value per row (``rows`` rows of ``n`` numbers,
    seeds 0, 1, ...), for every algorithm of :data:`ALGORITHMS`, :data:`ROUNDING_FLOOR` (the
    exact variance rounded to the dtype) and, for the half-precision dtypes,
    :data:`FLOAT32_STATS` (two-pass on the row upcast to float32, result in float32),
    :data:`WELFORD_FLOAT32` and :data:`WELFORD_M2_FLOAT32`; ``errors``: the same keys, the
    median over the rows. ``sumsq``: float16 and float32 sums of squares of
    :func:`overflow_row` (std ``sumsq_std``) and their float64 value."""

    n: int
    errors: dict[str, dict[str, dict[str, float]]]
    sumsq_std: float
    sumsq: dict[str, float]
    per_row: dict[str, dict[str, dict[str, list[float]]]]
    rows: int


def _errors(z: Tensor) -> dict[str, dict[str, dict[str, float]]]:
    errors: dict[str, dict[str, dict[str, float]]] = {}
    for name, dtype in DTYPES.items():
        errors[name] = {}
        for mean in (0.0, LARGE_MEAN[name]):
            x = (mean + z).to(dtype)
            truth = float(x.double().var(unbiased=False))
            algos = dict(ALGORITHMS)
            algos[ROUNDING_FLOOR] = lambda r, t=truth: torch.tensor(t, dtype=torch.float64).to(
                r.dtype
            )
            if dtype != torch.float32:
                algos[FLOAT32_STATS] = lambda r: two_pass(r.float())
                algos[WELFORD_FLOAT32] = lambda r: welford_chan(r.float())
                algos[WELFORD_M2_FLOAT32] = lambda r: welford_chan(r, m2_dtype=torch.float32)
            errors[name][str(mean)] = {
                a: abs(float(f(x).double()) - truth) / truth for a, f in algos.items()
            }
    return errors


@functools.lru_cache(maxsize=2)
def precision_errors(rows: int = N_ROWS) -> PrecisionResult:
    """The variance errors of this module's algorithms against float64 on ``rows`` rows
    (the same on every device; cached)."""
    import statistics

    runs = [_errors(_row(s)) for s in seeding.seeds(rows)]
    per_row = {
        d: {m: {a: [r[d][m][a] for r in runs] for a in runs[0][d][m]} for m in runs[0][d]}
        for d in runs[0]
    }
    errors = {
        d: {m: {a: statistics.median(v) for a, v in by_a.items()} for m, by_a in by_m.items()}
        for d, by_m in per_row.items()
    }
    row = overflow_row()
    sumsq = {
        "float16": float(sum_of_squares(row)),
        "float32": float(sum_of_squares(row.float())),
        "float64": float((row.double() ** 2).sum()),
    }
    return PrecisionResult(N_ROW, errors, SUMSQ_STD, sumsq, per_row, rows)
