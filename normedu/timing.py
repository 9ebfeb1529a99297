"""Timing one call, and timing several variants fairly against each other.

Every measurement of speed in the course goes through here: the kernel benchmark
(:mod:`normedu.bench`), the CPU kernel ablation (:mod:`normedu.ablation`) and the pRMSNorm
speed check (:mod:`normedu.experiments.rmsnorm`).

Rules, and why:

* **CPU**: ``time.perf_counter`` around the call(s). **CUDA**: CUDA events around ``inner``
  calls, synchronized before and after, so the time is the GPU's and not the launch's.
* ``inner`` calls back to back per sample, time reported per call: a call shorter than the
  timer's resolution (or, on CUDA, than the launch overhead) is measured over several.
* Variants are **interleaved round-robin**, the order rotating every round, so a change in
  machine load hits every variant alike and no variant always follows the same neighbour.
* On a CPU a parallel call right after a long single-threaded one (NumPy) or a pause runs up
  to 2x slower while idle cores wake up, so each variant faster than :data:`PRIME_BELOW_S`
  gets one untimed call right before its timed one.
* Interference from other work only ever slows a call down: the fastest sample is the robust
  estimate on a shared machine, the median the typical one. Callers keep what they need.
* A slow variant needs fewer samples for a stable median (one long call averages over more
  noise) and costs the most per sample: :func:`rounds_within` gives it fewer rounds, so it
  sits out the last ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "PRIME_BELOW_S",
    "Timer",
    "inner_for",
    "rounds_within",
    "interleaved",
]

#: CPU variants faster than this get an untimed call before each timed one.
PRIME_BELOW_S = 0.05


class Timer:
    """Seconds per call of ``fn``: ``Timer(device)(fn, inner=1)``.

    ``device``: a ``torch.device`` or its name; ``"cuda"`` devices are timed with events.
    """

    def __init__(self, device: Any = "cpu") -> None:
        self.cuda = getattr(device, "type", str(device).split(":")[0]) == "cuda"

    def __call__(self, fn: Callable[[], Any], inner: int = 1) -> float:
        if self.cuda:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3 / inner
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - t0) / inner


def inner_for(seconds_per_call: float, target_s: float, most: int = 1000) -> int:
    """Calls per sample so that one sample lasts about ``target_s`` (1 to ``most``)."""
    return max(1, min(most, int(target_s / max(seconds_per_call, 1e-7))))


def rounds_within(seconds_per_sample: float, most: int, least: int, budget_s: float) -> int:
    """Timed rounds for one variant: ``most``, or fewer (down to ``least``) when ``most``
    samples of ``seconds_per_sample`` each would take longer than ``budget_s``."""
    wanted = math.ceil(budget_s / max(seconds_per_sample, 1e-9))
    return max(min(least, most), min(most, wanted))


def interleaved(
    fns: Sequence[Callable[[], Any]],
    rounds: int | Sequence[int],
    *,
    timer: Timer | None = None,
    warmup: int = 0,
    inner: Sequence[int] | None = None,
    prime: bool | None = None,
    probes: Sequence[float] | None = None,
    on_call: Callable[[], Any] | None = None,
) -> list[list[float]]:
    """Samples (seconds per call) of each of ``fns``, ``rounds`` each, interleaved round-robin.

    Inputs:
    - fns: zero-argument callables, already compiled/faulted in if the caller cares.
    - rounds: timed rounds; each round times every variant once, order rotated by one. One
      number per variant instead: a variant with fewer rounds than the others sits out the
      last ones (see :func:`rounds_within`).
    - timer: a :class:`Timer` (default: CPU).
    - warmup: untimed rounds first, run the same way.
    - inner: calls per sample for each variant (default 1).
    - prime: one untimed call before each timed one: True, False, or None for "on a CPU,
      for the variants faster than :data:`PRIME_BELOW_S`" (one probe call decides).
    - probes: seconds per call of each variant that the caller has measured already (after
      its first call): with ``prime=None`` they decide instead of a probe call each.
    - on_call: called after each sample (a progress bar's update).

    Returns one list of samples per variant (its ``rounds``), in the order of ``fns``.
    """
    per_fn = [rounds] * len(fns) if isinstance(rounds, int) else list(rounds)
    if len(per_fn) != len(fns):
        raise ValueError(f"need one number of rounds per variant, got {len(per_fn)} for {len(fns)}")
    if min(per_fn, default=1) < 1 or warmup < 0:
        raise ValueError(f"need rounds >= 1 and warmup >= 0, got {rounds}, {warmup}")
    timer = timer or Timer()
    inner = list(inner) if inner is not None else [1] * len(fns)
    if probes is not None and len(probes) != len(fns):
        raise ValueError(f"need one probe per variant, got {len(probes)} for {len(fns)}")
    if prime is not None or timer.cuda:
        primed = [bool(prime)] * len(fns)
    else:
        times = probes if probes is not None else [timer(fn) for fn in fns]
        primed = [t < PRIME_BELOW_S for t in times]
    samples: list[list[float]] = [[] for _ in fns]
    for rnd in range(warmup + max(per_fn, default=0)):
        for i in [(j + rnd) % len(fns) for j in range(len(fns))]:
            if rnd >= warmup + per_fn[i]:
                continue
            if primed[i]:
                fns[i]()
            t = timer(fns[i], inner[i])
            if rnd >= warmup:
                samples[i].append(t)
            if on_call is not None:
                on_call()
    return samples
