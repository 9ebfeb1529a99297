"""One change at a time: what each design choice of the CPU kernel is worth, measured.

:func:`cpu_kernel_ablation` times, on one float32 (N, D) tensor and a preallocated output,

- ``copy``: ``out.copy_(x)``, the roofline;
- ``inductor``: ``torch.compile`` of the plain tensor code
  (:func:`normedu.compiled_kernels._ln_forward`), which sums each row into one vector accumulator;
- ``c, ordinary stores``: the C kernel (:mod:`normedu.cpu_kernels`, 64 partial sums);
- ``c, streaming stores``: the same with non-temporal stores.

Variants run interleaved round-robin through :func:`normedu.timing.interleaved`, each call
preceded by an untimed one, and the fastest of ``reps`` calls is kept: on a shared machine
interference only ever slows a call down.
"""

from __future__ import annotations

from typing import Any

from .timing import interleaved

__all__ = ["cpu_kernel_ablation", "measure", "ABLATION_RECORD", "stored_ablation"]

#: The record the fast appendix reads (:mod:`normedu.records`).
ABLATION_RECORD = "cpu_kernel_ablation"


def cpu_kernel_ablation(n: int = 2048, d: int = 4096, reps: int = 9, seed: int = 0) -> dict:
    """Best-of-``reps`` seconds per variant for a LayerNorm forward of float32 (n, d) on a CPU.

    Returns ``{"n", "d", "reps", "seconds": {variant: s}, "frac_of_copy": {variant: f}}``
    where ``f = copy time / variant time`` (both move 2 * n * d * 4 bytes). Raises
    RuntimeError when the C kernels cannot be built here.
    """
    import torch

    from . import compiled_kernels, cpu_kernels
    from .conventions import DEFAULT_EPS

    if not cpu_kernels.available():
        raise RuntimeError(f"the C kernels are not available: {cpu_kernels.status()}")
    if n <= 0 or d <= 0 or reps < 1:
        raise ValueError(f"need n, d, reps >= 1, got n={n}, d={d}, reps={reps}")
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    w, b = torch.randn(d, generator=gen), torch.randn(d, generator=gen)
    out = torch.empty_like(x)
    eps = DEFAULT_EPS
    inductor = compiled_kernels.compiled("ln_forward_out")
    variants: dict[str, Any] = {
        "copy": lambda: out.copy_(x),
        "inductor": lambda: inductor(x, w, b, out, eps),
        "c, ordinary stores": lambda: cpu_kernels.layer_norm_forward(x, w, b, eps, out, False),
        "c, streaming stores": lambda: cpu_kernels.layer_norm_forward(x, w, b, eps, out, True),
    }
    for fn in variants.values():  # compile and fault everything in before timing
        fn()
    samples = interleaved(list(variants.values()), reps, prime=True)
    best = {name: min(s) for name, s in zip(variants, samples, strict=True)}
    return {
        "n": n,
        "d": d,
        "reps": reps,
        "seconds": best,
        "frac_of_copy": {k: best["copy"] / v for k, v in best.items()},
    }


def measure(runs: list[list[int]], seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, provenance)`` of the record :data:`ABLATION_RECORD`: ``data["runs"]`` holds
    :func:`cpu_kernel_ablation` of each ``(n, d, reps)`` of ``runs``, in order."""
    from .provenance import provenance

    data = {"runs": [cpu_kernel_ablation(n, d, reps=reps, seed=seed) for n, d, reps in runs]}
    return data, provenance(f"python -m normedu.records {ABLATION_RECORD}", device="cpu")


def stored_ablation() -> tuple[list[dict], dict[str, Any]]:
    """The stored ablation: (the :func:`cpu_kernel_ablation` results, their provenance)."""
    from .records import read

    rec = read(ABLATION_RECORD)
    return rec["data"]["runs"], rec["provenance"]
