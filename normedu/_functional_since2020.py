"""NumPy references of two later layers: DyT and QK-norm attention (re-exported by
:mod:`normedu.functional`, whose conventions they follow: computed in float64 for float32
input, results, gradients included, in the input's dtype).

* DyT, Dynamic Tanh (Zhu et al., 2025): ``out = gamma * tanh(alpha * x) + beta``, an
  element-wise replacement for LayerNorm with no statistics at all. ``alpha`` is ONE
  learnable scalar; ``gamma``/``beta`` are per feature ``(D,)``.
* QK-norm attention (normalizing queries and keys before their dot product: Henry et al.,
  2020 with an L2 norm, Dehghani et al., 2023 with LayerNorm; here RMSNorm): queries and keys
  are RMS-normalized over the head dimension ``Dh`` (with learnable gains ``g_q``, ``g_k`` of
  shape ``(Dh,)``) before the scaled dot product; the softmax subtracts each row's max, so that a
  row stays finite for any finite scores (large gains make scores huge).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from . import _functional_core as core
from ._functional_core import Array
from .conventions import QK_NORM_EPS

__all__ = ["dyt", "dyt_backward", "qk_norm_attention"]


def _scalar(alpha: Any, name: str = "alpha") -> np.float64:
    """A Python float, a NumPy scalar or a 0-d array, as a float64 scalar."""
    arr, _ = core.as_float(alpha, name)
    if arr.ndim != 0:
        raise ValueError(
            f"{name} must be one scalar (a float or a 0-d array), got shape {arr.shape}: "
            "DyT learns a single alpha shared by every feature"
        )
    return np.float64(arr)


# --------------------------------------------------------------------------- DyT


def dyt(x: ArrayLike, alpha: float, gamma: ArrayLike, beta: ArrayLike) -> Array:
    """Dynamic Tanh: ``gamma * tanh(alpha * x) + beta`` (Zhu et al., 2025).

    Inputs:
    - x: shape (..., D).
    - alpha: one scalar (a float, a NumPy scalar or a 0-d array).
    - gamma, beta: shape (D,).

    Returns:
    - out: shape and dtype of x.
    """
    xf, out_dtype = core.as_float(x, "x")
    a = _scalar(alpha)
    lay = core.last_axis(xf)
    g = lay.param(gamma, "gamma", xf.shape)
    b = lay.param(beta, "beta", xf.shape)
    return (g * np.tanh(a * xf) + b).astype(out_dtype, copy=False)


def dyt_backward(
    dout: ArrayLike, x: ArrayLike, alpha: float, gamma: ArrayLike
) -> tuple[Array, Array, Array, Array]:
    """Backward pass of :func:`dyt`, staged along its graph u = αx, t = tanh u, out = γt + β.

    Inputs: dout and x of shape (..., D), alpha a scalar, gamma (D,).

    Returns a tuple of (all in the dtype of x):
    - dx: shape (..., D), ``alpha * du`` with ``du = dout * gamma * (1 - t**2)``.
    - dalpha: a 0-d value (NumPy scalar), ``sum(du * x)`` over EVERY element.
    - dgamma: shape (D,), ``sum(dout * t)`` over every leading axis.
    - dbeta: shape (D,), ``sum(dout)`` over every leading axis.
    """
    xf, out_dtype = core.as_float(x, "x")
    dy, _ = core.as_float(dout, "dout")
    core.same_shape(dy, xf)
    a = _scalar(alpha)
    lay = core.last_axis(xf)
    g = lay.param(gamma, "gamma", xf.shape)
    t = np.tanh(a * xf)
    du = dy * g * (1.0 - t * t)  # dL/du: through out = γt + β, then t = tanh u
    lead = lay.param_axes
    dalpha = np.float64(np.sum(du * xf))  # alpha is shared by every element: sum them all
    dx, dgamma, dbeta = core.in_dtype(out_dtype, a * du, (dy * t).sum(lead), dy.sum(lead))
    return dx, out_dtype.type(dalpha), dgamma, dbeta


# --------------------------------------------------------------------------- QK-norm attention


def qk_norm_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    g_q: ArrayLike,
    g_k: ArrayLike,
    eps: float = QK_NORM_EPS,
    causal: bool = False,
) -> Array:
    """Scaled dot-product attention with RMS-normalized queries and keys.

    Inputs:
    - q, k, v: one shape (B, H, T, Dh) (any leading axes: (..., T, Dh)) and one dtype.
    - g_q, g_k: gains of shape (Dh,).
    - eps: inside the square root of each RMS.
    - causal: True gives query i weight exactly 0 on every position j > i.

    Returns:
    - out: shape and dtype of q: ``softmax(q̂ k̂ᵀ / sqrt(Dh)) v`` with
      ``q̂ = q / sqrt(mean(q², last axis) + eps) * g_q`` (likewise k̂), the softmax over the
      keys (last axis) with each row's max subtracted.

    Raises ValueError when q, k and v differ in shape or dtype, when they have fewer than two
    axes, or when a gain is not of shape (Dh,).
    """
    core.check_eps(eps)
    arrays = {n: np.asarray(a) for n, a in (("q", q), ("k", k), ("v", v))}
    shapes = {n: a.shape for n, a in arrays.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"q, k and v must have one shape (B, H, T, Dh), got {shapes}")
    dtypes = {n: str(a.dtype) for n, a in arrays.items()}
    if len(set(dtypes.values())) != 1:
        raise ValueError(f"q, k and v must have one dtype, got {dtypes}")
    if arrays["q"].ndim < 2:
        raise ValueError(f"q has shape {shapes['q']}: it needs (..., T, Dh)")
    (qf, out_dtype), (kf, _), (vf, _) = (core.as_float(a, n) for n, a in arrays.items())
    lay = core.last_axis(qf, "q")
    dh = qf.shape[-1]

    def rms_normed(z: Array, gain: ArrayLike, name: str) -> Array:
        g = lay.param(gain, name, qf.shape)
        return z / np.sqrt(np.mean(z * z, axis=-1, keepdims=True) + eps) * g

    scores = rms_normed(qf, g_q, "g_q") @ np.swapaxes(rms_normed(kf, g_k, "g_k"), -1, -2)
    scores = scores / np.sqrt(dh)
    if causal:
        t = qf.shape[-2]
        scores = np.where(np.tri(t, dtype=bool), scores, -np.inf)
    # exp(s - max s) <= 1: no overflow whatever the gains; the max (j = i at worst) is finite.
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)
    return (w @ vf).astype(out_dtype, copy=False)
