"""normedu.timing: the bookkeeping of interleaving, priming and inner calls (no speed asserts)."""

from __future__ import annotations

import pytest

from normedu import timing


def test_interleaved_rotates_primes_and_drops_warmup():
    log: list[str] = []
    fns = [lambda name=name: log.append(name) for name in "abc"]
    samples = timing.interleaved(fns, 2, warmup=1, inner=[1, 2, 1], prime=True)
    assert [len(s) for s in samples] == [2, 2, 2]
    assert all(t >= 0 for s in samples for t in s)
    # Round r starts at variant r (mod 3); each sample is one untimed priming call, then
    # `inner` timed calls.
    rounds = ["aabbbcc", "bbbccaa", "ccaabbb"]
    assert "".join(log) == "".join(rounds)


def test_interleaved_primes_only_fast_cpu_variants_by_default(monkeypatch):
    monkeypatch.setattr(timing, "PRIME_BELOW_S", -1.0)  # nothing is "fast": no priming
    calls = []
    samples = timing.interleaved([lambda: calls.append(1)], 3)
    assert len(samples[0]) == 3 and len(calls) == 1 + 3  # one probe call, three timed
    # A probe the caller measured already replaces the probe call: 10 ms primes, 1 s does not.
    monkeypatch.setattr(timing, "PRIME_BELOW_S", 0.05)
    counts = [0, 0]
    fns = [lambda i=i: counts.__setitem__(i, counts[i] + 1) for i in range(2)]
    timing.interleaved(fns, 3, probes=[0.01, 1.0])
    assert counts == [2 * 3, 3]
    with pytest.raises(ValueError, match="one probe per variant"):
        timing.interleaved(fns, 1, probes=[0.01])
    with pytest.raises(ValueError, match="rounds"):
        timing.interleaved([lambda: None], 0)


def test_a_variant_with_fewer_rounds_sits_out_the_last_ones():
    log: list[str] = []
    fns = [lambda name=name: log.append(name) for name in "abc"]
    samples = timing.interleaved(fns, [3, 1, 2], prime=False)
    assert [len(s) for s in samples] == [3, 1, 2]
    assert "".join(log) == "abc" + "ca" + "a"  # rounds start at a, b, c; b and c drop out
    with pytest.raises(ValueError, match="one number of rounds per variant"):
        timing.interleaved(fns, [1, 1], prime=False)


def test_rounds_within_a_time_budget():
    assert timing.rounds_within(0.01, most=9, least=5, budget_s=1.0) == 9  # 0.09 s: all
    assert timing.rounds_within(0.15, most=9, least=5, budget_s=1.0) == 7  # ceil(6.7)
    assert timing.rounds_within(0.4, most=9, least=5, budget_s=1.0) == 5  # never below least
    assert timing.rounds_within(1.0, most=3, least=5, budget_s=1.0) == 3  # nor above most


def test_inner_for_sizes_a_sample_to_its_target():
    assert timing.inner_for(1e-3, 0.01) == 10
    assert timing.inner_for(1.0, 0.01) == 1
    assert timing.inner_for(0.0, 1.0, most=50) == 50
