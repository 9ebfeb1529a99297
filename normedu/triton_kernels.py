"""Hand-written Triton forward kernels for LayerNorm and RMSNorm (CUDA).

One program normalizes one row, and the whole row lives in registers: it is read from memory
once, reduced twice (mean, then the centred variance, so no catastrophic cancellation), scaled
and written once. That is the minimum traffic, ``2 * N * D * itemsize`` bytes, which is why it
can run close to the GPU's copy bandwidth. TorchInductor's generated kernel for the same math
keeps the row in registers only up to 1024 features; beyond that it loops over the row and
reads it twice.

Shapes: ``x`` (N, D) contiguous; ``weight``, ``bias`` (D,) contiguous; ``out`` (N, D) like x.
Statistics are computed in float32 whatever the input dtype; ``out`` keeps its own dtype.

Triton is imported lazily: on machines without it (a CPU-only torch) this module still imports
and :func:`available` is False. With ``TRITON_INTERPRET=1`` set before the first import, the
kernels run on CPU tensors through Triton's interpreter, which is how ``tests/test_fast.py``
checks them without a GPU.
"""

from __future__ import annotations

import functools
import os

from torch import Tensor

__all__ = ["available", "MAX_D", "layer_norm_forward", "rms_norm_forward", "num_warps"]

#: Widest row kept in registers (64 KiB of float32 per row, spread over 16 warps).
MAX_D = 16384


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def norm_fwd(X, W, B, Y, D, eps, CENTER: tl.constexpr, BLOCK_D: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_D)
        mask = cols < D
        x = tl.load(X + row * D + cols, mask=mask, other=0.0).to(tl.float32)
        if CENTER:
            mean = tl.sum(x, axis=0) / D
            # masked lanes must not add (0 - mean)^2 to the variance
            x = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
        y = x * rstd * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        if CENTER:
            y += tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * D + cols, y.to(Y.dtype.element_ty), mask=mask)

    return norm_fwd, triton.next_power_of_2


@functools.cache
def available() -> bool:
    """True when Triton imports and can run here (a CUDA device, or the interpreter)."""
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return _interpreting() or torch.cuda.is_available()


def num_warps(block_d: int) -> int:
    """Warps per program: about 8 to 16 float32 values per thread, at most 16 warps."""
    return max(1, min(16, block_d // 256))


def _launch(x: Tensor, w: Tensor, b: Tensor | None, out: Tensor, eps: float, center: bool):
    n, d = x.shape
    if d > MAX_D:
        raise ValueError(
            f"the Triton kernel keeps a row in registers: D must be <= {MAX_D}, got {d}"
        )
    for name, t in (("x", x), ("weight", w), ("out", out)) + ((("bias", b),) if center else ()):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    kernel, next_pow2 = _kernel()
    block = next_pow2(d)
    kernel[(n,)](x, w, b if center else w, out, d, eps, CENTER=center, BLOCK_D=block,
                 num_warps=num_warps(block))  # fmt: skip
    return out


def layer_norm_forward(x: Tensor, w: Tensor, b: Tensor, eps: float, out: Tensor) -> Tensor:
    """y = (x - mean) / sqrt(var + eps) * w + b per row of x (N, D), written into ``out``."""
    return _launch(x, w, b, out, eps, center=True)


def rms_norm_forward(x: Tensor, w: Tensor, eps: float, out: Tensor) -> Tensor:
    """y = x / sqrt(mean(x**2) + eps) * w per row of x (N, D), written into ``out``."""
    return _launch(x, w, None, out, eps, center=False)
