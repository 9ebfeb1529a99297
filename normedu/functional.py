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
  GroupNorm with ``G = 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

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
    "rms_norm_jacobian",
]

Array = NDArray[np.floating[Any]]


# --------------------------------------------------------------------------- validation


def _as_float(x: ArrayLike, name: str) -> tuple[Array, np.dtype]:
    """Return ``(x as a compute-precision array, dtype to return results in)``."""
    arr = np.asarray(x)
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.float64)
    elif arr.dtype.kind != "f":
        raise TypeError(
            f"{name} must be a real numeric array, got dtype {arr.dtype} "
            f"(shape {arr.shape}); convert it with np.asarray(..., dtype=float)"
        )
    out_dtype = arr.dtype
    # Half precision has ~3 significant digits: sums over hundreds of features would be
    # dominated by rounding, so accumulate in float32 as every framework does. float32 is
    # computed in float64: this is a reference, and a float32 mean cannot even represent the
    # mean of a row at offset 1e6 to better than 0.06 (torch's float32 CPU kernel is off by
    # ~0.1 there), while float64 arithmetic on the same inputs is exact to ~1e-9.
    if arr.dtype.itemsize < 4:
        arr = arr.astype(np.float32)
    elif arr.dtype == np.float32:
        arr = arr.astype(np.float64)
    return arr, out_dtype


def _in_dtype(dtype: np.dtype, *arrays: Array) -> tuple[Array, ...]:
    """Every array cast to ``dtype``: a backward's gradients all come back in x's dtype."""
    return tuple(a.astype(dtype, copy=False) for a in arrays)


def _check_eps(eps: float) -> None:
    if not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")


def _check_feature_param(p: ArrayLike | None, size: int, name: str, x_shape: tuple, axis_name: str):
    """Validate a per-feature parameter of shape ``(size,)``; ``None`` means 'not used'."""
    if p is None:
        return None
    arr, _ = _as_float(p, name)
    if arr.shape != (size,):
        raise ValueError(
            f"{name} has shape {arr.shape}, expected ({size},) to match {axis_name} of x "
            f"with shape {tuple(x_shape)}"
        )
    return arr


def _check_last_axis(x: Array, name: str = "x") -> int:
    if x.ndim == 0:
        raise ValueError(f"{name} is a scalar; it needs a feature axis, shape (..., D)")
    d = x.shape[-1]
    if d == 0:
        raise ValueError(f"{name} has shape {x.shape}: the normalized (last) axis is empty")
    return d


def _rstd(var: Array, eps: float) -> Array:
    """``1 / sqrt(var + eps)``, defined as 0 where ``var + eps == 0`` (constant row, eps 0).

    Multiplying by 0 there keeps a constant row at exact zeros instead of 0 * inf = NaN.
    """
    denom = np.sqrt(var + eps)
    return np.divide(1.0, denom, out=np.zeros_like(denom), where=denom > 0)


def _center(x: Array, axis) -> tuple[Array, Array]:
    """Return ``(x - mean, mean)``, accurate for large offsets, exact zeros on constant slices.

    The mean of a constant row is not always bit-identical to its elements (0.1 * 3 / 3 !=
    0.1 in binary), so without the mask a constant row would come out as rounding noise
    amplified by 1/sqrt(eps) rather than as zeros.
    """
    mu = np.mean(x, axis=axis, keepdims=True)
    # One refinement pass (the "corrected two-pass" algorithm): in float32 a row with mean
    # 1e6 sums to ~1e8, where the rounding of the sum alone shifts the mean by ~0.06. The
    # residual mean of x - mu is computed on small numbers and removes that error.
    mu = mu + np.mean(x - mu, axis=axis, keepdims=True)
    centered = x - mu
    constant = np.max(x, axis=axis, keepdims=True) == np.min(x, axis=axis, keepdims=True)
    return np.where(constant, 0.0, centered).astype(x.dtype, copy=False), mu


# --------------------------------------------------------------------------- LayerNorm


def layer_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    eps: float = 1e-5,
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
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    d = _check_last_axis(xf)
    g = _check_feature_param(gamma, d, "gamma", xf.shape, "the last axis")
    b = _check_feature_param(beta, d, "beta", xf.shape, "the last axis")
    centered, _ = _center(xf, axis=-1)
    var = np.mean(centered * centered, axis=-1, keepdims=True)
    out = centered * _rstd(var, eps)
    if g is not None:
        out = out * g
    if b is not None:
        out = out + b
    return out.astype(out_dtype, copy=False)


def layer_norm_backward(
    dout: ArrayLike,
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    eps: float = 1e-5,
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
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    d = _check_last_axis(xf)
    dy, _ = _as_float(dout, "dout")
    if dy.shape != xf.shape:
        raise ValueError(f"dout has shape {dy.shape}, expected the shape of x {xf.shape}")
    g = _check_feature_param(gamma, d, "gamma", xf.shape, "the last axis")
    centered, _ = _center(xf, axis=-1)
    var = np.mean(centered * centered, axis=-1, keepdims=True)
    rstd = _rstd(var, eps)
    x_hat = centered * rstd
    lead = tuple(range(xf.ndim - 1))
    dgamma = np.sum(dy * x_hat, axis=lead)
    dbeta = np.sum(dy, axis=lead)
    gx = dy * g if g is not None else dy
    dx = rstd * (
        gx - gx.mean(axis=-1, keepdims=True) - x_hat * (gx * x_hat).mean(axis=-1, keepdims=True)
    )
    return _in_dtype(out_dtype, dx, dgamma, dbeta)


def layer_norm_jacobian(x: ArrayLike, eps: float = 1e-5) -> Array:
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
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    d = _check_last_axis(xf)
    centered, _ = _center(xf, axis=-1)
    var = np.mean(centered * centered, axis=-1, keepdims=True)
    rstd = _rstd(var, eps)
    x_hat = centered * rstd
    eye = np.eye(d, dtype=xf.dtype)
    outer = x_hat[..., :, None] * x_hat[..., None, :]
    jac = rstd[..., None] * (eye - 1.0 / d - outer / d)
    return jac.astype(out_dtype, copy=False)


# --------------------------------------------------------------------------- RMSNorm


def rms_norm(x: ArrayLike, gamma: ArrayLike | None = None, eps: float = 1e-5) -> Array:
    """Root-mean-square normalization over the last axis (Zhang & Sennrich, 2019).

    Inputs:
    - x: shape (..., D).
    - gamma: scale of shape (D,), or None for ones. There is no shift (no beta).
    - eps: added to the mean of squares inside the square root. Note that
      ``torch.nn.RMSNorm(eps=None)`` uses ``torch.finfo(dtype).eps`` (1.19e-7 for float32),
      not 1e-5; pass eps explicitly when you compare.

    Returns:
    - out: shape (..., D): ``gamma * x / sqrt(mean(x**2) + eps)``. Not zero-mean: only the
      scale is normalized. Matches ``torch.nn.functional.rms_norm(x, (D,), gamma, eps)``.
    """
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    d = _check_last_axis(xf)
    g = _check_feature_param(gamma, d, "gamma", xf.shape, "the last axis")
    ms = np.mean(xf * xf, axis=-1, keepdims=True)
    out = xf * _rstd(ms, eps)
    if g is not None:
        out = out * g
    return out.astype(out_dtype, copy=False)


def rms_norm_backward(
    dout: ArrayLike, x: ArrayLike, gamma: ArrayLike | None = None, eps: float = 1e-5
) -> tuple[Array, Array]:
    """Backward pass of :func:`rms_norm`.

    Inputs: dout and x of shape (..., D), gamma (D,) or None, eps.

    Returns a tuple of:
    - dx: shape (..., D), ``rstd * (g - x_hat * mean(g * x_hat))`` with ``g = dout * gamma``
      and ``x_hat = x * rstd``. Compared with LayerNorm only the centering term is missing.
    - dgamma: shape (D,), ``sum(dout * x_hat)`` over every leading axis.
    """
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    d = _check_last_axis(xf)
    dy, _ = _as_float(dout, "dout")
    if dy.shape != xf.shape:
        raise ValueError(f"dout has shape {dy.shape}, expected the shape of x {xf.shape}")
    g = _check_feature_param(gamma, d, "gamma", xf.shape, "the last axis")
    rstd = _rstd(np.mean(xf * xf, axis=-1, keepdims=True), eps)
    x_hat = xf * rstd
    dgamma = np.sum(dy * x_hat, axis=tuple(range(xf.ndim - 1)))
    gx = dy * g if g is not None else dy
    dx = rstd * (gx - x_hat * (gx * x_hat).mean(axis=-1, keepdims=True))
    return _in_dtype(out_dtype, dx, dgamma)


def rms_norm_jacobian(x: ArrayLike, eps: float = 1e-5) -> Array:
    """Closed-form Jacobian of RMSNorm without gamma: ``(1/r) (I - x_hat x_hat^T / D)``.

    Shapes as in :func:`layer_norm_jacobian`; ``r = sqrt(mean(x**2) + eps)``, ``x_hat = x/r``.
    """
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    d = _check_last_axis(xf)
    rstd = _rstd(np.mean(xf * xf, axis=-1, keepdims=True), eps)
    x_hat = xf * rstd
    jac = rstd[..., None] * (
        np.eye(d, dtype=xf.dtype) - x_hat[..., :, None] * x_hat[..., None, :] / d
    )
    return jac.astype(out_dtype, copy=False)


# --------------------------------------------------------------------------- BatchNorm


def _bn_axes(x: Array) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """Reduction axes, channel count and broadcast shape for a (N, C, *spatial) input."""
    if x.ndim < 2:
        raise ValueError(
            f"batch_norm needs x of shape (N, C) or (N, C, *spatial), got shape {x.shape}; "
            "a single sample of C features is x[None, :]"
        )
    if x.shape[1] == 0:
        raise ValueError(f"x has shape {x.shape}: the channel axis (axis 1) is empty")
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return axes, x.shape[1], bshape


def batch_norm(
    x: ArrayLike,
    *,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    running_mean: ArrayLike | None = None,
    running_var: ArrayLike | None = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
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
    _check_eps(eps)
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1] (weight of the new value), got {momentum}")
    xf, out_dtype = _as_float(x, "x")
    axes, c, bshape = _bn_axes(xf)
    g = _check_feature_param(gamma, c, "gamma", xf.shape, "the channel axis (axis 1)")
    b = _check_feature_param(beta, c, "beta", xf.shape, "the channel axis (axis 1)")
    rm = _check_feature_param(
        running_mean, c, "running_mean", xf.shape, "the channel axis (axis 1)"
    )
    rv = _check_feature_param(running_var, c, "running_var", xf.shape, "the channel axis (axis 1)")
    if (rm is None) != (rv is None):
        raise ValueError("pass both running_mean and running_var, or neither")
    # The running statistics come back in the dtype of the buffers they update.
    stat_dtypes = (
        (_as_float(running_mean, "running_mean")[1], _as_float(running_var, "running_var")[1])
        if rm is not None
        else None
    )

    if training:
        m = xf.size // c
        if m < 2:
            raise ValueError(
                f"batch_norm in training mode needs more than 1 value per channel, got x of "
                f"shape {xf.shape}; use eval mode (training=False) for a single sample"
            )
        centered, mu = _center(xf, axis=axes)
        var = np.mean(centered * centered, axis=axes, keepdims=True)
        out = centered * _rstd(var, eps)
        if rm is not None:
            rm = (1 - momentum) * rm + momentum * mu.reshape(c)
            rv = (1 - momentum) * rv + momentum * var.reshape(c) * (m / (m - 1))
    else:
        if rm is None:
            raise ValueError("eval mode (training=False) needs running_mean and running_var")
        out = (xf - rm.reshape(bshape)) * _rstd(rv.reshape(bshape), eps)
        rm, rv = rm.copy(), rv.copy()
    if g is not None:
        out = out * g.reshape(bshape)
    if b is not None:
        out = out + b.reshape(bshape)
    if stat_dtypes is not None:
        rm, rv = rm.astype(stat_dtypes[0], copy=False), rv.astype(stat_dtypes[1], copy=False)
    return out.astype(out_dtype, copy=False), rm, rv


def batch_norm_backward(
    dout: ArrayLike, x: ArrayLike, gamma: ArrayLike | None = None, eps: float = 1e-5
) -> tuple[Array, Array, Array]:
    """Backward pass of :func:`batch_norm` in training mode (batch statistics).

    Inputs: dout and x of shape (N, C) or (N, C, *spatial); gamma (C,) or None; eps.

    Returns a tuple of:
    - dx: shape of x. The same formula as LayerNorm's backward with the mean taken per
      channel over N and the spatial axes: ``rstd * (g - mean(g) - x_hat * mean(g*x_hat))``.
    - dgamma: (C,) ``sum(dout * x_hat)`` over N and spatial axes.
    - dbeta: (C,) ``sum(dout)`` over N and spatial axes.
    """
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    axes, c, bshape = _bn_axes(xf)
    dy, _ = _as_float(dout, "dout")
    if dy.shape != xf.shape:
        raise ValueError(f"dout has shape {dy.shape}, expected the shape of x {xf.shape}")
    g = _check_feature_param(gamma, c, "gamma", xf.shape, "the channel axis (axis 1)")
    centered, _ = _center(xf, axis=axes)
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    rstd = _rstd(var, eps)
    x_hat = centered * rstd
    dgamma = np.sum(dy * x_hat, axis=axes)
    dbeta = np.sum(dy, axis=axes)
    gx = dy * g.reshape(bshape) if g is not None else dy
    dx = rstd * (
        gx - gx.mean(axis=axes, keepdims=True) - x_hat * (gx * x_hat).mean(axis=axes, keepdims=True)
    )
    return _in_dtype(out_dtype, dx, dgamma, dbeta)


# --------------------------------------------------------------------------- GroupNorm


def _gn_groups(x: Array, groups: int) -> tuple[int, tuple[int, ...]]:
    """Validate a (N, C, *spatial) input for ``groups`` groups; return ``(C, broadcast shape)``."""
    if x.ndim < 2:
        raise ValueError(
            f"group_norm needs x of shape (N, C) or (N, C, *spatial), got shape {x.shape}; "
            "a single sample is x[None]"
        )
    c = x.shape[1]
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"G (the number of groups) must be a positive integer, got {groups!r}")
    if c == 0 or c % groups != 0:
        raise ValueError(
            f"the C = {c} channels of x (shape {x.shape}) cannot be split into G = {groups} "
            f"groups of equal size: C must be divisible by G"
        )
    if x.size == 0:
        raise ValueError(f"x has shape {x.shape}: there is nothing to normalize")
    return c, (1, c) + (1,) * (x.ndim - 2)


def _group_stats(xf: Array, groups: int, eps: float) -> tuple[Array, Array]:
    """``(x_hat grouped as (N, G, M), rstd (N, G, 1))`` with ``M = C / G * prod(spatial)``.

    Channels are contiguous after the batch axis, so ``reshape(N, G, -1)`` puts channels
    ``g*C/G .. (g+1)*C/G - 1`` and all their positions in row ``g``: every group is one row
    and GroupNorm becomes LayerNorm of the rows.
    """
    xg = xf.reshape(xf.shape[0], groups, -1)
    centered, _ = _center(xg, axis=-1)
    var = np.mean(centered * centered, axis=-1, keepdims=True)
    rstd = _rstd(var, eps)
    return centered * rstd, rstd


def group_norm(
    x: ArrayLike,
    G: int,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    eps: float = 1e-5,
) -> Array:
    """Group normalization (Wu & He, 2018).

    Inputs:
    - x: shape (N, C) or (N, C, *spatial), e.g. (N, C, H, W).
    - G: number of groups; C must be divisible by G. Group g holds the adjacent channels
      ``g*C/G .. (g+1)*C/G - 1``. ``G = 1`` is LayerNorm over (C, *spatial); ``G = C`` is
      InstanceNorm.
    - gamma, beta: per-channel scale and shift of shape (C,), or None (ones / zeros).
    - eps: added to the biased variance inside the square root.

    Returns:
    - out: shape and dtype of x. Each sample's group is normalized with its own mean and
      biased variance (over C/G channels and every spatial position), then
      ``out = gamma[c] * x_hat + beta[c]``. Nothing depends on the other samples of the
      batch, and there are no running statistics: training and eval compute the same thing.
      Matches ``torch.nn.functional.group_norm(x, G, gamma, beta, eps)``.
    """
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    c, bshape = _gn_groups(xf, G)
    g = _check_feature_param(gamma, c, "gamma", xf.shape, "the channel axis (axis 1)")
    b = _check_feature_param(beta, c, "beta", xf.shape, "the channel axis (axis 1)")
    x_hat, _ = _group_stats(xf, G, eps)
    out = x_hat.reshape(xf.shape)
    if g is not None:
        out = out * g.reshape(bshape)
    if b is not None:
        out = out + b.reshape(bshape)
    return out.astype(out_dtype, copy=False)


def group_norm_backward(
    dout: ArrayLike,
    x: ArrayLike,
    G: int,
    gamma: ArrayLike | None = None,
    eps: float = 1e-5,
) -> tuple[Array, Array, Array]:
    """Backward pass of :func:`group_norm`, derived by hand.

    Inputs:
    - dout: upstream gradient dL/d(out), shape of x.
    - x: the forward input, (N, C) or (N, C, *spatial).
    - G: the forward number of groups.
    - gamma: the forward scale (C,), or None for ones.
    - eps: the forward eps.

    Returns a tuple, every array in x's dtype, of:
    - dx: shape of x. Per (sample, group) row it is LayerNorm's backward:
      ``rstd * (g - mean(g) - x_hat * mean(g * x_hat))`` with ``g = dout * gamma[c]`` and the
      means over the group's C/G channels and spatial positions. gamma is applied per channel
      *before* the per-group reduction, which is the only difference from LayerNorm.
    - dgamma: (C,) ``sum(dout * x_hat)`` over N and every spatial axis.
    - dbeta: (C,) ``sum(dout)`` over N and every spatial axis.
    """
    _check_eps(eps)
    xf, out_dtype = _as_float(x, "x")
    c, bshape = _gn_groups(xf, G)
    dy, _ = _as_float(dout, "dout")
    if dy.shape != xf.shape:
        raise ValueError(f"dout has shape {dy.shape}, expected the shape of x {xf.shape}")
    g = _check_feature_param(gamma, c, "gamma", xf.shape, "the channel axis (axis 1)")
    x_hat, rstd = _group_stats(xf, G, eps)
    axes = (0,) + tuple(range(2, xf.ndim))
    dgamma = np.sum(dy * x_hat.reshape(xf.shape), axis=axes)
    dbeta = np.sum(dy, axis=axes)
    gx = (dy * g.reshape(bshape) if g is not None else dy).reshape(x_hat.shape)
    dx = rstd * (
        gx - gx.mean(axis=-1, keepdims=True) - x_hat * (gx * x_hat).mean(axis=-1, keepdims=True)
    )
    return (
        dx.reshape(xf.shape).astype(out_dtype, copy=False),
        dgamma.astype(out_dtype, copy=False),
        dbeta.astype(out_dtype, copy=False),
    )


def instance_norm(
    x: ArrayLike, gamma: ArrayLike | None = None, beta: ArrayLike | None = None, eps: float = 1e-5
) -> Array:
    """Instance normalization (Ulyanov et al., 2016): :func:`group_norm` with one channel per
    group. x (N, C, *spatial) -> same shape; matches ``torch.nn.functional.instance_norm(x,
    weight=gamma, bias=beta, eps=eps)`` (no running statistics)."""
    return group_norm(x, np.shape(x)[1] if np.ndim(x) >= 2 else 0, gamma, beta, eps)
