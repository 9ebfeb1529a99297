"""The portable backend of :mod:`normedu.fast`: plain tensor code compiled by ``torch.compile``.

Each function below is what Inductor fuses into one loop nest over rows; :mod:`normedu.fast`
calls :func:`compiled` for every tensor neither hand-written kernel takes (backend
``"inductor"``) and for the backward of the Triton forward.

These kernels were the first design and remain the portable one:

* The kernels return **only** ``y`` (``dx``): no saved mean/rstd. Returning the row statistics
  as separate outputs makes Inductor's CPU backend split the kernel into one loop per pass
  (x is then read from memory three times). Without them it fuses the passes under a single
  loop over rows (outer-loop fusion): a row of ``D`` floats (16 KiB for D = 4096) is loaded
  from memory once and reused from the L1/L2 cache for the mean, the variance and the output.
* The backward **recomputes** the row statistics from ``x`` instead of saving them: it must
  read ``x`` anyway, so recomputing costs arithmetic, not bandwidth. Its ``dx`` is one fused
  loop over rows; ``dweight``/``dbias`` are sums over rows (the other loop order), for which
  Inductor emits a second loop that reads ``x`` and ``dy`` again: 5 tensor passes where the
  ideal is 3.
* bfloat16/float16 inputs are computed in float32 (upcast in registers, never written to
  memory); float32 and float64 stay as they are. ``y``/``dx`` come back in the input dtype,
  ``dweight`` and ``dbias`` in the parameter dtype.

Compile cost: ``dynamic=False`` specializes each kernel to its shape and dtype. The first call
with a new ``(N, D, dtype, device)`` compiles (seconds on a CPU, cached on disk by Inductor
for later processes); later calls with that shape run the compiled code directly. The module
raises Dynamo's recompile limit so that a benchmark over many shapes keeps compiled code.

Shapes: the forwards take x (N, D), w and b (D,), eps and return y (N, D) in x's dtype (the
``_out`` variants write into ``out`` instead); the backwards take dy, x (N, D), w (D,), eps and
return dx (N, D) in x's dtype, dweight and dbias (D,) in w's dtype.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = ["RECOMPILE_LIMIT", "compiled", "kernel_source", "raise_recompile_limit"]

#: Dynamo keeps at most this many compiled versions of one function (one per shape/dtype).
RECOMPILE_LIMIT = 256


def _acc(t: Tensor) -> Tensor:
    # Half types accumulate in float32; float32 and float64 stay as they are. Under
    # torch.compile the upcast happens in registers, no float32 copy is written to memory.
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _ln_forward(x: Tensor, w: Tensor, b: Tensor, eps: float) -> Tensor:
    xf = _acc(x)
    mean = xf.mean(dim=-1, keepdim=True)
    xc = xf - mean
    rstd = torch.rsqrt((xc * xc).mean(dim=-1, keepdim=True) + eps)
    return (xc * rstd * _acc(w) + _acc(b)).to(x.dtype)


def _rms_forward(x: Tensor, w: Tensor, eps: float) -> Tensor:
    xf = _acc(x)
    rstd = torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
    return (xf * rstd * _acc(w)).to(x.dtype)


def _ln_forward_out(x: Tensor, w: Tensor, b: Tensor, out: Tensor, eps: float) -> None:
    out.copy_(_ln_forward(x, w, b, eps))


def _rms_forward_out(x: Tensor, w: Tensor, out: Tensor, eps: float) -> None:
    out.copy_(_rms_forward(x, w, eps))


def _ln_backward(dy: Tensor, x: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    # dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)),  g = dy * w  (see normedu.functional)
    xf, dyf = _acc(x), _acc(dy)
    mean = xf.mean(dim=-1, keepdim=True)
    xc = xf - mean
    rstd = torch.rsqrt((xc * xc).mean(dim=-1, keepdim=True) + eps)
    x_hat = xc * rstd
    g = dyf * _acc(w)
    dx = rstd * (g - g.mean(dim=-1, keepdim=True) - x_hat * (g * x_hat).mean(dim=-1, keepdim=True))
    dw = (dyf * x_hat).sum(dim=0)
    db = dyf.sum(dim=0)
    return dx.to(x.dtype), dw.to(w.dtype), db.to(w.dtype)


def _rms_backward(dy: Tensor, x: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    # dx = rstd * (g - x_hat * mean(g * x_hat)): LayerNorm's without the centering term
    xf, dyf = _acc(x), _acc(dy)
    rstd = torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
    x_hat = xf * rstd
    g = dyf * _acc(w)
    dx = rstd * (g - x_hat * (g * x_hat).mean(dim=-1, keepdim=True))
    dw = (dyf * x_hat).sum(dim=0)
    return dx.to(x.dtype), dw.to(w.dtype)


_KERNELS = {
    "ln_forward": _ln_forward,
    "rms_forward": _rms_forward,
    "ln_forward_out": _ln_forward_out,
    "rms_forward_out": _rms_forward_out,
    "ln_backward": _ln_backward,
    "rms_backward": _rms_backward,
}


def kernel_source(name: str) -> str:
    """Source code of one kernel (``"ln_forward"``, ``"rms_backward"``, ...), for the book."""
    import inspect

    if name not in _KERNELS:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(_KERNELS)}")
    return inspect.getsource(_KERNELS[name])


def raise_recompile_limit(limit: int = RECOMPILE_LIMIT) -> None:
    """Let Dynamo keep ``limit`` compiled versions per function (one per shape and dtype).

    Its default (8) would make a benchmark over many shapes fall back to eager code silently.
    """
    import torch._dynamo.config as dynamo_config

    for key in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, key):
            setattr(dynamo_config, key, max(getattr(dynamo_config, key), limit))


@functools.cache
def compiled(name: str):
    """The compiled version of kernel ``name``, created once per process."""
    raise_recompile_limit()
    return torch.compile(_KERNELS[name], dynamic=False, fullgraph=True)
