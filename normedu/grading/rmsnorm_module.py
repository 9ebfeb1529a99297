"""The kernel side of the RMSNorm module checks: the student's ``RMSNorm`` class built and run
where it lives, in the kernel (:mod:`normedu.grading.kernel_side`); the grader draws the
inputs and computes the reference itself (:mod:`.rmsnorm`).

A leaf module (NumPy, torch at first use, :mod:`.calls`): the grading kernel loads it for
real (:mod:`normedu.course.reach`), so it holds no RMSNorm.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from normedu.grading.calls import call
from normedu.grading.errors import GradingError
from normedu.grading.kernel_side import kernel_side

PARAM = "weight must be a torch.nn.Parameter (self.weight = nn.Parameter(torch.ones(d))) so that the optimizer trains it"  # noqa: E501


def _make(cls: Any, *args: Any, **kwargs: Any) -> Any:
    return call(cls, *args, name=f"{getattr(cls, '__name__', 'RMSNorm')}(...)", **kwargs)


# The module lives in the student's kernel. What crosses to the grader are plain facts and
# arrays (the two harnesses below run there, :mod:`normedu.grading.kernel_side`); the
# grader draws the inputs and computes the reference itself.


@kernel_side
def _module_facts(cls: Any, d: int) -> dict:
    """In the kernel: is ``cls`` a torch module class, and, built as ``cls(d)``, its
    parameters' names and its ``weight`` (type name, Parameter or not, shape, values)."""
    import torch

    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        return {"module": False}
    m = _make(cls, d)
    w = getattr(m, "weight", None)
    facts: dict = {"module": True, "params": [str(n) for n, _ in m.named_parameters()]}
    if w is not None:
        tensor = isinstance(w, torch.Tensor)
        facts["weight"] = {
            "type": type(w).__name__,
            "parameter": isinstance(w, torch.nn.Parameter),
            "shape": [int(v) for v in w.shape] if tensor else None,
            "values": w.detach().double().numpy() if tensor else None,
        }
    return facts


@kernel_side
def _module_run(cls: Any, d: int, eps: float | None, x: Any, weight: Any, up: Any) -> dict:
    """In the kernel: ``cls(d)`` (or ``cls(d, eps=eps)``) with its weight set to ``weight``,
    run on ``x`` and back from the upstream gradient ``up`` (arrays, ``x`` and ``up`` of one
    shape). Returns ``{"out", "gx", "gw"}`` as arrays, ``gw`` None when the weight gets no
    gradient; raises GradingError when there is no such module or no autograd output."""
    import torch

    m = _make(cls, d) if eps is None else _make(cls, d, eps=eps)
    w = getattr(m, "weight", None)
    if not isinstance(w, torch.nn.Parameter):
        raise GradingError(f"RMSNorm({d}).weight is not a Parameter: {PARAM}")
    if tuple(w.shape) != (d,):
        raise GradingError(f"RMSNorm({d}).weight has shape {tuple(w.shape)}, expected ({d},)")
    with torch.no_grad():
        w.copy_(torch.as_tensor(weight))
    xt = torch.as_tensor(x).clone().requires_grad_(True)
    out = call(m, xt, name="RMSNorm.forward")
    shape = tuple(np.shape(x))
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
        raise GradingError(f"RMSNorm.forward must return a tensor of shape {shape}")
    if not out.requires_grad:
        raise GradingError("RMSNorm's output does not require grad: do not detach or use numpy")
    upstream = torch.as_tensor(up).to(out.dtype)
    gx, gw = torch.autograd.grad((out * upstream).sum(), (xt, w), allow_unused=True)
    return {
        "out": out.detach().double().numpy(),
        "gx": None if gx is None else gx.double().numpy(),
        "gw": None if gw is None else gw.double().numpy(),
    }
