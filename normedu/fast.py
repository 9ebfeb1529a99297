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
  row in registers; the backward is the compiled one.
* ``"inductor"``, everything else: :mod:`normedu.compiled_kernels`, plain tensor code and its
  hand-derived backward compiled with ``torch.compile`` (the design and its compile cost are
  described there).

Each call decides its backend once (:func:`_choose`) and passes it down; the backward runs the
C kernel exactly when the forward did. ``out=`` lets the caller pass a preallocated output. On
a CPU a fresh large tensor comes from ``mmap`` (glibc's default mmap threshold is at most 32
MiB), so the first write to every 4 KiB page takes a page fault and the operating system
zeroes the page: a hidden extra pass over memory. :mod:`normedu.bench` measures both.

The kernels are registered as ``torch.library`` custom ops (``normedu::layer_norm``,
``normedu::rms_norm`` and their backwards) with fake implementations (output shapes only) and
a registered autograd formula, so ``torch.compile(model, fullgraph=True)`` traces a model
built from :class:`FastLayerNorm`/:class:`FastRMSNorm` as one graph in which each norm is
one opaque node; the ctypes call into C stays invisible to the tracer.

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

import torch
from torch import Tensor, nn

from .compiled_kernels import compiled, kernel_source, raise_recompile_limit
from .conventions import DEFAULT_EPS

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

# --------------------------------------------------------------------------- backends


def backend(x: Tensor) -> str:
    """Which forward kernel :func:`layer_norm`/:func:`rms_norm` use for a tensor like ``x``.

    - ``"c"``: float32 on a CPU, when :mod:`normedu.cpu_kernels` could be built here: the
      hand-written C kernel (many partial sums, streaming stores for large outputs).
    - ``"triton"``: CUDA, with Triton installed and D <= :data:`normedu.triton_kernels.MAX_D`:
      the hand-written one-row-per-program kernel of :mod:`normedu.triton_kernels`.
    - ``"inductor"``: everything else: the torch.compile'd kernels of
      :mod:`normedu.compiled_kernels`.

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


def _choose(x2d: Tensor, w: Tensor, b: Tensor | None = None) -> str:
    """The backend one call runs on, decided once per call and passed down to the kernels.

    :func:`backend` of x, except that the C kernels take float32 parameters only (a float64
    weight on float32 x goes to Inductor). The backward runs the C kernel exactly when the
    forward did: the row statistics the C forward saves are what tells it so.
    """
    chosen = backend(x2d)
    if chosen == "c" and not all(p is None or p.dtype == torch.float32 for p in (w, b)):
        return "inductor"
    return chosen


def _forward(
    kind: str,
    chosen: str,
    x2d: Tensor,
    w: Tensor,
    b: Tensor | None,
    eps: float,
    out2d=None,
    stats=None,
) -> Tensor:
    """Forward of ``kind`` ("ln" or "rms") on backend ``chosen`` (from :func:`_choose`) for a
    contiguous (rows, D) x, into out2d if given.

    ``stats``: (mean, rstd) buffers for the C kernel to fill (backend "c" only).
    """
    if chosen == "c":
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
        return compiled(f"{kind}_forward")(*args, eps)
    compiled(f"{kind}_forward_out")(*args, out2d, eps)
    return out2d


def _backward(kind: str, dy: Tensor, x2d: Tensor, w: Tensor, eps: float, stats=None):
    """Backward of ``kind``: the C kernel when the forward ran it (``stats`` are the row
    statistics it saved), else the compiled kernel (which recomputes them)."""
    if stats is not None:
        from . import cpu_kernels

        dy = dy.to(torch.float32)  # the C forward's y is float32, and so is its gradient
        if kind == "ln":
            return cpu_kernels.layer_norm_backward(dy, x2d, w, eps, stats)
        return cpu_kernels.rms_norm_backward(dy, x2d, w, eps, stats)
    return compiled(f"{kind}_backward")(dy, x2d, w, eps)


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


def _stats_for(chosen: str, x2d: Tensor) -> tuple[Tensor, Tensor]:
    n = x2d.shape[0] if chosen == "c" else 0
    return tuple(torch.empty(n, dtype=torch.float32, device=x2d.device) for _ in range(2))


def _ln_impl(
    x2d: Tensor, weight: Tensor, bias: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd) of LayerNorm on a contiguous (N, D) x; stats (N,) or empty."""
    chosen = _choose(x2d, weight, bias)
    mean, rstd = _stats_for(chosen, x2d)
    stats = (mean, rstd) if chosen == "c" else None
    return _forward("ln", chosen, x2d, weight, bias, eps, None, stats), mean, rstd


def _rms_impl(x2d: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd) of RMSNorm on a contiguous (N, D) x; stats (N,) or empty."""
    chosen = _choose(x2d, weight)
    mean, rstd = _stats_for(chosen, x2d)
    stats = (mean, rstd) if chosen == "c" else None
    return _forward("rms", chosen, x2d, weight, None, eps, None, stats), mean, rstd


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
    # Shapes and dtypes only: what torch.compile needs to trace around the kernel. The same
    # rule as the implementation's says whether the statistics are saved (backend "c").
    return (torch.empty_like(x2d), *_stats_for(_choose(x2d, weight, bias), x2d))


def _rms_fake(x2d, weight, eps):
    return (torch.empty_like(x2d), *_stats_for(_choose(x2d, weight), x2d))


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
    """Source of the glue between LayerNorm's kernels and torch, for the book: the choice of
    backend, the op's implementation, its fake (shape-only) implementation, and its autograd
    formula. RMSNorm's is the same without the bias."""
    import inspect

    parts = (_choose, _ln_impl, _ln_fake, _op, _setup_context, _ln_autograd)
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
    eps: float = DEFAULT_EPS,
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
        _forward("ln", _choose(x2d, w, b), x2d, w, b, float(eps), out.view(-1, x.shape[-1]))
        return out
    if _eager_inference(x, weight, bias):
        return _forward("ln", _choose(x2d, w, b), x2d, w, b, float(eps)).view(x.shape)
    y, _, _ = _ln_op(x2d, w, b, float(eps))
    return y.view(x.shape)


def rms_norm(
    x: Tensor, weight: Tensor | None = None, eps: float = DEFAULT_EPS, out: Tensor | None = None
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
        _forward("rms", _choose(x2d, w), x2d, w, None, float(eps), out.view(-1, x.shape[-1]))
        return out
    if _eager_inference(x, weight):
        return _forward("rms", _choose(x2d, w), x2d, w, None, float(eps)).view(x.shape)
    y, _, _ = _rms_op(x2d, w, float(eps))
    return y.view(x.shape)


# --------------------------------------------------------------------------- modules


class FastLayerNorm(nn.Module):
    """``nn.LayerNorm(d)`` drop-in backed by :func:`layer_norm`: x (..., d) -> (..., d)."""

    def __init__(self, d: int, eps: float = DEFAULT_EPS, device=None, dtype=None) -> None:
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

    def __init__(self, d: int, eps: float = DEFAULT_EPS, device=None, dtype=None) -> None:
        super().__init__()
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"
