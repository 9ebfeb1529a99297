"""The fast kernels' engineering targets (normedu.fast_targets), on hand-made benchmark rows."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from normedu import fast_targets as T

N, D = 64, 4096


@dataclass
class FakeRun:
    """The three things the targets read from a BenchResult: find, copy_row, device."""

    times: dict[tuple[str, str, str], float]  # (op, impl, pass_) -> median seconds
    fracs: dict[tuple[str, str], float] = field(default_factory=dict)
    device: str = "test CPU"

    def find(self, op, impl, n, d, pass_="fwd", dtype="float32"):
        if (op, impl, pass_) not in self.times:
            raise KeyError((op, impl, pass_))
        frac = self.fracs.get((op, impl), 0.5)
        return {"median_s": self.times[(op, impl, pass_)], "frac_of_copy": frac, "frac_best": frac}

    def copy_row(self, n, d, dtype="float32", impl="copy"):
        return {"gbps": 3000.0}


def _run(eager=2.0, fast=1.0, fast_out=0.5, bwd=True, fracs=(0.8, 0.75)):
    times = {}
    for op in ("layernorm", "rmsnorm"):
        times |= {(op, "eager", "fwd"): eager, (op, "fast", "fwd"): fast}
        times[(op, "fast_out", "fwd")] = fast_out
        if bwd:
            times |= {(op, "eager", "fwdbwd"): 3.0, (op, "fast", "fwdbwd"): 2.0}
    return FakeRun(times, {("layernorm", "fast_out"): fracs[0], ("rmsnorm", "fast_out"): fracs[1]})


def test_targets_met_when_fast_and_close_to_copy():
    checks = T.check(_run(), N, D)
    assert len(checks) == 4 and all(c.met for c in checks), checks
    assert "eager time / fast time: forward, fresh output 2.00" in checks[1].measured
    assert "forward + backward 1.50" in checks[1].measured


@pytest.mark.parametrize(
    ("run", "unmet"),
    [
        (_run(fracs=(0.69, 0.9)), [0]),  # LayerNorm below 0.7 of copy bandwidth
        (_run(eager=0.9), [1, 3]),  # slower than eager with a fresh output
        (_run(bwd=False, fracs=(0.9, 0.5)), [2]),  # no backward rows: forward still judged
    ],
)
def test_each_target_fails_on_its_own(run, unmet):
    checks = T.check(run, N, D)
    assert [i for i, c in enumerate(checks) if not c.met] == unmet, checks


def test_gpu_target_only_with_a_stored_run():
    gpu = _run(fracs=(0.9, 0.6))
    gpu.device = "test GPU"
    checks = T.check(_run(), N, D, stored=gpu)
    assert len(checks) == 5 and checks[-1].device == "test GPU" and not checks[-1].met
    table = T.to_markdown(checks)
    assert table.count("\n") == 6 and "on test GPU | **no** |" in table
    assert T.summary_sentence(checks) == (
        "On test CPU, the stored run meets 4 of 5 targets; it misses: on a GPU, fast forward "
        "kernels at least 0.7 of the device's copy bandwidth."
    )
