# ruff: noqa: E501  (a table's causes are one line each: a message reads best beside its variant)
"""Checks for the ``dyt`` assignment (Dynamic Tanh, numpy; x of shape (..., D)).

Student functions:
- ``dyt_forward(x, alpha, gamma, beta) -> out``: ``gamma * tanh(alpha * x) + beta``, alpha one
  scalar (a Python float, a NumPy scalar or a 0-d array), gamma/beta (D,); out in x's dtype.
  An alpha that is not a scalar must raise a ``ValueError`` (any message), graded in its own
  visible cell (:func:`check_forward_errors`).
- ``dyt_backward(dout, x, alpha, gamma) -> (dx, dalpha, dgamma, dbeta)``: dalpha one 0-d value
  summed over every element, dgamma/dbeta (D,) summed over every leading axis; all in x's dtype.

The table :data:`DYT` holds what is DyT's own (references :func:`normedu.functional.dyt` and
:func:`normedu.functional.dyt_backward`, the causes and their messages); the checks are
:class:`~normedu.grading.normcheck.NormTable`'s. DyT has no eps and no statistics: no eps
check, no dx layout; its gradients are named ``(dx, dalpha, dgamma, dbeta)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.grading.causes import param_grad_causes
from normedu.grading.normcheck import NormTable, Probe
from normedu.grading.validation import expect_value_error

__all__ = [
    "check_forward_shapes",
    "check_forward_values",
    "check_forward_errors",
    "check_forward_on",
    "check_backward_shapes",
    "check_backward_values",
    "check_backward_on",
]

ONE_NUMBER = "α is ONE scalar shared by every element, so dα is one number: sum dout·γ·x·(1 − tanh²(αx)) over EVERY axis (np.sum with no axis), not per feature or per row"
PER_FEATURE = "dγ and dβ have one value per feature, so sum over EVERY leading axis (for (B, T, D) input, axes 0 and 1), e.g. .reshape(-1, D).sum(axis=0), never over the last axis"
ONE_MINUS_TANH = "the local gradient of t = tanh(u) is 1 − tanh²(u) = 1 − t², not 1 − tanh(u)"
KEEP_DTYPE = "return every result in x's dtype, e.g. .astype(x.dtype): a NumPy float64 alpha (or a cast to float64) promotes float32 x to float64"
OVERFLOW = "tanh computed from exp overflows for large |αx| (exp(u) is inf beyond u ≈ 710, and inf/inf is NaN): use np.tanh, or exp of a non-positive argument only, e.g. tanh(u) = sign(u)·(1 − e^(−2|u|)) / (1 + e^(−2|u|))"
SECH_U = "the derivative of tanh is taken at u = α·x: 1 − tanh²(α·x), not 1/cosh²(x) (sech² of x)"
HARD_TANH_GRAD = "the backward is a hard tanh's (clip(α·x, −1, 1), whose gradient is 1 inside [−1, 1] and 0 outside): DyT's tanh is smooth, t = tanh(α·x) and its local gradient 1 − t² everywhere"
SCALAR_ALPHA = "DyT learns ONE alpha shared by every feature: check np.ndim(alpha) == 0 and raise a ValueError otherwise (a vector alpha would broadcast silently)"


def _t(p: Probe) -> np.ndarray:
    return np.tanh(p.alpha * p.x)


def _lead(p: Probe) -> tuple[int, ...]:
    return tuple(range(p.x.ndim - 1))


def _du(
    p: Probe, gamma: bool = True, square: str = "t2", dout: bool = True, at_x: bool = False
) -> np.ndarray:
    """dL/du with u = αx: dout·γ·(1 − t²), with one piece changed. ``square``: "t2" the
    right 1 − t², "t" 1 − t, "(1-t)2" (1 − t)², "hard" a hard tanh's 1{|u| < 1};
    ``at_x``: t = tanh(x); ``dout=False``: no dout."""
    t = np.tanh(p.x) if at_x else _t(p)
    if square == "hard":
        local = (np.abs(p.alpha * p.x) < 1.0).astype(np.float64)
    else:
        local = {"t2": 1.0 - t * t, "t": 1.0 - t, "(1-t)2": (1.0 - t) ** 2}[square]
    return (p.dout if dout else 1.0) * (p.gamma if gamma else 1.0) * local


DYT = NormTable(
    inputs=("x", "alpha", "gamma", "beta"),
    reference=ref.dyt,
    causes=[
        ("α multiplies x inside the tanh: out = γ·tanh(α·x) + β, not γ·α·tanh(x)", lambda p: p.gamma * p.alpha * np.tanh(p.x) + p.beta),
        ("α multiplies x: tanh(α·x), not tanh(x/α)", lambda p: p.gamma * np.tanh(p.x / p.alpha) + p.beta),
        ("γ scales the tanh's output: out = γ·tanh(α·x) + β, not tanh(α·γ·x) + β", lambda p: np.tanh(p.alpha * p.gamma * p.x) + p.beta),
        ("β is added after the tanh: out = γ·tanh(α·x) + β, not γ·tanh(α·x + β)", lambda p: p.gamma * np.tanh(p.alpha * p.x + p.beta)),
        ("the shift β is missing: out = γ·tanh(α·x) + β", lambda p: p.gamma * _t(p)),
        ("the scale γ is missing: out = γ·tanh(α·x) + β", lambda p: _t(p) + p.beta),
        ("γ and β are swapped: γ scales, β shifts (out = γ·tanh(α·x) + β)", lambda p: p.beta * _t(p) + p.gamma),
        ("DyT uses the smooth tanh, not a hard tanh: np.tanh(α·x), not np.clip(α·x, -1, 1)", lambda p: p.gamma * np.clip(p.alpha * p.x, -1.0, 1.0) + p.beta),
        ("α is used with its sign: tanh(α·x) with α as given (it may be negative), not tanh(|α|·x)", lambda p: p.gamma * np.tanh(abs(p.alpha) * p.x) + p.beta),
    ],
    backward_inputs=("dout", "x", "alpha", "gamma"),
    backward_reference=ref.dyt_backward,
    grads=(("dx", "x"), ("dalpha", "alpha"), ("dgamma", "gamma"), ("dbeta", "beta")),
    grad_checks=[
        (("dgamma", "dbeta"), param_grad_causes(
            _t, _lead,
            uses_x="dγ = Σ dout·tanh(α·x) (the tanh's output t), not dout·x",
            means="dγ and dβ are sums over every leading axis, not means") + [
            ("dβ = Σ dout over every leading axis (β is added as it is, ∂out/∂β = 1), not Σ dout·γ",
             lambda p: ((p.dout * _t(p)).sum(_lead(p)), (p.dout * p.gamma).sum(_lead(p)))),
            ("dβ = Σ dout over every leading axis (∂out/∂β = 1), not Σ dout·tanh(α·x): that is dγ",
             lambda p: ((p.dout * _t(p)).sum(_lead(p)), (p.dout * _t(p)).sum(_lead(p)))),
            ("dγ = Σ dout·tanh(α·x): the tanh of α·x, as in the forward, not tanh(x)",
             lambda p: ((p.dout * np.tanh(p.x)).sum(_lead(p)), p.dout.sum(_lead(p)))),
            (HARD_TANH_GRAD,
             lambda p: ((p.dout * np.clip(p.alpha * p.x, -1.0, 1.0)).sum(_lead(p)), p.dout.sum(_lead(p))))]),
        (("dalpha",), [
            (ONE_MINUS_TANH, lambda p: np.sum(_du(p, square="t") * p.x)),
            ("the local gradient of tanh is 1 − t² (one minus the SQUARE of t = tanh(α·x)), not (1 − t)²", lambda p: np.sum(_du(p, square="(1-t)2") * p.x)),
            (SECH_U, lambda p: np.sum(_du(p, at_x=True) * p.x)),
            (HARD_TANH_GRAD, lambda p: np.sum(_du(p, square="hard") * p.x)),
            ("dα is missing γ: the gradient reaches t as dout·γ (out = γ·t + β), so dα = Σ dout·γ·x·(1 − t²)", lambda p: np.sum(_du(p, gamma=False) * p.x)),
            ("dα is missing the factor x: u = α·x, so ∂u/∂α = x and dα = Σ dout·γ·(1 − t²)·x", lambda p: np.sum(_du(p))),
            ("dα is multiplied by α (Σ dx·x?): dx already carries ∂u/∂x = α; dα takes ∂u/∂α = x alone, dα = Σ dout·γ·(1 − t²)·x", lambda p: np.sum(_du(p) * p.x) * p.alpha),
            ("dα is not Σ dx: dx carries ∂u/∂x = α, dα needs ∂u/∂α = x, so dα = Σ dout·γ·(1 − t²)·x", lambda p: np.sum(_du(p) * p.alpha)),
            ("dα is missing the upstream gradient dout: dα = Σ dout·γ·(1 − t²)·x", lambda p: np.sum(_du(p, dout=False) * p.x)),
            ("dα is a SUM over every element, not a mean", lambda p: np.mean(_du(p) * p.x)),
        ]),
        (("dx",), [
            (ONE_MINUS_TANH, lambda p: p.alpha * _du(p, square="t")),
            ("the local gradient of tanh is 1 − t² (one minus the SQUARE of t = tanh(α·x)), not (1 − t)²", lambda p: p.alpha * _du(p, square="(1-t)2")),
            (SECH_U, lambda p: p.alpha * _du(p, at_x=True)),
            (HARD_TANH_GRAD, lambda p: p.alpha * _du(p, square="hard")),
            ("dx is missing the upstream gradient dout: dx = α·dout·γ·(1 − t²)", lambda p: p.alpha * _du(p, dout=False)),
            ("dx is missing γ: the gradient reaches t as dout·γ, so dx = α·dout·γ·(1 − t²)", lambda p: p.alpha * _du(p, gamma=False)),
            ("dx is missing the chain factor ∂u/∂x = α: dx = α·dout·γ·(1 − t²)", _du),
            ("dx is multiplied by x: that is dα's factor ∂u/∂α; dx takes ∂u/∂x = α, dx = α·dout·γ·(1 − t²)", lambda p: _du(p) * p.x),
        ]),
    ],
    affine=("gamma", "beta"),
    grad_shape_hint={"dalpha": ONE_NUMBER, "dgamma": PER_FEATURE, "dbeta": PER_FEATURE},
    keep_dtype=KEEP_DTYPE,
    nonfinite=OVERFLOW,
)  # fmt: skip


def _probe(shape: tuple, seed: int, alpha=0.8, scale: float = 1.5, dtype=np.float64) -> Probe:
    """x with |α·x| up to about 5 (tanh neither linear nor flat); gamma in [0.5, 2); beta and
    dout normal."""
    rng = np.random.default_rng(seed)
    d = shape[-1]
    args = {
        "x": (scale * rng.standard_normal(shape)).astype(dtype),
        "alpha": alpha,
        "gamma": rng.uniform(0.5, 2.0, d).astype(dtype),
        "beta": rng.standard_normal(d).astype(dtype),
        "dout": np.random.default_rng(seed + 100).standard_normal(shape).astype(dtype),
    }
    return Probe(args)


def check_forward_on(f, x, alpha, gamma, beta, *, rtol=1e-6, atol=1e-8, what=None):
    """``f(x, alpha, gamma, beta)`` against the reference on inputs the caller chooses.

    x: (..., D); alpha a scalar; gamma, beta: (D,). A float64 probe that fails is diagnosed
    against the known mistakes; a float32 one only compared (pass a looser ``rtol``/``atol``).
    """
    probe = Probe({"x": x, "alpha": alpha, "gamma": gamma, "beta": beta})
    DYT.check_forward(f, probe, rtol=rtol, atol=atol, what=what)


def check_forward_shapes(f: Callable) -> None:
    """Output shape equals the input shape, for 2-D and 3-D float64/float32 input."""
    probes = [_probe(shape, 1) for shape in ((4, 6), (2, 3, 5))]
    probes += [_probe(shape, 1, dtype=np.float32) for shape in ((4, 6), (2, 3, 5))]
    DYT.check_shapes(f, probes)


def check_forward_values(f: Callable) -> None:
    """2-D and 3-D input against the reference with alpha a Python float, a NumPy scalar and a
    0-d array; a negative alpha; saturated units (|α·x| up to 50); float32 input with a
    NumPy float64 alpha (the output stays float32)."""
    DYT.check_forward(f, _probe((6, 5), 2))
    DYT.check_forward(f, _probe((2, 3, 4), 3, alpha=np.float64(1.7)))
    DYT.check_forward(f, _probe((5, 4), 4, alpha=np.array(-0.3)))
    DYT.check_forward(f, _probe((4, 6), 5, alpha=5.0, scale=10.0))
    p = _probe((8, 32), 6, alpha=np.float64(0.6), dtype=np.float32)
    DYT.check_forward(f, p, rtol=1e-5, atol=1e-6)


def check_forward_errors(f: Callable) -> None:
    """An alpha of shape (D,) and a gamma of shape (D + 1,) raise a ValueError (any message)."""
    p = _probe((3, 4), 7)
    x, g, b = p.x, p.gamma, p.beta
    expect_value_error(f, (x, np.full(4, 0.5), g, b), "for alpha of shape (4,)", SCALAR_ALPHA)
    expect_value_error(
        f, (x, 0.5, np.ones(5), b), "for gamma of shape (5,) and x of shape (3, 4)",
        "gamma and beta have one value per feature: shape (D,).",
    )  # fmt: skip


def check_backward_on(b, dout, x, alpha, gamma, *, rtol=1e-6, atol=1e-8) -> None:
    """``b(dout, x, alpha, gamma)`` against the reference backward on the caller's inputs.

    dout, x: (..., D); alpha a scalar; gamma: (D,). Raises with the likely mistake.
    """
    # beta is no input of the backward; it gives dbeta its shape (and its value no gradient)
    zeros = np.zeros_like(np.asarray(gamma))
    probe = Probe({"dout": dout, "x": x, "alpha": alpha, "gamma": gamma, "beta": zeros})
    DYT.check_backward(b, probe, rtol=rtol, atol=atol)


def check_backward_shapes(b: Callable) -> None:
    """dx like x; dalpha one 0-d value; dgamma and dbeta (D,) for 2-D and 3-D input; every
    result in x's dtype (float32 input with a NumPy float64 alpha)."""
    probes = [_probe((4, 6), 10), _probe((2, 3, 5), 11)]
    probes.append(_probe((2, 3, 5), 12, alpha=np.float64(0.8), dtype=np.float32))
    DYT.check_shapes(b, probes, backward=True)


def check_backward_values(b: Callable) -> None:
    """2-D and 3-D input against central finite differences with a random upstream gradient
    (dalpha included); then against the reference with a 0-d array alpha and saturated units."""
    for probe in (_probe((4, 5), 13), _probe((2, 3, 4), 14, alpha=-0.6)):
        DYT.check_backward(b, probe, numeric=True, rtol=1e-5, atol=1e-7)
    DYT.check_backward(b, _probe((6, 3), 15, alpha=np.array(2.0), scale=4.0))
