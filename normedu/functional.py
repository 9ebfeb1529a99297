"""NumPy reference implementations of every norm the course teaches.

These are the functions students re-derive in the exercises, written for clarity first and
checked against PyTorch in ``tests/test_functional.py``. Each forward has a hand-written
backward; no autograd is involved.

Conventions (shared by every function here, and identical to PyTorch's):

* ``eps`` sits **inside** the square root: ``x_hat = (x - mu) / sqrt(var + eps)``.
* The variance used to normalize is the **biased** one (divide by the number of elements
  reduced over). BatchNorm's running variance stores the **unbiased** one (divide by m - 1).
* Running statistics use momentum on the **new** value:
  ``running = (1 - momentum) * running + momentum * batch_stat`` (momentum 0.1). The
  "0.9 on the old value" convention of some texts is the same update written the other way.
* The variance is computed in two passes (subtract the mean, then square), which stays
  accurate for rows with a large offset where ``E[x^2] - E[x]^2`` cancels catastrophically.
* Results come back in the input's dtype, gradients included (``dx``, ``dgamma``,
  ``dbeta``); returned running statistics in the dtype of the running buffers. float16
  inputs are computed in float32, float32 inputs in float64 (a reference should be exact for
  the inputs it is given), float64 in float64. Integer inputs are promoted to float64.
* A constant row normalizes to exact zeros (never NaN), also with ``eps=0``.

Shapes:

* BatchNorm: ``x`` is ``(N, C)`` or ``(N, C, *spatial)`` such as ``(N, C, H, W)``;
  statistics are per channel ``C``, reduced over ``N`` and every spatial axis.
* LayerNorm and RMSNorm: ``x`` is ``(..., D)``; statistics are per row, reduced over the
  last axis ``D`` only. ``gamma``/``beta`` have shape ``(D,)`` and their gradients are summed
  over every leading axis.
* GroupNorm and InstanceNorm: ``x`` is ``(N, C)`` or ``(N, C, *spatial)``; the ``C`` channels
  are split into ``G`` groups of ``C // G`` **adjacent** channels (channels ``0 .. C/G - 1`` form
  group 0, as in ``x.reshape(N, G, -1)``), and statistics are per sample and group, reduced
  over the group's channels and every spatial axis. ``gamma``/``beta`` are per channel
  ``(C,)``. InstanceNorm is GroupNorm with ``G = C``; LayerNorm over ``(C, *spatial)`` is
  GroupNorm with ``G = 1``. Its arguments come in the exercise's order, ``group_norm(x,
  gamma, beta, G, eps)`` (``torch.nn.functional.group_norm`` and :func:`normedu.nn.group_norm`
  take ``(x, G, weight, bias, eps)``).

The four norms differ only in the axes they reduce over: the statistics and the input
gradient are computed once, for any layout, in :mod:`normedu._functional_core`.

Two later layers follow the same conventions, in :mod:`normedu._functional_since2020`:
``dyt(x, alpha, gamma, beta)`` / ``dyt_backward(dout, x, alpha, gamma)`` (Dynamic Tanh: no
statistics, one scalar ``alpha``; the backward returns ``(dx, dalpha, dgamma, dbeta)``), and
``qk_norm_attention(q, k, v, g_q, g_k, eps=1e-6, causal=False)`` (attention over RMS-normalized
queries and keys, a max-subtracted softmax).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from . import _functional_core as core
from ._functional_core import Array
from ._functional_since2020 import dyt, dyt_backward, qk_norm_attention
from .conventions import DEFAULT_EPS, DEFAULT_MOMENTUM

__all__ = [
    "batch_norm",
    "batch_norm_backward",
    "group_norm",
    "group_norm_backward",
    "instance_norm",
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "rms_norm_backward",
    "layer_norm_jacobian",
    "dyt",
    "dyt_backward",
    "qk_norm_attention",
]


# --------------------------------------------------------------------------- LayerNorm


def layer_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    eps: float = DEFAULT_EPS,
) -> Array:
    """Layer normalization over the last axis (Ba et al., 2016).

    Inputs:
    - x: array of shape (..., D); each row of D features is normalized on its own.
    - gamma: scale of shape (D,), or None for ones.
    - beta: shift of shape (D,), or None for zeros.
    - eps: added to the biased variance inside the square root.

    Returns:
    - out: array of shape (..., D) and the dtype of x:
      ``gamma * (x - mean) / sqrt(var + eps) + beta`` with mean and biased variance taken
      over the last axis. Matches ``torch.nn.functional.layer_norm(x, (D,), gamma, beta, eps)``.
    """
    core.check_eps(eps)
    xf, out_dtype = core.as_float(x, "x")
    lay = core.last_axis(xf)
    g = lay.param(gamma, "gamma", xf.shape)
    b = lay.param(beta, "beta", xf.shape)
    out = core.affine(core.stats(xf, lay, eps).x_hat, g, b)
    return out.astype(out_dtype, copy=False)


def layer_norm_backward(
    dout: ArrayLike,
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    eps: float = DEFAULT_EPS,
) -> tuple[Array, Array, Array]:
    """Backward pass of :func:`layer_norm`, derived by hand.

    Inputs:
    - dout: upstream gradient dL/d(out), shape (..., D).
    - x: the forward input, shape (..., D).
    - gamma: the forward scale (D,), or None for ones.
    - eps: the forward eps.

    Returns a tuple of:
    - dx: shape (..., D).
      ``dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))`` with ``g = dout * gamma``,
      means over the last axis. The two subtracted terms are the centering and the
      decorrelation parts of the Jacobian (see :func:`layer_norm_jacobian`).
    - dgamma: shape (D,), ``sum(dout * x_hat)`` over every leading axis.
    - dbeta: shape (D,), ``sum(dout)`` over every leading axis.
    """
    core.check_eps(eps)
    xf, out_dtype = core.as_float(x, "x")
    lay = core.last_axis(xf)
    return core.in_dtype(out_dtype, *core.backward(dout, xf, lay, gamma, eps))


def layer_norm_jacobian(x: ArrayLike, eps: float = DEFAULT_EPS) -> Array:
    """Closed-form Jacobian of LayerNorm without affine, for one vector or a batch.

    ``J = (1 / sigma) * (I - 1 1^T / D - x_hat x_hat^T / D)`` with ``sigma = sqrt(var + eps)``
    and ``x_hat = (x - mean) / sigma``. This is exact (eps included), not an approximation:
    ``J[i, j] = d out_i / d x_j``.

    Inputs:
    - x: shape (D,) or (..., D).
    - eps: as in :func:`layer_norm`.

    Returns:
    - J: shape (D, D) or (..., D, D), in x's dtype. J is symmetric; its null space holds
      the all-ones vector (centering) and, when eps = 0, x_hat itself (scale invariance).
    """
    core.check_eps(eps)
    xf, out_dtype = core.as_float(x, "x")
    lay = core.last_axis(xf)
    d = lay.size
    st = core.stats(xf, lay, eps)
    eye = np.eye(d, dtype=xf.dtype)
    outer = st.x_hat[..., :, None] * st.x_hat[..., None, :]
    jac = st.rstd[..., None] * (eye - 1.0 / d - outer / d)
    return jac.astype(out_dtype, copy=False)


# --------------------------------------------------------------------------- RMSNorm


def rms_norm(x: ArrayLike, gamma: ArrayLike | None = None, eps: float = DEFAULT_EPS) -> Array:
    """Root-mean-square normalization over the last axis (Zhang & Sennrich, 2019).

    Inputs:
    - x: shape (..., D).
    - gamma: scale of shape (D,), or None for ones. There is no shift (no beta).
    - eps: added to the mean of squares inside the square root. Note that
      ``torch.nn.RMSNorm(eps=None)`` uses the machine epsilon of the type it computes in
      (``torch.finfo(torch.float32).eps`` = 1.19e-7 for float32, float16 and bfloat16 inputs),
      not 1e-5; pass eps explicitly when you compare.

    Returns:
    - out: shape (..., D): ``gamma * x / sqrt(mean(x**2) + eps)``. Not zero-mean: only the
      scale is normalized. Matches ``torch.nn.functional.rms_norm(x, (D,), gamma, eps)``.
    """
    core.check_eps(eps)
    xf, out_dtype = core.as_float(x, "x")
    lay = core.last_axis(xf)
    g = lay.param(gamma, "gamma", xf.shape)
    out = core.affine(core.stats(xf, lay, eps, center=False).x_hat, g, None)
    return out.astype(out_dtype, copy=False)


def rms_norm_backward(
    dout: ArrayLike, x: ArrayLike, gamma: ArrayLike | None = None, eps: float = DEFAULT_EPS
) -> tuple[Array, Array]:
    """Backward pass of :func:`rms_norm`.

    Inputs: dout and x of shape (..., D), gamma (D,) or None, eps.

    Returns a tuple of:
    - dx: shape (..., D), ``rstd * (g - x_hat * mean(g * x_hat))`` with ``g = dout * gamma``
      and ``x_hat = x * rstd``. Compared with LayerNorm only the centering term is missing.
    - dgamma: shape (D,), ``sum(dout * x_hat)`` over every leading axis.
    """
    core.check_eps(eps)
    xf, out_dtype = core.as_float(x, "x")
    lay = core.last_axis(xf)
    dx, dgamma, _ = core.backward(dout, xf, lay, gamma, eps, center=False)
    return core.in_dtype(out_dtype, dx, dgamma)


# --------------------------------------------------------------------------- BatchNorm


def batch_norm(
    x: ArrayLike,
    *,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    running_mean: ArrayLike | None = None,
    running_var: ArrayLike | None = None,
    training: bool = True,
    momentum: float = DEFAULT_MOMENTUM,
    eps: float = DEFAULT_EPS,
) -> tuple[Array, Array | None, Array | None]:
    """Batch normalization (Ioffe & Szegedy, 2015) with PyTorch's conventions.

    Everything after ``x`` is keyword-only, and the four (C,) arrays come in the order
    ``gamma, beta, running_mean, running_var`` (the order of :func:`normedu.nn.batch_norm`'s
    ``weight, bias, running_mean, running_var``): four same-shaped arrays passed by position
    could be swapped silently. Example: ``batch_norm(x, gamma=g, beta=b, running_mean=rm,
    running_var=rv, training=True)``.

    Inputs:
    - x: shape (N, C) for an MLP or (N, C, *spatial), e.g. (N, C, H, W), for a CNN.
    - gamma, beta: per-channel scale and shift of shape (C,), or None (ones / zeros).
    - running_mean, running_var: per-channel running estimates of shape (C,), or None
      (then nothing is tracked; eval mode needs them).
    - training: True normalizes with the batch statistics (biased variance) and updates
      the running estimates; False normalizes with the running estimates and leaves them
      unchanged.
    - momentum: weight of the **new** batch statistic in the running average (PyTorch's
      0.1; CS231n's ``momentum=0.9`` weights the old value and is the same update).
    - eps: added to the variance inside the square root.

    Returns a tuple of:
    - out: shape of x, dtype of x.
    - new_running_mean: (C,) ``(1 - momentum) * running_mean + momentum * batch_mean``
      (or an unchanged copy in eval mode; None when not tracked), in running_mean's dtype.
    - new_running_var: (C,) same update with the **unbiased** batch variance
      (``var * m / (m - 1)``, m = elements per channel), as ``nn.BatchNorm1d`` stores it;
      in running_var's dtype.

    The inputs are never modified in place.
    """
    core.check_eps(eps)
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1] (weight of the new value), got {momentum}")
    xf, out_dtype = core.as_float(x, "x")
    lay = core.channels(xf)
    c = lay.size
    g = lay.param(gamma, "gamma", xf.shape)
    b = lay.param(beta, "beta", xf.shape)
    rm = lay.param(running_mean, "running_mean", xf.shape)
    rv = lay.param(running_var, "running_var", xf.shape)
    if (rm is None) != (rv is None):
        raise ValueError("pass both running_mean and running_var, or neither")
    if training:
        m = xf.size // c
        if m < 2:
            raise ValueError(
                f"batch_norm in training mode needs more than 1 value per channel, got x of "
                f"shape {xf.shape}; use eval mode (training=False) for a single sample"
            )
        st = core.stats(xf, lay, eps)
        x_hat = st.x_hat
        if rm is not None:
            rm = (1 - momentum) * rm + momentum * st.mean
            rv = (1 - momentum) * rv + momentum * st.var * (m / (m - 1))
    else:
        if rm is None:
            raise ValueError("eval mode (training=False) needs running_mean and running_var")
        x_hat = (xf - rm) * core.rstd_of(rv, eps)
    out = core.affine(x_hat, g, b).astype(out_dtype, copy=False)
    if rm is None:
        return out, None, None
    # The running statistics come back (C,), in the dtype of the buffers they update.
    return (
        out,
        rm.reshape(c).astype(core.as_float(running_mean, "running_mean")[1]),
        rv.reshape(c).astype(core.as_float(running_var, "running_var")[1]),
    )


def batch_norm_backward(
    dout: ArrayLike, x: ArrayLike, gamma: ArrayLike | None = None, eps: float = DEFAULT_EPS
) -> tuple[Array, Array, Array]:
    """Backward pass of :func:`batch_norm` in training mode (batch statistics).

    Inputs: dout and x of shape (N, C) or (N, C, *spatial); gamma (C,) or None; eps.

    Returns a tuple of:
    - dx: shape of x. The same formula as LayerNorm's backward with the mean taken per
      channel over N and the spatial axes: ``rstd * (g - mean(g) - x_hat * mean(g*x_hat))``.
    - dgamma: (C,) ``sum(dout * x_hat)`` over N and spatial axes.
    - dbeta: (C,) ``sum(dout)`` over N and spatial axes.
    """
    core.check_eps(eps)
    xf, out_dtype = core.as_float(x, "x")
    lay = core.channels(xf)
    return core.in_dtype(out_dtype, *core.backward(dout, xf, lay, gamma, eps))


# --------------------------------------------------------------------------- GroupNorm


def group_norm(
    x: ArrayLike,
    gamma: ArrayLike | None,
    beta: ArrayLike | None,
    G: int,
    eps: float = DEFAULT_EPS,
) -> Array:
    """Group normalization (Wu & He, 2018), in the exercise's argument order.

    Inputs:
    - x: shape (N, C) or (N, C, *spatial), e.g. (N, C, H, W).
    - gamma, beta: per-channel scale and shift of shape (C,), or None (ones / zeros).
    - G: number of groups; C must be divisible by G. Group g holds the adjacent channels
      ``g*C/G .. (g+1)*C/G - 1``. ``G = 1`` is LayerNorm over (C, *spatial); ``G = C`` is
      InstanceNorm.
    - eps: added to the biased variance inside the square root.

    Returns:
    - out: shape and dtype of x. Each sample's group is normalized with its own mean and
      biased variance (over C/G channels and every spatial position), then
      ``out = gamma[c] * x_hat + beta[c]``. Nothing depends on the other samples of the
      batch, and there are no running statistics: training and eval compute the same thing.
      Matches ``torch.nn.functional.group_norm(x, G, gamma, beta, eps)`` (torch puts G
      second).
    """
    core.check_eps(eps)
    xf, out_dtype = core.as_float(x, "x")
    lay = core.groups(xf, G)
    g = lay.param(gamma, "gamma", xf.shape)
    b = lay.param(beta, "beta", xf.shape)
    out = core.affine(core.stats(xf, lay, eps).x_hat.reshape(xf.shape), g, b)
    return out.astype(out_dtype, copy=False)


def group_norm_backward(
    dout: ArrayLike,
    x: ArrayLike,
    gamma: ArrayLike | None,
    G: int,
    eps: float = DEFAULT_EPS,
) -> tuple[Array, Array, Array]:
    """Backward pass of :func:`group_norm`, derived by hand, in the exercise's argument order.

    Inputs:
    - dout: upstream gradient dL/d(out), shape of x.
    - x: the forward input, (N, C) or (N, C, *spatial).
    - gamma: the forward scale (C,), or None for ones.
    - G: the forward number of groups.
    - eps: the forward eps.

    Returns a tuple, every array in x's dtype, of:
    - dx: shape of x. Per (sample, group) row it is LayerNorm's backward:
      ``rstd * (g - mean(g) - x_hat * mean(g * x_hat))`` with ``g = dout * gamma[c]`` and the
      means over the group's C/G channels and spatial positions. gamma is applied per channel
      *before* the per-group reduction, which is the only difference from LayerNorm.
    - dgamma: (C,) ``sum(dout * x_hat)`` over N and every spatial axis.
    - dbeta: (C,) ``sum(dout)`` over N and every spatial axis.
    """
    core.check_eps(eps)
    xf, out_dtype = core.as_float(x, "x")
    lay = core.groups(xf, G)
    return core.in_dtype(out_dtype, *core.backward(dout, xf, lay, gamma, eps))


def instance_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    eps: float = DEFAULT_EPS,
) -> Array:
    """Instance normalization (Ulyanov et al., 2016): :func:`group_norm` with one channel per
    group. x (N, C, *spatial) -> same shape; matches ``torch.nn.functional.instance_norm(x,
    weight=gamma, bias=beta, eps=eps)`` (no running statistics)."""
    return group_norm(x, gamma, beta, np.shape(x)[1] if np.ndim(x) >= 2 else 0, eps)
