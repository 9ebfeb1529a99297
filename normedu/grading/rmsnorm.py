"""Checks for the ``rmsnorm`` assignment.

Student code:
- ``rmsnorm_forward(x, gamma, eps=1e-5) -> out`` (numpy, x of shape (..., D))
- ``rmsnorm_backward(dout, x, gamma, eps=1e-5) -> (dx, dgamma)`` (numpy)
- ``class RMSNorm(torch.nn.Module)`` with ``__init__(self, d, eps=1e-5)`` and a ``weight``
  parameter, matching ``torch.nn.functional.rms_norm(x, (d,), weight, eps)``.

The numpy checks never import torch; only the ``check_module_*`` checks do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from normedu import functional as ref
from normedu.grading.compare import GradingError, assert_array, call, unchanged
from normedu.grading.diagnose import (
    Hypothesis,
    check_against,
    explained_by_rerun,
    norm_relations,
    normalize_backward,
)
from normedu.grading.gradcheck import numerical_gradient
from normedu.grading.guard import TORCH_OK, assert_no_shortcut

__all__ = [
    "check_forward_shapes",
    "check_forward_values",
    "check_forward_on",
    "check_backward_shapes",
    "check_backward_values",
    "check_backward_on",
    "check_module_structure",
    "check_module_forward",
    "check_module_on",
]

CENTERED = "RMSNorm does not subtract the mean: divide x itself by sqrt(mean(x²) + ε)"
AXIS = "you took the statistic over axis 0 (across the batch); RMSNorm normalizes each sample over its features: mean(x², axis=-1, keepdims=True)"  # noqa: E501
AXIS_3D = "for a 3-D input (B, T, D) RMSNorm normalizes each of the B·T vectors over its D features only: reduce over the last axis (axis=-1)"  # noqa: E501
L2 = "you divided by the L2 norm sqrt(Σx²); RMSNorm divides by the root MEAN square sqrt(mean(x²) + ε), which is √D times smaller"  # noqa: E501
EPS_OUT = "ε must be inside the square root: x / sqrt(mean(x²) + ε), not x / (rms + ε)"
EPS_IGNORED = "the eps argument is not used (or not inside the square root): divide by sqrt(mean(x²) + eps) with the eps you were given"  # noqa: E501
NO_SQRT = "you divided by the mean square; divide by its square root, sqrt(mean(x²) + ε)"
NO_GAMMA = "the scale γ is missing: out = γ · x / rms(x)"
DX_CONST = "dx treats the RMS as a constant (dx = γ·dout/rms); it depends on x, which adds a term: dx = (1/rms)·(g − x̂·mean(g·x̂)) with g = γ·dout"  # noqa: E501
DX_CENTER = "your dx subtracts mean(g): that term belongs to LayerNorm (it comes from the mean); RMSNorm has no mean, so dx = (1/rms)·(g − x̂·mean(g·x̂))"  # noqa: E501
DX_GAMMA = "dx must include γ: the upstream gradient reaches x̂ as g = γ·dout"
DG_X = "dγ = Σ dout·x̂ (the normalized input x̂ = x/rms), not dout·x"
DG_MEAN = "dγ is a sum over every leading axis, not a mean"
DG_AXES = "dγ has one value per feature: sum over EVERY leading axis (for (B, T, D) input, axes 0 and 1), e.g. .reshape(-1, D).sum(axis=0)"  # noqa: E501
PARAM = "weight must be a torch.nn.Parameter (self.weight = nn.Parameter(torch.ones(d))) so that the optimizer trains it"  # noqa: E501
INIT = "weight must start at ones, so that a fresh RMSNorm only normalizes"


def _probe(shape: tuple, seed: int, offset: float = 0.0, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    x = offset + scale * rng.standard_normal(shape) + 0.5
    return x, rng.uniform(0.5, 2.0, shape[-1])


def _rms_variant(x, gamma, eps, axis=-1, mode="inside", center=False, l2=False, sq=True):
    x = np.asarray(x, dtype=np.float64)
    if center:
        x = x - x.mean(axis=axis, keepdims=True)
    ms = (x * x).sum(axis=axis, keepdims=True) if l2 else (x * x).mean(axis=axis, keepdims=True)
    if mode == "inside":
        denom = np.sqrt(ms + eps) if sq else ms + eps
    elif mode == "outside":
        denom = np.sqrt(ms) + eps
    else:
        denom = np.sqrt(ms)
    out = x / denom
    return out * gamma if gamma is not None else out


def _hypotheses(x, gamma, eps) -> list[Hypothesis]:
    lead = tuple(range(x.ndim - 1))
    return [
        (CENTERED, lambda: _rms_variant(x, gamma, eps, center=True)),
        (AXIS, lambda: _rms_variant(x, gamma, eps, axis=0)),
        (AXIS_3D, lambda: _rms_variant(x, gamma, eps, axis=1)),
        (AXIS_3D, lambda: _rms_variant(x, gamma, eps, axis=lead)),
        (L2, lambda: _rms_variant(x, gamma, eps, l2=True)),
        (L2, lambda: _rms_variant(x, gamma, eps, l2=True, mode="none")),
        (EPS_OUT, lambda: _rms_variant(x, gamma, eps, mode="outside")),
        (EPS_IGNORED, lambda: _rms_variant(x, gamma, eps, mode="none")),
        (EPS_IGNORED, lambda: _rms_variant(x, gamma, 1e-5)),
        (EPS_IGNORED, lambda: _rms_variant(x, gamma, 1e-6)),
        (EPS_IGNORED, lambda: _rms_variant(x, gamma, 1e-8)),
        (NO_SQRT, lambda: _rms_variant(x, gamma, eps, sq=False)),
        (NO_GAMMA, lambda: _rms_variant(x, None, eps)),
    ]


def _fwd(f: Callable, x, gamma, eps=1e-5):
    args = [a.copy() for a in (x, gamma)]
    out = call(f, *args, eps=eps)
    for name, before, after in zip(("x", "gamma"), (x, gamma), args, strict=True):
        unchanged(before, after, name, f.__name__)
    return assert_array(out, x.shape, "out")


def _check_fwd(f, shape, seed, eps=1e-5, offset=0.0, scale=1.0, rtol=1e-6, atol=1e-8):
    x, gamma = _probe(shape, seed, offset, scale)
    check_forward_on(f, x, gamma, eps, rtol=rtol, atol=atol)


def check_forward_on(
    f: Callable,
    x: np.ndarray,
    gamma: np.ndarray,
    eps: float = 1e-5,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    what: str | None = None,
) -> None:
    """``f(x, gamma, eps=eps)`` against the reference on inputs the caller chooses.

    x: (..., D); gamma: (D,). A float64 probe that fails is diagnosed against the known
    mistakes; a float32 one only compared (pass a looser ``rtol``/``atol``).
    """
    assert_no_shortcut(f)
    out = _fwd(f, x, gamma, eps)
    float64 = np.asarray(x).dtype == np.float64
    with explained_by_rerun(
        lambda g, _: _fwd(f, x, g, eps), lambda g, _: ref.rms_norm(x, g, eps), gamma, None
    ):
        check_against(
            out,
            ref.rms_norm(x, gamma, eps),
            what
            or f"out for x of shape {x.shape}, eps={eps}" + ("" if float64 else f" ({x.dtype})"),
            _hypotheses(x, gamma, eps) if float64 else (),
            rtol=rtol,
            atol=atol,
            relations=norm_relations(x, -1, gamma, None, eps, center=False),
        )


def check_forward_shapes(f: Callable) -> None:
    """Output shape equals the input shape, for 2-D and 3-D float64/float32 input."""
    assert_no_shortcut(f)
    for shape in ((4, 6), (2, 3, 5)):
        for dtype in (np.float64, np.float32):
            x, gamma = (a.astype(dtype) for a in _probe(shape, 1))
            _fwd(f, x, gamma)


def check_forward_values(f: Callable) -> None:
    """2-D and 3-D input against the reference, with the default eps and with eps = 0.3."""
    assert_no_shortcut(f)
    _check_fwd(f, (6, 5), 2)
    _check_fwd(f, (6, 5), 3, eps=0.3, scale=0.3)
    _check_fwd(f, (2, 3, 4), 4)


def _bwd(b: Callable, dout, x, gamma, eps=1e-5):
    args = [a.copy() for a in (dout, x, gamma)]
    res = call(b, *args, eps=eps)
    if not isinstance(res, tuple) or len(res) != 2:
        raise GradingError(f"{b.__name__} must return a tuple (dx, dgamma)")
    dx, dgamma = res
    d = x.shape[-1]
    v = np.asarray(dgamma)
    if v.shape != (d,) and v.shape[-1:] == (d,):
        raise GradingError(f"dgamma has shape {v.shape}, expected ({d},): {DG_AXES}")
    return assert_array(dx, x.shape, "dx"), assert_array(v, (d,), "dgamma")


def _check_bwd(b, shape, seed, eps=1e-5, numeric=False, rtol=1e-6, atol=1e-8):
    x, gamma = _probe(shape, seed)
    dout = np.random.default_rng(seed + 100).standard_normal(shape)
    if numeric:
        expected = (
            numerical_gradient(lambda x_: _rms_variant(x_, gamma, eps), x, dout),
            numerical_gradient(lambda g: _rms_variant(x, g, eps), gamma, dout),
        )
    else:
        expected = ref.rms_norm_backward(dout, x, gamma, eps)
    label = f"for x of shape {shape}, eps={eps}" + (" (vs finite differences)" if numeric else "")
    _compare_bwd(b, dout, x, gamma, eps, expected, label, rtol, atol)


def check_backward_on(
    b: Callable,
    dout: np.ndarray,
    x: np.ndarray,
    gamma: np.ndarray,
    eps: float = 1e-5,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-8,
) -> None:
    """``b(dout, x, gamma, eps=eps)`` against the reference backward on the caller's inputs.

    dout, x: (..., D); gamma: (D,). Raises with the likely mistake.
    """
    assert_no_shortcut(b)
    expected = ref.rms_norm_backward(dout, x, gamma, eps)
    _compare_bwd(
        b, dout, x, gamma, eps, expected, f"for x of shape {x.shape}, eps={eps}", rtol, atol
    )


def _compare_bwd(b, dout, x, gamma, eps, expected, label, rtol, atol):
    dx, dgamma = _bwd(b, dout, x, gamma, eps)
    x_hat = _rms_variant(x, None, eps)
    lead = tuple(range(x.ndim - 1))
    check_against(
        dgamma,
        expected[1],
        f"dgamma {label}",
        [(DG_X, lambda: (dout * x).sum(lead)), (DG_MEAN, lambda: (dout * x_hat).mean(lead))],
        rtol=rtol,
        atol=atol,
    )

    def v(**kw):
        return lambda: normalize_backward(dout, x, -1, gamma, eps, center=False, **kw)

    hyps = [
        (DX_CONST, v(var_term=False)),
        (DX_GAMMA, v(use_gamma=False)),
        (DX_CENTER, lambda: _rms_dx_centered(dout, x, gamma, eps)),
    ]
    check_against(dx, expected[0], f"dx {label}", hyps, rtol=rtol, atol=atol)


def _rms_dx_centered(dout, x, gamma, eps):
    """RMSNorm's dx with LayerNorm's mean term added (a mixed-up derivation)."""
    rstd = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    x_hat = x * rstd
    g = dout * gamma
    return rstd * (g - g.mean(-1, keepdims=True) - x_hat * (g * x_hat).mean(-1, keepdims=True))


def check_backward_shapes(b: Callable) -> None:
    """dx like x; dgamma of shape (D,) for 2-D and 3-D input."""
    assert_no_shortcut(b)
    for shape in ((4, 6), (2, 3, 5)):
        x, gamma = _probe(shape, 10)
        _bwd(b, np.random.default_rng(11).standard_normal(shape), x, gamma)


def check_backward_values(b: Callable) -> None:
    """2-D and 3-D input against central finite differences with a random upstream gradient."""
    assert_no_shortcut(b)
    _check_bwd(b, (4, 5), 12, numeric=True, rtol=1e-5, atol=1e-7)
    _check_bwd(b, (2, 3, 4), 13, numeric=True, rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------- the torch module


def _make(cls: Any, *args: Any, **kwargs: Any) -> Any:
    return call(cls, *args, name=f"{getattr(cls, '__name__', 'RMSNorm')}(...)", **kwargs)


def check_module_structure(cls: Any) -> None:
    """A torch.nn.Module with a ``weight`` Parameter of shape (d,), initialized to ones."""
    import torch

    assert_no_shortcut(cls, TORCH_OK)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise GradingError("RMSNorm must be a class that subclasses torch.nn.Module")
    m = _make(cls, 6)
    w = getattr(m, "weight", None)
    if w is None:
        raise GradingError("RMSNorm(6) has no attribute `weight`: " + PARAM)
    if not isinstance(w, torch.nn.Parameter):
        raise GradingError(f"RMSNorm(6).weight is a {type(w).__name__}: {PARAM}")
    if tuple(w.shape) != (6,):
        raise GradingError(f"RMSNorm(6).weight has shape {tuple(w.shape)}, expected (6,)")
    if not torch.allclose(w.detach(), torch.ones(6)):
        raise GradingError(INIT)
    names = [n for n, _ in m.named_parameters()]
    if names != ["weight"]:
        raise GradingError(f"RMSNorm should have exactly one parameter, `weight`; it has {names}")


def _module_case(cls: Any, shape: tuple, seed: int, eps: float | None) -> None:
    """weight and x (+0.5) drawn from ``torch.Generator().manual_seed(seed)``."""
    import torch
    import torch.nn.functional as F

    d = shape[-1]
    m = _make(cls, d) if eps is None else _make(cls, d, eps=eps)
    eps_used = 1e-5 if eps is None else eps
    if not isinstance(getattr(m, "weight", None), torch.nn.Parameter):
        raise GradingError(f"RMSNorm({d}).weight is not a Parameter: {PARAM}")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.weight.copy_(torch.rand(d, generator=g) + 0.5)
    x = (torch.randn(shape, generator=g) + 0.5).requires_grad_(True)
    out = call(m, x, name="RMSNorm.forward")
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
        raise GradingError(f"RMSNorm.forward must return a tensor of shape {shape}")
    w_ref = m.weight.detach().clone().requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = F.rms_norm(x_ref, (d,), w_ref, eps_used)
    label = f"RMSNorm({d}{'' if eps is None else f', eps={eps}'}) output for shape {shape}"
    hyps = _hypotheses(x.detach().double().numpy(), m.weight.detach().double().numpy(), eps_used)
    check_against(
        out.detach().double().numpy(),
        expected.detach().double().numpy(),
        label,
        hyps,
        rtol=1e-4,
        atol=1e-5,
        diag_tol=(2e-5, 1e-6),
    )
    # Gradients flow through autograd to x and to the weight.
    up = torch.randn(shape, generator=g)
    if not out.requires_grad:
        raise GradingError("RMSNorm's output does not require grad: do not detach or use numpy")
    gx, gw = torch.autograd.grad((out * up).sum(), (x, m.weight), allow_unused=True)
    ex, ew = torch.autograd.grad((expected * up).sum(), (x_ref, w_ref))
    if gw is None:
        raise GradingError("the weight gets no gradient: multiply the normalized x by self.weight")
    check_against(
        gx.double().numpy(),
        ex.double().numpy(),
        "the gradient with respect to x",
        rtol=1e-4,
        atol=1e-5,
    )
    check_against(
        gw.double().numpy(),
        ew.double().numpy(),
        "the gradient with respect to weight",
        rtol=1e-4,
        atol=1e-5,
    )


def check_module_forward(cls: Any) -> None:
    """Output and gradients match F.rms_norm, default eps and eps = 0.3, 2-D and 3-D input."""
    assert_no_shortcut(cls, TORCH_OK)
    _module_case(cls, (4, 8), 20, None)
    _module_case(cls, (2, 3, 8), 21, 0.3)


def check_module_on(cls: Any, shape: tuple, seed: int, eps: float | None = None) -> None:
    """``cls(D)`` (or ``cls(D, eps=eps)``) on an input of ``shape`` (..., D): output and
    gradients against ``F.rms_norm``; the weight and the input are drawn from a torch
    generator seeded with ``seed``."""
    assert_no_shortcut(cls, TORCH_OK)
    _module_case(cls, tuple(shape), seed, eps)
