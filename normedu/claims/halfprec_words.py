"""The sentence the chapter "Where the norm goes in today's large models" shows under its
half-precision table (:class:`normedu.halfprec.PrecisionResult`), built from the rows by the
course's seed rule (:func:`normedu.seeding.compare`): every worded comparison holds on the
rule over the rows, or the sentence says it does not.
"""

from __future__ import annotations

import math

from ..seeding import compare
from .since2020_placement_words import _span, ruled

#: Unit roundoff 2^-p of each half-precision dtype (p: significand bits incl. the implicit one).
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


def describe_precision(res) -> str:
    """The variance errors over the rows of :class:`PrecisionResult`, in words."""
    from ..halfprec import FLOAT32_STATS, LARGE_MEAN, ROUNDING_FLOOR, WELFORD_M2_FLOAT32

    e = res.per_row
    n = res.rows
    big = {d: e[d][str(LARGE_MEAN[d])] for d in e}
    half = [d for d in e if d != "float32"]
    one = {d: big[d]["one-pass"] for d in e}
    lost = all(compare(one[d], 0.5).sign > 0 for d in e)

    def ratio(d, a, b):
        return [x / y for x, y in zip(big[d][a], big[d][b], strict=True)]

    worse = {d: ratio(d, "two-pass, sums in dtype", "two-pass") for d in half}
    worse_clear = all(compare([math.log(v) for v in worse[d]], 0.0).sign > 0 for d in half)
    least = math.floor(min(min(v) for v in worse.values()))
    welf = {d: ratio(d, "Welford/Chan", "two-pass, sums in dtype") for d in half}

    def welford_words(d: str) -> str:
        c = compare([math.log(v) for v in welf[d]], 0.0)
        return (
            f"{_span(big[d]['Welford/Chan'], '.1e')} in {d}, "
            + ruled(
                c,
                f"larger than it (×{_span(welf[d], '.2g')})",
                f"smaller than it (×{_span(welf[d], '.2g')})",
                f"no different from it (×{_span(welf[d], '.2g')})",
            )  # fmt: skip
        )

    z16 = e["bfloat16"]["0.0"]
    m2 = compare([math.log(a / b) for a, b in zip(z16["Welford/Chan"], z16[WELFORD_M2_FLOAT32],
                                                    strict=True)], 0.0)  # fmt: skip
    f32 = [v for d in half for m in e[d] for v in e[d][m][FLOAT32_STATS]]
    # Read against rounding: an algorithm returning the dtype costs at least the floor (<= u,
    # the unit roundoff); "at rounding level" is every row within 2u, one more rounding.
    two_u = {d: 2 * UNIT_ROUNDOFF[d] for d in half}
    at_floor = all(max(big[d]["two-pass"]) <= two_u[d] for d in half)
    in_dtype = ("two-pass, sums in dtype", "Welford/Chan")
    above = all(
        compare([math.log(v / two_u[d]) for v in big[d][a]], 0.0).sign > 0
        for d in half
        for a in in_dtype
    )
    return (
        f"Over {n} rows: at the large mean, the one-pass formula's relative error is "
        + ", ".join(f"{_span(one[d], '.2g')} in {d}" for d in one)
        + (": **every digit lost** in every dtype. " if lost else ": not every digit is lost. ")
        + "Two-pass with torch's reductions keeps "
        + ", ".join(f"{_span(big[d]['two-pass'], '.1e')} ({d})" for d in e)
        + "; with its running sums stored in the dtype, "
        + ", ".join(f"{_span(big[d]['two-pass, sums in dtype'], '.1e')} ({d})" for d in half)
        + (
            f": at least {least}× worse in half precision on every row. "
            if worse_clear and least >= 1
            else ": not clearly worse on every row. "
        )
        + "Welford/Chan's error, against that: "
        + "; ".join(welford_words(d) for d in half)
        + ". Near mean 0 Welford/Chan's error comes mostly from its sum of squared deviations: "
        f"in bfloat16 it is {_span(z16['Welford/Chan'], '.1e')}, and "
        f"{_span(z16[WELFORD_M2_FLOAT32], '.1e')} with only that sum kept in float32 ("
        + ruled(m2, "smaller", "larger", "no different")
        + "). Every column but the last returns the variance in the row's dtype, and storing "
        "even the exact variance in it costs "
        + ", ".join(f"{_span(big[d][ROUNDING_FLOOR], '.1e')} ({d})" for d in half)
        + " at the large mean. Against twice the unit roundoff ("
        + ", ".join(f"{two_u[d]:.1e} for {d}" for d in half)
        + "), two-pass with torch's float32 accumulator "
        + ("stays within it on every row" if at_floor else "does **not** stay within it")
        + "; with the running state in the dtype, two-pass and Welford/Chan are "
        + ("clearly above it, by the rule over the rows. " if above else "not clearly above it. ")
        + (
            "**At a large mean, keeping the sums in float32 is what brings the error down to "
            "the dtype's own rounding; a stable algorithm with its sums in half precision "
            "stays far above it.** "
            if at_floor and above
            else "Here the data do **not** show that float32 sums decide the error. "
        )
        + "The last column, two-pass on the upcast row with its result left in float32, reaches "
        f"at most {max(f32):.0e} only because its result is not rounded to the dtype."
    )
