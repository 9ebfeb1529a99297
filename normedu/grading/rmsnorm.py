# ruff: noqa: E501  (a table's causes are one line each: a message reads best beside its variant)
"""Checks for the ``rmsnorm`` assignment.

Student code:
- ``rmsnorm_forward(x, gamma, eps=1e-5) -> out`` (numpy, x of shape (..., D))
- ``rmsnorm_backward(dout, x, gamma, eps=1e-5) -> (dx, dgamma)`` (numpy)
- ``class RMSNorm(torch.nn.Module)`` with ``__init__(self, d, eps=1e-5)`` and a ``weight``
  parameter, matching ``torch.nn.functional.rms_norm(x, (d,), weight, eps)``.

The table :data:`RMSNORM` holds what is RMSNorm's own; the numpy checks are
:class:`~normedu.grading.normcheck.NormTable`'s and never import torch; only the
``check_module_*`` checks do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from normedu import functional as ref
from normedu.conventions import DEFAULT_EPS
from normedu.grading.causes import param_grad_causes, switched
from normedu.grading.compare import GradingError, assert_array
from normedu.grading.diagnose import check_against, norm_relations, normalize, normalize_backward
from normedu.grading.guard import TORCH_OK, assert_no_shortcut
from normedu.grading.normcheck import NormTable, Probe, backward_on
from normedu.grading.rmsnorm_module import PARAM, _module_facts, _module_run

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

INIT = "weight must start at ones, so that a fresh RMSNorm only normalizes"
BATCH_AXIS_BACKWARD = "your backward takes its statistic over axis 0 (across the batch); RMSNorm's rms, and so x̂ and the mean in dx, is per row, over the last axis"  # noqa: E501


def _rms(p: Probe, axes=-1, **switches) -> np.ndarray:
    """RMSNorm of the probe over ``axes`` (:func:`normalize` without the mean), with switches."""
    return normalize(p.x, axes, p.gamma, None, p.eps, center=False, **switches)


def _l2(p: Probe, eps: float) -> np.ndarray:
    """x divided by its L2 norm (the sum of squares instead of their mean)."""
    return p.x / np.sqrt((p.x * p.x).sum(-1, keepdims=True) + eps) * p.gamma


def _dx(p: Probe, **switches) -> np.ndarray:
    return normalize_backward(p.dout, p.x, -1, p.gamma, p.eps, center=False, **switches)


def _dx_centered(p: Probe) -> np.ndarray:
    """RMSNorm's dx with LayerNorm's mean term added (a mixed-up derivation)."""
    rstd = 1.0 / np.sqrt((p.x * p.x).mean(-1, keepdims=True) + p.eps)
    x_hat, g = p.x * rstd, p.dout * p.gamma
    return rstd * (g - g.mean(-1, keepdims=True) - x_hat * (g * x_hat).mean(-1, keepdims=True))


def _dx_split(p: Probe) -> np.ndarray:
    """g/rms − x̂·mean(g·x̂): the projection term without its 1/rms."""
    rms = np.sqrt((p.x * p.x).mean(-1, keepdims=True) + p.eps)
    x_hat, g = p.x / rms, p.dout * p.gamma
    return g / rms - x_hat * (g * x_hat).mean(-1, keepdims=True)


def _lead(p: Probe) -> tuple[int, ...]:
    return tuple(range(p.x.ndim - 1))


RMSNORM = NormTable(
    inputs=("x", "gamma"),
    reference=ref.rms_norm,
    causes=[
        ("RMSNorm does not subtract the mean: divide x itself by sqrt(mean(x²) + ε)", lambda p: normalize(p.x, -1, p.gamma, None, p.eps)),
        ("you took the statistic over axis 0 (across the batch); RMSNorm normalizes each sample over its features: mean(x², axis=-1, keepdims=True)", lambda p: _rms(p, 0)),
        ("for a 3-D input (B, T, D) RMSNorm normalizes each of the B·T vectors over its D features only: reduce over the last axis (axis=-1)",
         lambda p: _rms(p, 1), lambda p: _rms(p, _lead(p))),
        ("you divided by the L2 norm sqrt(Σx²); RMSNorm divides by the root MEAN square sqrt(mean(x²) + ε), which is √D times smaller",
         lambda p: _l2(p, p.eps), lambda p: _l2(p, 0.0)),
        *switched(_rms, eps_outside="ε must be inside the square root: x / sqrt(mean(x²) + ε), not x / (rms + ε)"),
        *switched(_rms, no_sqrt="you divided by the mean square; divide by its square root, sqrt(mean(x²) + ε)"),
        *switched(_rms, no_gamma="the scale γ is missing: out = γ · x / rms(x)"),
    ],
    backward_inputs=("dout", "x", "gamma"),
    backward_reference=ref.rms_norm_backward,
    grads=(("dx", "x"), ("dgamma", "gamma")),
    grad_checks=[
        (("dgamma",), param_grad_causes(
            lambda p: _rms(p.replace(gamma=None)), _lead, shift=False,
            uses_x="dγ = Σ dout·x̂ (the normalized input x̂ = x/rms), not dout·x",
            means="dγ is a sum over every leading axis, not a mean") + [
            (BATCH_AXIS_BACKWARD, lambda p: (p.dout * p.x / np.sqrt((p.x * p.x).mean(0, keepdims=True) + p.eps)).sum(_lead(p)))]),
        (("dx",), [
            *switched(_dx, no_var_term="dx treats the RMS as a constant (dx = γ·dout/rms); it depends on x: in your graph, dx also receives gradient through the mean of squares, one more term with a sum over the features of the row"),
            *switched(_dx, dx_no_gamma="dx must include γ: the upstream gradient reaches x̂ as g = γ·dout"),
            ("your dx subtracts mean(g): that term belongs to LayerNorm (it comes from the mean node); RMSNorm's graph has no mean node, so no such term", _dx_centered),
            ("the projection term of dx is not divided by the RMS: 1/rms multiplies both terms of dx (written with x instead of x̂, the projection term carries 1/rms³)",
             lambda p: _dx_split(p)),
            (BATCH_AXIS_BACKWARD, lambda p: normalize_backward(p.dout, p.x, 0, p.gamma, p.eps, center=False)),
        ]),
    ],
    relations=lambda p: norm_relations(p.x, -1, p.gamma, None, p.eps, center=False),
    eps_ignored="the eps argument is not used (or not inside the square root): divide by sqrt(mean(x²) + eps) with the eps you were given",
    affine=("gamma", None),
    grad_shape_hint="dγ was summed over the wrong axis: it has one value per feature, so sum over EVERY leading axis (for (B, T, D) input, axes 0 and 1), e.g. .reshape(-1, D).sum(axis=0), never over the last axis",
    dx_layout=lambda p: (lambda a: a, p.dout * p.gamma, -1, False),
)  # fmt: skip


def _probe(shape: tuple, seed: int, scale: float = 1.0, eps: float = DEFAULT_EPS) -> Probe:
    """x around 0.5 (never zero-mean); gamma in [0.5, 2); dout normal."""
    rng = np.random.default_rng(seed)
    args = {
        "x": scale * rng.standard_normal(shape) + 0.5,
        "gamma": rng.uniform(0.5, 2.0, shape[-1]),
    }
    args["dout"] = np.random.default_rng(seed + 100).standard_normal(shape)
    return Probe(args, {"eps": eps})


def check_forward_on(f, x, gamma, eps=DEFAULT_EPS, *, rtol=1e-6, atol=1e-8, what=None):
    """``f(x, gamma, eps=eps)`` against the reference on inputs the caller chooses.

    x: (..., D); gamma: (D,). A float64 probe that fails is diagnosed against the known
    mistakes; a float32 one only compared (pass a looser ``rtol``/``atol``).
    """
    RMSNORM.check_forward(
        f, Probe({"x": x, "gamma": gamma}, {"eps": eps}), rtol=rtol, atol=atol, what=what
    )


def check_forward_shapes(f: Callable) -> None:
    """Output shape equals the input shape, for 2-D and 3-D float64/float32 input."""
    probes = [_probe(shape, 1) for shape in ((4, 6), (2, 3, 5))]
    RMSNORM.check_shapes(f, probes + [p.replace(x=p.x.astype(np.float32)) for p in probes])


def check_forward_values(f: Callable) -> None:
    """2-D and 3-D input against the reference: the default eps and eps = 0.3, an all-zero
    row (its output is zeros), D = 1, values around 1e4, float32 input."""
    for probe in (_probe((6, 5), 2), _probe((6, 5), 3, scale=0.3, eps=0.3), _probe((2, 3, 4), 4)):
        RMSNORM.check_forward(f, probe)
    p = _probe((3, 5), 20)
    x = p.x.copy()
    x[1] = 0.0
    RMSNORM.check_forward(f, p.replace(x=x), what="out with an all-zero row (expected zeros)")
    RMSNORM.check_forward(f, _probe((4, 1), 21))
    RMSNORM.check_forward(f, _probe((3, 8), 22, scale=1e4))
    p = _probe((8, 32), 23)
    p32 = Probe({k: v.astype(np.float32) for k, v in p.args.items()}, p.options)
    RMSNORM.check_forward(f, p32, rtol=1e-4, atol=1e-5)


check_backward_on = backward_on(
    RMSNORM,
    """``b(dout, x, gamma, eps=eps)`` against the reference backward on the caller's inputs.

    dout, x: (..., D); gamma: (D,). Raises with the likely mistake.
    """,
)


def check_backward_shapes(b: Callable) -> None:
    """dx like x; dgamma of shape (D,) for 2-D and 3-D input."""
    RMSNORM.check_shapes(b, [_probe((4, 6), 10), _probe((2, 3, 5), 10)], backward=True)


def check_backward_values(b: Callable) -> None:
    """2-D and 3-D input against central finite differences with a random upstream
    gradient; then against the reference backward for D = 2 and eps = 0.3."""
    for probe in (_probe((4, 5), 12), _probe((2, 3, 4), 13)):
        RMSNORM.check_backward(b, probe, numeric=True, rtol=1e-5, atol=1e-7)
    RMSNORM.check_backward(b, _probe((6, 2), 24, eps=0.3), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- the torch module


def _reported(res: object, key: str, shape: tuple, what: str) -> np.ndarray | None:
    """``res[key]`` as the kernel reported it: None, or a float array of ``shape``."""
    value = res.get(key) if isinstance(res, dict) else None
    return None if value is None else assert_array(value, shape, what, finite=False)


def check_module_structure(cls: Any) -> None:
    """A torch.nn.Module with a ``weight`` Parameter of shape (d,), initialized to ones."""
    assert_no_shortcut(cls, TORCH_OK)
    facts = _module_facts(cls, 6)
    if not isinstance(facts, dict) or facts.get("module") is not True:
        raise GradingError("RMSNorm must be a class that subclasses torch.nn.Module")
    w = facts.get("weight")
    if not isinstance(w, dict):
        raise GradingError("RMSNorm(6) has no attribute `weight`: " + PARAM)
    if w.get("parameter") is not True:
        raise GradingError(f"RMSNorm(6).weight is a {w.get('type')}: {PARAM}")
    if w.get("shape") != [6]:
        raise GradingError(
            f"RMSNorm(6).weight has shape {tuple(w.get('shape') or ())}, expected (6,)"
        )
    values = _reported(w, "values", (6,), "RMSNorm(6).weight")
    if values is None or not np.allclose(values, 1.0):
        raise GradingError(INIT)
    names = facts.get("params")
    if names != ["weight"]:
        raise GradingError(f"RMSNorm should have exactly one parameter, `weight`; it has {names}")


def _module_case(cls: Any, shape: tuple, seed: int, eps: float | None) -> None:
    """weight and x (+0.5), then the upstream gradient, drawn from
    ``torch.Generator().manual_seed(seed)``."""
    import torch
    import torch.nn.functional as F

    d = shape[-1]
    eps_used = DEFAULT_EPS if eps is None else eps
    g = torch.Generator().manual_seed(seed)
    weight = torch.rand(d, generator=g) + 0.5
    x = torch.randn(shape, generator=g) + 0.5
    up = torch.randn(shape, generator=g)
    res = _module_run(cls, d, eps, x.numpy(), weight.numpy(), up.numpy())
    out = _reported(res, "out", shape, "RMSNorm.forward's output")
    if out is None:
        raise GradingError(f"RMSNorm.forward must return a tensor of shape {shape}")
    w_ref = weight.clone().requires_grad_(True)
    x_ref = x.clone().requires_grad_(True)
    expected = F.rms_norm(x_ref, (d,), w_ref, eps_used)
    label = f"RMSNorm({d}{'' if eps is None else f', eps={eps}'}) output for shape {shape}"
    arrays = {"x": x.double().numpy(), "gamma": weight.double().numpy()}
    hyps = RMSNORM.hypotheses(
        RMSNORM.causes, Probe(arrays, {"eps": eps_used}), RMSNORM.forward_value
    )
    check_against(
        out,
        expected.detach().double().numpy(),
        label,
        hyps,
        rtol=1e-4,
        atol=1e-5,
        diag_tol=(2e-5, 1e-6),
    )
    # Gradients flow through autograd to x and to the weight.
    gx = _reported(res, "gx", shape, "the gradient with respect to x")
    gw = _reported(res, "gw", (d,), "the gradient with respect to the weight")
    if gw is None:
        raise GradingError("the weight gets no gradient: multiply the normalized x by self.weight")
    if gx is None:
        raise GradingError("x gets no gradient: compute the output from x with torch operations")
    ex, ew = torch.autograd.grad((expected * up).sum(), (x_ref, w_ref))
    for got, want, name in ((gx, ex, "x"), (gw, ew, "weight")):
        what = f"the gradient with respect to {name}"
        check_against(got, want.double().numpy(), what, rtol=1e-4, atol=1e-5)


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
