"""Seeds of the book's experiments, and the one rule that turns several seeds into a verdict.

**The offset.** Every random experiment of the course draws its randomness from a seed that
goes through :func:`seed` (or :func:`generator`, :func:`rng`, :func:`manual_seed`, which call
it). Each adds ``NORMEDU_SEED_OFFSET × STRIDE`` to the seed its caller chose, so one setting,
read here and nowhere else, moves every experiment onto seeds nobody chose::

    NORMEDU_SEED_OFFSET=3 make book

``STRIDE`` is large (10 000) because experiments derive several streams from one seed (the
initialization from ``s``, the batch order from ``s + 1``, a model's copy ``1000 + s``): an
offset of 1 must not turn one run's seed into another run's. Offset 0, the default, leaves every
seed as written, so the committed book is unchanged by this module. The reseeding audit
(:mod:`normedu.reseed`, ``make reseed``) rebuilds the claims under other offsets and lists
every verdict or worded description that changes.

Not shifted: the grader's inputs (``normedu.grading``: a student's hand-in must meet the same
checks however the book is built) and the benchmarks' random tensors (their numbers are
timings, not verdicts).

**The rule.** :func:`compare` decides whether per-seed differences show a difference: it does
when every seed agrees in sign, or when the mean exceeds twice its standard error; otherwise
the words say "k of n seeds" or "no difference detectable with n seeds". Every chapter words its
seed-dependent verdicts with it (:attr:`SeedComparison.words`), so a sentence that says a
difference is there can be checked by the same rule on any offset.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch and numpy stay unimported until an experiment asks for a generator
    import numpy as np
    import torch

__all__ = [
    "OFFSET_ENV",
    "STRIDE",
    "SeedComparison",
    "compare",
    "generator",
    "manual_seed",
    "offset",
    "rng",
    "seed",
    "seeds",
]

#: The one setting that shifts every experiment's seeds (an integer, default 0).
OFFSET_ENV = "NORMEDU_SEED_OFFSET"
#: How far apart one offset puts the seeds: more than any experiment adds to a seed of its own.
STRIDE = 10_000


@functools.cache
def offset() -> int:
    """The seed offset of this process: ``$NORMEDU_SEED_OFFSET`` as an integer (default 0).

    Read once per process: a page's kernel gets it from the build's environment.
    """
    raw = os.environ.get(OFFSET_ENV, "").strip()
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{OFFSET_ENV} must be an integer, got {raw!r}") from None


def seed(s: int) -> int:
    """The seed an experiment uses for its own seed ``s``: ``s + offset() * STRIDE``."""
    if isinstance(s, bool) or not isinstance(s, int):
        raise TypeError(f"a seed is an int, got {type(s).__name__} {s!r}")
    return s + offset() * STRIDE


def seeds(n: int, start: int = 0) -> tuple[int, ...]:
    """``n`` consecutive experiment seeds ``start, start+1, ...`` (unshifted: pass each to
    :func:`seed` or a generator function, which shift it). Kept unshifted so that pages and
    records name the seeds as the code writes them."""
    if n < 1:
        raise ValueError(f"need at least one seed, got n={n}")
    return tuple(range(start, start + n))


def generator(s: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`seed` ``(s)``."""
    import torch

    return torch.Generator().manual_seed(seed(s))


def manual_seed(s: int) -> None:
    """``torch.manual_seed(seed(s))``: for code that draws from torch's global generator
    (``nn.Linear``'s default initialization)."""
    import torch

    torch.manual_seed(seed(s))


def rng(s: int) -> np.random.Generator:
    """``numpy.random.default_rng(seed(s))``."""
    import numpy as np

    return np.random.default_rng(seed(s))


@dataclass(frozen=True)
class SeedComparison:
    """Per-seed differences ``a_i − b_i`` judged by the course's rule.

    - values: the per-seed differences, in seed order.
    - mean, se: their mean and standard error (sample std / √n; inf for one seed).
    - positive: how many seeds have a > b (difference above ``tie``).
    - negative: how many have a < b.
    - clear: a difference is shown: every seed agrees in sign (none tied), or |mean| > 2·se.
    - sign: +1 (a above b), −1 (below) or 0 when not clear.
    """

    values: tuple[float, ...]
    mean: float
    se: float
    positive: int
    negative: int
    clear: bool
    sign: int

    @property
    def n(self) -> int:
        return len(self.values)

    def words(self, above: str, below: str, same: str = "no difference detectable") -> str:
        """The verdict in words: ``above``/``below`` (what a > b / a < b means, e.g.
        "BatchNorm's error is higher") followed by how many seeds agree, e.g.
        "BatchNorm's error is higher on all 5 seeds", "… on 4 of 5 seeds (mean +2.1, twice the
        standard error 0.8)", or "no difference detectable with 5 seeds (3 of 5 above)"."""
        n = self.n
        if not self.clear:
            seeds = "1 seed" if n == 1 else f"{n} seeds"
            return f"{same} with {seeds} ({self.positive} of {n} above, {self.negative} below)"
        text = above if self.sign > 0 else below
        agree = self.positive if self.sign > 0 else self.negative
        if agree == n:
            return f"{text} on all {n} seeds"
        return (
            f"{text} on {agree} of {n} seeds (mean {self.mean:+.3g} exceeds twice its standard "
            f"error, {self.se:.2g})"
        )


def compare(
    a: Sequence[float] | float,
    b: Sequence[float] | float = 0.0,
    *,
    tie: float = 0.0,
) -> SeedComparison:
    """Judge per-seed values ``a`` against ``b``: paired by seed, or a scalar ``b`` as a fixed
    threshold for every seed (chance level; 1.0 for a ratio).

    ``tie``: differences with ``|d| <= tie`` count for neither side (a measurement's resolution:
    one test image's share of the error). A difference is *clear* when every seed agrees in sign
    with none tied, or when ``|mean| > 2 se``; one seed is never clear (no spread to judge by).
    """
    a_vals = _as_floats(a)
    b_vals = _as_floats(b, len(a_vals))
    if len(a_vals) != len(b_vals):
        raise ValueError(f"paired seeds need equal lengths, got {len(a_vals)} and {len(b_vals)}")
    d = tuple(x - y for x, y in zip(a_vals, b_vals, strict=True))
    n = len(d)
    mean = sum(d) / n
    se = math.inf if n < 2 else math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n)
    pos = sum(x > tie for x in d)
    neg = sum(x < -tie for x in d)
    clear = n >= 2 and (pos == n or neg == n or abs(mean) > 2 * se)
    sign = (1 if mean > 0 else -1) if clear else 0
    return SeedComparison(d, mean, se, pos, neg, clear, sign)


def _as_floats(x: Any, n: int | None = None) -> tuple[float, ...]:
    if isinstance(x, (int, float)):
        if n is None:
            raise ValueError("the per-seed values must be a sequence; only b may be a scalar")
        return (float(x),) * n
    vals = tuple(float(v) for v in x)
    if not vals:
        raise ValueError("no seeds to compare")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"per-seed values must be finite, got {vals}")
    return vals
