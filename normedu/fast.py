"""Fast LayerNorm and RMSNorm: one fused pass over memory, forward and backward.

Normalization does almost no arithmetic per byte (a few flops per element), so its time is set
by the bytes it moves: the forward reads ``x`` and writes ``y`` (``2 * N * D * bytes``), the
backward reads ``x`` and ``dy`` and writes ``dx`` (``3 * N * D * bytes``, plus the small
``dweight``/``dbias``). A kernel is "fast" when it moves little more than that, at close to
the memory bandwidth. The textbook torch code (:mod:`normedu.nn`) instead launches one kernel
per line, each reading and writing a full ``(N, D)`` temporary.

Backends (:func:`backend` says which one a tensor gets):

* ``"c"``, float32 on a CPU: :mod:`normedu.cpu_kernels`, hand-written C forward and backward
  (many partial sums per reduction, streaming stores into large preallocated outputs, row
  statistics saved by the forward for the backward).
* ``"triton"``, CUDA: :mod:`normedu.triton_kernels`, a hand-written forward that keeps each
  row in registers; the backward is the compiled one below.
* ``"inductor"``, everything else: the plain tensor code in :func:`_ln_forward`/
  :func:`_rms_forward` and their hand-derived backwards, compiled with ``torch.compile``.

The compiled kernels were the first design and remain the portable one:

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
* ``out=`` lets the caller pass a preallocated output. On a CPU a fresh large tensor comes
  from ``mmap`` (glibc's default mmap threshold is at most 32 MiB), so the first write to
  every 4 KiB page takes a page fault and the operating system zeroes the page: a hidden
  extra pass over memory. :mod:`normedu.bench` measures both.

The kernels are registered as ``torch.library`` custom ops (``normedu::layer_norm``,
``normedu::rms_norm`` and their backwards) with fake implementations (output shapes only) and
a registered autograd formula, so ``torch.compile(model, fullgraph=True)`` traces a model
built from :class:`FastLayerNorm`/:class:`FastRMSNorm` as one graph in which each norm is
one opaque node; the ctypes call into C stays invisible to the tracer.

Compile cost: ``dynamic=False`` specializes each kernel to its shape and dtype. The first call
with a new ``(N, D, dtype, device)`` compiles (seconds on a CPU, cached on disk by Inductor
for later processes); later calls with that shape run the compiled code directly. The module
raises Dynamo's recompile limit so that a benchmark over many shapes keeps compiled code.

Shapes (CS231n convention):

* ``layer_norm(x, weight, bias, eps, out=None)``: x (..., D); weight, bias (D,) or None;
  returns y (..., D) in x's dtype.
* ``rms_norm(x, weight, eps, out=None)``: x (..., D); weight (D,) or None.
* Backward (autograd): dx (..., D), dweight (D,) = sum over rows of ``dy * x_hat``,
  dbias (D,) = sum over rows of ``dy``.

``tests/test_fast.py`` checks forward and backward against :mod:`normedu.functional` (NumPy,
float64) and ``torch.nn.functional`` with random upstream gradients.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

__all__ = [
    "layer_norm",
    "rms_norm",
    "FastLayerNorm",
    "FastRMSNorm",
    "kernel_source",
    "glue_source",
    "backend",
    "raise_recompile_limit",
]

#: Dynamo keeps at most this many compiled versions of one function (one per shape/dtype).
RECOMPILE_LIMIT = 256


# --------------------------------------------------------------------------- the kernels
# Plain tensor code: Inductor fuses each function into one loop nest over rows.


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
def _compiled(name: str):
    """The compiled version of kernel ``name``, created once per process."""
    raise_recompile_limit()
    return torch.compile(_KERNELS[name], dynamic=False, fullgraph=True)


# --------------------------------------------------------------------------- backends


def backend(x: Tensor) -> str:
    """Which forward kernel :func:`layer_norm`/:func:`rms_norm` use for a tensor like ``x``.

    - ``"c"``: float32 on a CPU, when :mod:`normedu.cpu_kernels` could be built here: the
      hand-written C kernel (many partial sums, streaming stores for large outputs).
    - ``"triton"``: CUDA, with Triton installed and D <= :data:`normedu.triton_kernels.MAX_D`:
      the hand-written one-row-per-program kernel of :mod:`normedu.triton_kernels`.
    - ``"inductor"``: everything else: the torch.compile'd kernels above.

    The backward pass uses the C kernel for ``"c"`` and the compiled kernels otherwise.
    """
    from . import cpu_kernels, triton_kernels

    if x.device.type == "cpu" and x.dtype == torch.float32 and cpu_kernels.available():
        return "c"
    if (
        x.device.type == "cuda"
        and triton_kernels.available()
        and x.shape[-1] <= triton_kernels.MAX_D
    ):
        return "triton"
    return "inductor"


def _c_params(*params: Tensor | None) -> bool:
    # The C kernels take float32 parameters only; a float64 weight on float32 x goes to Inductor.
    return all(p is None or p.dtype == torch.float32 for p in params)


def _forward(
    kind: str, x2d: Tensor, w: Tensor, b: Tensor | None, eps: float, out2d=None, stats=None
) -> Tensor:
    """Forward of ``kind`` ("ln" or "rms") on a contiguous (rows, D) x, into out2d if given.

    ``stats``: (mean, rstd) buffers for the C kernel to fill (backend "c" only).
    """
    chosen = backend(x2d)
    if chosen == "c" and _c_params(w, b):
        from . import cpu_kernels

        # A fresh output: ordinary stores (its pages fault in zeroed, and cached); a caller's
        # buffer: streaming stores when it is large (see normedu.cpu_kernels).
        y = torch.empty_like(x2d) if out2d is None else out2d
        stream = False if out2d is None else None
        if kind == "ln":
            return cpu_kernels.layer_norm_forward(x2d, w, b, eps, y, stream, stats)
        return cpu_kernels.rms_norm_forward(x2d, w, eps, y, stream, stats)
    if chosen == "triton":
        from . import triton_kernels

        y = torch.empty_like(x2d) if out2d is None else out2d
        if kind == "ln":
            return triton_kernels.layer_norm_forward(x2d, w, b, eps, y)
        return triton_kernels.rms_norm_forward(x2d, w, eps, y)
    args = (x2d, w, b) if kind == "ln" else (x2d, w)
    if out2d is None:
        return _compiled(f"{kind}_forward")(*args, eps)
    _compiled(f"{kind}_forward_out")(*args, out2d, eps)
    return out2d


def _backward(kind: str, dy: Tensor, x2d: Tensor, w: Tensor, eps: float, stats=None):
    """Backward of ``kind``: the C kernel for float32 on a CPU (reusing the forward's
    ``stats`` when given), else the compiled kernel (which recomputes them)."""
    if backend(x2d) == "c" and dy.dtype == torch.float32 and _c_params(w):
        from . import cpu_kernels

        if kind == "ln":
            return cpu_kernels.layer_norm_backward(dy, x2d, w, eps, stats)
        return cpu_kernels.rms_norm_backward(dy, x2d, w, eps, stats)
    return _compiled(f"{kind}_backward")(dy, x2d, w, eps)


# --------------------------------------------------------------------------- validation


def _prepare(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, with_bias: bool, eps: float
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Return ``(x as a contiguous (rows, D) tensor, weight, bias)`` with None filled in."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not torch.is_floating_point(x):
        raise TypeError(f"x must be floating point, got dtype {x.dtype} (shape {tuple(x.shape)})")
    if x.dim() == 0 or x.shape[-1] == 0 or x.numel() == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}: it needs a non-empty last (feature) axis")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    d = x.shape[-1]
    params = []
    for name, p, fill in (("weight", weight, 1.0), ("bias", bias, 0.0)):
        if name == "bias" and not with_bias:
            params.append(None)
            continue
        if p is None:
            p = torch.full((d,), fill, dtype=x.dtype, device=x.device)
        elif tuple(p.shape) != (d,):
            raise ValueError(
                f"{name} has shape {tuple(p.shape)}, expected ({d},) to match the last axis of x "
                f"with shape {tuple(x.shape)}"
            )
        elif p.device != x.device:
            raise ValueError(f"{name} is on {p.device} but x is on {x.device}")
        params.append(p.contiguous())
    return x.reshape(-1, d).contiguous(), params[0], params[1]


def _check_out(out: Tensor, x: Tensor) -> None:
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"out must match x: got shape {tuple(out.shape)} {out.dtype} on {out.device}, "
            f"expected {tuple(x.shape)} {x.dtype} on {x.device}"
        )
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")


# --------------------------------------------------------------------------- custom ops
# The kernels are torch.library custom ops: torch.compile sees each as one opaque node (its
# "fake" implementation gives the output shapes without running it) and differentiates it
# with the registered backward, so a compiled model with FastLayerNorm keeps one graph.
# Each forward also returns the row statistics ``(mean, rstd)`` the C kernel saves for its
# backward: (N,) float32 for backend "c", empty for the others (which recompute them, because
# extra outputs split Inductor's CPU loop; see the module docstring).


def _saves_stats(x2d: Tensor, *params: Tensor | None) -> bool:
    return backend(x2d) == "c" and _c_params(*params)


def _stats_like(x2d: Tensor, *params: Tensor | None) -> tuple[Tensor, Tensor]:
    n = x2d.shape[0] if _saves_stats(x2d, *params) else 0
    return tuple(torch.empty(n, dtype=torch.float32, device=x2d.device) for _ in range(2))


def _ln_impl(
    x2d: Tensor, weight: Tensor, bias: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd) of LayerNorm on a contiguous (N, D) x; stats (N,) or empty."""
    mean, rstd = _stats_like(x2d, weight, bias)
    y = _forward("ln", x2d, weight, bias, eps, None, (mean, rstd) if mean.numel() else None)
    return y, mean, rstd


def _rms_impl(x2d: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd) of RMSNorm on a contiguous (N, D) x; stats (N,) or empty."""
    mean, rstd = _stats_like(x2d, weight)
    y = _forward("rms", x2d, weight, None, eps, None, (mean, rstd) if mean.numel() else None)
    return y, mean, rstd


def _ln_backward_impl(
    dy: Tensor, x2d: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias); reuses the forward's (mean, rstd) when they are not empty."""
    stats = (mean, rstd) if mean.numel() else None
    dx, dw, db = _backward("ln", dy.contiguous(), x2d, weight, eps, stats)
    return dx, dw, db


def _rms_backward_impl(
    dy: Tensor, x2d: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor, eps: float
) -> tuple[Tensor, Tensor]:
    """(dx, dweight) of RMSNorm."""
    stats = (mean, rstd) if mean.numel() else None
    dx, dw = _backward("rms", dy.contiguous(), x2d, weight, eps, stats)
    return dx, dw


def _ln_fake(x2d, weight, bias, eps):
    # Shapes and dtypes only: what torch.compile needs to trace around the kernel.
    return (torch.empty_like(x2d), *_stats_like(x2d, weight, bias))


def _rms_fake(x2d, weight, eps):
    return (torch.empty_like(x2d), *_stats_like(x2d, weight))


def _ln_backward_fake(dy, x2d, weight, mean, rstd, eps):
    return torch.empty_like(x2d), torch.empty_like(weight), torch.empty_like(weight)


def _rms_backward_fake(dy, x2d, weight, mean, rstd, eps):
    return torch.empty_like(x2d), torch.empty_like(weight)


def _op(name: str, impl, fake):
    op = torch.library.custom_op(f"normedu::{name}", impl, mutates_args=())
    op.register_fake(fake)
    return op


_ln_op = _op("layer_norm", _ln_impl, _ln_fake)
_rms_op = _op("rms_norm", _rms_impl, _rms_fake)
_ln_backward_op = _op("layer_norm_backward", _ln_backward_impl, _ln_backward_fake)
_rms_backward_op = _op("rms_norm_backward", _rms_backward_impl, _rms_backward_fake)


def _setup_context(ctx, inputs, output) -> None:
    x2d, weight, *_, eps = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x2d, weight, mean, rstd)
    ctx.eps = eps
    ctx.mark_non_differentiable(mean, rstd)


def _ln_autograd(ctx, dy: Tensor, _dmean, _drstd):
    x2d, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = _ln_backward_op(dy, x2d, weight, mean, rstd, ctx.eps)
    return dx, dw, db, None


def _rms_autograd(ctx, dy: Tensor, _dmean, _drstd):
    x2d, weight, mean, rstd = ctx.saved_tensors
    dx, dw = _rms_backward_op(dy, x2d, weight, mean, rstd, ctx.eps)
    return dx, dw, None


_ln_op.register_autograd(_ln_autograd, setup_context=_setup_context)
_rms_op.register_autograd(_rms_autograd, setup_context=_setup_context)


def glue_source() -> str:
    """Source of the glue between LayerNorm's kernels and torch, for the book: the op's
    implementation, its fake (shape-only) implementation, and its autograd formula.
    RMSNorm's is the same without the bias."""
    import inspect

    parts = (_ln_impl, _ln_fake, _op, _setup_context, _ln_autograd)
    return "\n\n".join(inspect.getsource(f) for f in parts)


def _needs_grad(*tensors: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _eager_inference(*tensors: Tensor | None) -> bool:
    # Outside torch.compile and without autograd the op's dispatch and its statistics
    # outputs buy nothing: call the kernel directly, as the benchmark's timings assume.
    return not torch.compiler.is_compiling() and not _needs_grad(*tensors)


def layer_norm(
    x: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    out: Tensor | None = None,
) -> Tensor:
    """Fused LayerNorm over the last axis; same result as ``F.layer_norm(x, (D,), w, b, eps)``.

    Inputs:
    - x: (..., D) floating point; computed in float32, returned in x's dtype.
    - weight, bias: (D,) or None (ones / zeros).
    - eps: added to the biased variance inside the square root.
    - out: optional preallocated (..., D) tensor like x to write into (forward only: not
      allowed when a gradient is needed).

    Returns y of shape (..., D). Differentiable (hand-written fused backward) in x, weight, bias.
    """
    x2d, w, b = _prepare(x, weight, bias, with_bias=True, eps=eps)
    if out is not None:
        if _needs_grad(x, weight, bias):
            raise ValueError("out= is for inference: it cannot be used when a gradient is needed")
        _check_out(out, x)
        _forward("ln", x2d, w, b, float(eps), out.view(-1, x.shape[-1]))
        return out
    if _eager_inference(x, weight, bias):
        return _forward("ln", x2d, w, b, float(eps)).view(x.shape)
    y, _, _ = _ln_op(x2d, w, b, float(eps))
    return y.view(x.shape)


def rms_norm(
    x: Tensor, weight: Tensor | None = None, eps: float = 1e-5, out: Tensor | None = None
) -> Tensor:
    """Fused RMSNorm over the last axis; same result as ``F.rms_norm(x, (D,), w, eps)``.

    Inputs: x (..., D); weight (D,) or None; eps; out as in :func:`layer_norm`.
    Returns y = weight * x / sqrt(mean(x**2) + eps), shape (..., D), in x's dtype.
    """
    x2d, w, _ = _prepare(x, weight, None, with_bias=False, eps=eps)
    if out is not None:
        if _needs_grad(x, weight):
            raise ValueError("out= is for inference: it cannot be used when a gradient is needed")
        _check_out(out, x)
        _forward("rms", x2d, w, None, float(eps), out.view(-1, x.shape[-1]))
        return out
    if _eager_inference(x, weight):
        return _forward("rms", x2d, w, None, float(eps)).view(x.shape)
    y, _, _ = _rms_op(x2d, w, float(eps))
    return y.view(x.shape)


# --------------------------------------------------------------------------- modules


class FastLayerNorm(nn.Module):
    """``nn.LayerNorm(d)`` drop-in backed by :func:`layer_norm`: x (..., d) -> (..., d)."""

    def __init__(self, d: int, eps: float = 1e-5, device=None, dtype=None) -> None:
        super().__init__()
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(d, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"


class FastRMSNorm(nn.Module):
    """``nn.RMSNorm(d, eps)`` drop-in backed by :func:`rms_norm`: x (..., d) -> (..., d)."""

    def __init__(self, d: int, eps: float = 1e-5, device=None, dtype=None) -> None:
        super().__init__()
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"
