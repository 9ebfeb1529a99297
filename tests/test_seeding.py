"""normedu.seeding: the one seed offset, and the rule that turns several seeds into a verdict."""

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from normedu import seeding

PKG = Path(seeding.__file__).parent
# Where random experiments live; the grader's inputs and the benchmarks' tensors stay unshifted
# (see the module docstring), so they are not searched.
SHIFTED = ("experiments", "claims", "plots")
SHIFTED_FILES = ("halfprec.py", "stacked.py", "mlp.py", "convnet.py", "data.py",
                 "transformer.py", "sequence_tasks.py")  # fmt: skip
RAW_SEEDING = re.compile(r"torch\.Generator\(\)\.manual_seed\(|torch\.manual_seed\(|"
                         r"np\.random\.default_rng\(|np\.random\.seed\(|RandomState\(")  # fmt: skip


def test_every_experiment_seed_goes_through_the_offset():
    """A generator seeded directly would ignore NORMEDU_SEED_OFFSET: the audit could not move it."""
    files = [p for d in SHIFTED for p in (PKG / d).rglob("*.py")]
    files += [PKG / f for f in SHIFTED_FILES]
    raw = [
        f"{p.relative_to(PKG)}:{i}: {line.strip()}"
        for p in files
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if RAW_SEEDING.search(line)
    ]
    assert not raw, "seed these through normedu.seeding:\n" + "\n".join(raw)


def test_offset_shifts_every_generator_and_zero_changes_nothing():
    code = (
        "from normedu import seeding; import torch;"
        "print(seeding.seed(3), seeding.generator(3).initial_seed(),"
        " seeding.rng(3).integers(1 << 30), seeding.offset())"
    )

    def run(offset):
        env = {"NORMEDU_SEED_OFFSET": offset, "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        return out.stdout.split()

    s0, g0, r0, o0 = run("0")
    s2, g2, r2, o2 = run("2")
    assert (s0, g0, o0) == ("3", "3", "0")
    assert r0 == str(np.random.default_rng(3).integers(1 << 30))  # offset 0 = as written
    assert (s2, g2, o2) == (str(3 + 2 * seeding.STRIDE),) * 2 + ("2",)
    assert r2 == str(np.random.default_rng(3 + 2 * seeding.STRIDE).integers(1 << 30))


def test_bad_offset_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(seeding.OFFSET_ENV, "two")
    seeding.offset.cache_clear()
    try:
        with pytest.raises(ValueError, match="NORMEDU_SEED_OFFSET must be an integer"):
            seeding.offset()
    finally:
        monkeypatch.delenv(seeding.OFFSET_ENV)
        seeding.offset.cache_clear()
    with pytest.raises(TypeError):
        seeding.seed(1.0)
    assert seeding.manual_seed(5) is None and torch.initial_seed() == 5


@pytest.mark.parametrize(
    "diffs, clear, words",
    [
        ([0.1, 0.2, 0.05], True, "higher on all 3 seeds"),
        # one seed disagrees but the mean is 2.4 standard errors out: clear, 4 of 5
        ([1.0, 1.2, 0.9, 1.1, -0.1], True, "higher on 4 of 5 seeds"),
        # the jacobian chapter's six seeds against its 5% rule: no clear sign
        ([1.4, 14.6, 0.4, -4.4, 14.7, -6.1], False, "no difference detectable with 6 seeds"),
        ([-0.3], False, "no difference detectable with 1 seed"),
    ],
)
def test_rule_against_hand_computed_standard_errors(diffs, clear, words):
    c = seeding.compare(diffs)
    mean = sum(diffs) / len(diffs)
    se = (
        math.inf
        if len(diffs) < 2
        else math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs))
    )
    assert c.mean == pytest.approx(mean) and c.se == pytest.approx(se)
    assert c.clear is clear
    assert words in c.words("higher", "lower")


def test_rule_pairs_and_thresholds():
    # paired a - b; a scalar b is a threshold for every seed; ties count for neither side
    c = seeding.compare([1.0, 2.0, 3.0], [0.5, 2.5, 2.0])
    assert c.values == (0.5, -0.5, 1.0) and (c.positive, c.negative) == (2, 1)
    t = seeding.compare([0.68, 0.81, 1.29], 1.32)
    assert t.clear and t.sign == -1 and "below on all 3 seeds" in t.words("above", "below")
    tied = seeding.compare([0.01, 0.5, 0.6], tie=0.02)
    assert tied.positive == 2  # 0.01 is a tie
    with pytest.raises(ValueError, match="equal lengths"):
        seeding.compare([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        seeding.compare([1.0, float("nan")])


def test_claims_carry_quotes_and_per_seed_values_to_the_ledger():
    from normedu.ledger import Claim, to_markdown

    c = Claim("x.1", "x", "DyT is as fast", "Zhu et al., 2025", "ratio 1.05", "depends",
              per_seed={"ratio": [1.037, 1.066, 1.06]},
              quote="DyT offers no speedup", quote_where="§7")  # fmt: skip
    table = to_markdown([c])
    assert "“DyT offers no speedup” (§7)" in table and "ratio 1.04, 1.07, 1.06" in table
    with pytest.raises(ValueError, match="at most 30 words"):
        Claim("x.2", "x", "c", "s", "m", "cited", quote=" ".join(["w"] * 31), quote_where="p")
    with pytest.raises(ValueError, match="several seeds"):
        Claim("x.3", "x", "c", "s", "m", "confirmed", per_seed={"r": [1.0]})
    with pytest.raises(ValueError, match="quote_where"):
        Claim("x.4", "x", "c", "s", "m", "cited", quote="words")
