"""The kernel side of the Pre-/Post-Norm checks: the stack of sublayers and LayerNorms, its
inputs, the blocks a check hands the student's functions, and the harnesses that run them
where they live, in the kernel (:mod:`normedu.grading.kernel_side`); the grader computes the
references itself (:mod:`.prepost`).

A leaf module (NumPy, torch at first use, :mod:`.calls`): the grading kernel loads it for
real (:mod:`normedu.course.reach`). The blocks it builds are the wirings a check feeds the
student's gradient-norm function, so they are here too: a limit stated in the instructor
guide.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from normedu.grading.calls import call
from normedu.grading.errors import GradingError
from normedu.grading.kernel_side import kernel_side

#: What the course's own cells take from :mod:`.prepost` (served by a grading kernel's
#: stand-in of it, :data:`normedu.course.reach.LEAVES`): the stack and its inputs, not the
#: wirings.
__all__ = ["make_stack", "make_inputs", "plot_grad_norms", "DEPTH", "WIDTH", "BATCH"]

NOT_FLOAT = "return a list of Python floats (use .item())"

#: Depth and width of the experiment's stack.
DEPTH, WIDTH, BATCH = 24, 64, 32


def make_stack(depth: int = DEPTH, width: int = WIDTH, seed: int = 0) -> tuple[list, list]:
    """(sublayers, norms): ``depth`` MLPs Linear(w, 4w)-GELU-Linear(4w, w) and LayerNorms."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    subs = [
        nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        for _ in range(depth)
    ]
    norms = [nn.LayerNorm(width) for _ in range(depth)]
    return subs, norms


def make_inputs(batch: int = BATCH, width: int = WIDTH, seed: int = 1) -> tuple[Any, Any]:
    """(x, upstream): the stack's input and a random upstream gradient, both (batch, width)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)


def _pre(x, s, n):
    return x + s(n(x))


def _post(x, s, n):
    return n(x + s(x))


def make_blocks(kind: str, subs: list, norms: list) -> list[Callable]:
    """Residual blocks (callables on tensors), ``pre`` or ``post``, of sublayers and norms."""
    f = _pre if kind == "pre" else _post
    return [lambda h, s=s, n=n: f(h, s, n) for s, n in zip(subs, norms, strict=True)]


def plot_grad_norms(pre: list[float], post: list[float]) -> Any:
    """Figure of the gradient norm at each block's input, Pre-Norm against Post-Norm.

    Returns None while nbgrader grades the notebook (``NBGRADER_EXECUTION`` is set): grading
    needs no picture, and importing matplotlib costs seconds per submission.
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    from normedu.grading.compare import inline_figures
    from normedu.plots import COLORS, figure

    inline_figures()

    fig, ax = figure(width=6.5, height=3.6)
    blocks = range(1, len(pre) + 1)
    ax.plot(blocks, pre, marker="o", color=COLORS["pre"], label="Pre-Norm")
    ax.plot(blocks, post, marker="s", color=COLORS["post"], label="Post-Norm")
    ax.set(title="Gradient norm at each block's input", xlabel="block", ylabel="||dL/dh||")
    ax.legend()
    return fig


class _Counted:
    """A callable that counts its calls (to catch a block that calls norm twice)."""

    def __init__(self, fn: Callable) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, t: Any) -> Any:
        self.calls += 1
        return self.fn(t)


def _probe_fns():
    """Stand-ins chosen so that every wrong wiring gives a different number."""
    import torch

    def norm(t):
        return 2.0 * t + 1.0

    def sub(t):
        return 0.5 * t * t + torch.sin(t)

    return norm, sub


def blocks_from(spec: tuple) -> list[Callable]:
    """The blocks (callables on tensors) a plain ``spec`` names, the same in the kernel and in
    the grader: ``("pre" | "post", depth, width, seed)``, the residual blocks of
    ``make_stack(depth, width, seed)``; ``("functions", names)``, plain functions of
    :data:`BLOCK_FUNCTIONS` (``"tanh"``, ``"triple"``, ``"sin"``)."""
    kind, *rest = spec
    if kind in ("pre", "post"):
        depth, width, seed = (int(v) for v in rest)
        return make_blocks(kind, *make_stack(depth=depth, width=width, seed=seed))
    if kind == "functions":
        import torch

        table = {"tanh": torch.tanh, "triple": lambda t: 3.0 * t, "sin": torch.sin}
        return [table[name] for name in rest[0]]
    raise ValueError(f"unknown block spec {spec!r}")


@kernel_side
def _block_run(f: Callable, x: np.ndarray) -> dict:
    """In the kernel: ``f(x, sublayer, norm)`` with the stand-ins of :func:`_probe_fns`, each
    counting its calls, on the tensor of ``x``. Returns ``{"out": array or None, "type",
    "norm_calls", "sub_calls"}``."""
    import torch

    norm, sub = _probe_fns()
    n_c, s_c = _Counted(norm), _Counted(sub)
    out = call(f, torch.tensor(x), s_c, n_c, name=f.__name__, block=False)
    tensor = isinstance(out, torch.Tensor)
    return {
        "out": out.detach().double().numpy() if tensor else None,
        "type": type(out).__name__,
        "norm_calls": n_c.calls,
        "sub_calls": s_c.calls,
    }


@kernel_side
def _residual_run(f: Callable, x: np.ndarray, seed: int) -> dict:
    """In the kernel: ``f(x, sublayer, norm)`` with the block of ``make_stack(depth=1,
    width=D, seed=seed)`` on the tensor of ``x`` (..., D), and the gradient of its sum with
    respect to x. Returns ``{"out", "gx"}`` as arrays (``gx`` None without autograd)."""
    import torch

    subs, norms = make_stack(depth=1, width=int(np.shape(x)[-1]), seed=seed)
    xs = torch.as_tensor(x).clone().requires_grad_(True)
    out = call(f, xs, subs[0], norms[0], name=f.__name__, block=False)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(xs.shape):
        raise GradingError(f"{f.__name__} must return a tensor of shape {tuple(xs.shape)}")
    if not out.requires_grad:
        return {"out": out.detach().double().numpy(), "gx": None}
    (gx,) = torch.autograd.grad(out.sum(), xs)
    return {"out": out.detach().double().numpy(), "gx": gx.double().numpy()}


@kernel_side
def _grad_norms_run(f: Callable, spec: tuple, x: np.ndarray, up: np.ndarray) -> list[float]:
    """In the kernel: ``f(blocks, x, upstream)`` for the blocks of ``spec``
    (:func:`blocks_from`), its answer as a list of floats."""
    import torch

    blocks = blocks_from(spec)
    res = call(f, blocks, torch.tensor(x), torch.tensor(up), name=f.__name__, block=False)
    if not isinstance(res, (list, tuple)) or len(res) != len(blocks):
        n = len(res) if isinstance(res, (list, tuple)) else type(res).__name__
        raise GradingError(f"{f.__name__} must return a list of {len(blocks)} floats, got {n}")
    try:
        return [float(v) for v in res]
    except (TypeError, ValueError, RuntimeError) as e:
        raise GradingError(f"{NOT_FLOAT}: {e}") from e
