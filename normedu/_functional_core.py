"""The arithmetic shared by every norm of :mod:`normedu.functional`, written once.

BatchNorm, LayerNorm, GroupNorm and RMSNorm compute the same two things and differ only in
which axes they reduce over (a :class:`Layout`):

* the forward statistics, :func:`stats`: ``x_hat = (x - mean) * rstd`` with
  ``rstd = 1 / sqrt(var + eps)``, the biased variance computed in two passes (RMSNorm: no
  centering, ``var`` is the mean square);
* the input gradient, :func:`input_grad`: ``dx = rstd * (g - mean(g) - x_hat * mean(g *
  x_hat))`` with ``g = dout * gamma`` (RMSNorm: without the ``mean(g)`` centering term).

A layout says how to view ``x`` for its statistics and how ``gamma``/``beta`` broadcast:

* LayerNorm/RMSNorm (:func:`last_axis`): x (..., D) as it is, reduced over the last axis;
  parameters (D,), their gradients summed over every leading axis.
* BatchNorm (:func:`channels`): x (N, C, *spatial) as it is, reduced over every axis but the
  channel axis 1; parameters per channel, gradients summed over the same axes.
* GroupNorm (:func:`groups`): x viewed as ``(N, G, -1)`` (channels are contiguous after the
  batch axis, so group g is row g) and reduced over the last axis, LayerNorm of the rows;
  parameters per channel of the unreshaped x, gradients summed over N and the spatial axes.

The dtype rules (float16 computed in float32, float32 in float64, results in the input's
dtype) live in :func:`as_float` and :func:`in_dtype`. The public functions, their docstrings
and conventions are in :mod:`normedu.functional`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

Array = NDArray[np.floating[Any]]


# --------------------------------------------------------------------------- validation


def as_float(x: ArrayLike, name: str) -> tuple[Array, np.dtype]:
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


def in_dtype(dtype: np.dtype, *arrays: Array) -> tuple[Array, ...]:
    """Every array cast to ``dtype``: a backward's gradients all come back in x's dtype."""
    return tuple(a.astype(dtype, copy=False) for a in arrays)


def check_eps(eps: float) -> None:
    if not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")


class Layout(NamedTuple):
    """How one norm sees an input of shape ``shape``.

    - view: the shape x is reshaped to for its statistics.
    - axes: the axes of ``view`` the statistics reduce over.
    - size, where: the length of a per-feature parameter and the axis it belongs to (in
      error messages).
    - param_shape: the shape ``gamma``/``beta`` are reshaped to to broadcast against x.
    - param_axes: the axes of x that ``dgamma``/``dbeta`` are summed over.
    """

    view: tuple[int, ...]
    axes: tuple[int, ...]
    size: int
    where: str
    param_shape: tuple[int, ...]
    param_axes: tuple[int, ...]

    def param(self, p: ArrayLike | None, name: str, x_shape: tuple) -> Array | None:
        """Validate a per-feature parameter of shape ``(size,)``; ``None`` means 'not used'."""
        if p is None:
            return None
        arr, _ = as_float(p, name)
        if arr.shape != (self.size,):
            raise ValueError(
                f"{name} has shape {arr.shape}, expected ({self.size},) to match {self.where} "
                f"of x with shape {tuple(x_shape)}"
            )
        return arr.reshape(self.param_shape)


def last_axis(x: Array, name: str = "x") -> Layout:
    """LayerNorm and RMSNorm: x (..., D), statistics per row over the last axis."""
    if x.ndim == 0:
        raise ValueError(f"{name} is a scalar; it needs a feature axis, shape (..., D)")
    d = x.shape[-1]
    if d == 0:
        raise ValueError(f"{name} has shape {x.shape}: the normalized (last) axis is empty")
    return Layout(x.shape, (-1,), d, "the last axis", (d,), tuple(range(x.ndim - 1)))


def _per_channel(x: Array, view: tuple[int, ...], axes: tuple[int, ...]) -> Layout:
    c = x.shape[1]
    spatial = (0,) + tuple(range(2, x.ndim))
    bshape = (1, c) + (1,) * (x.ndim - 2)
    return Layout(view, axes, c, "the channel axis (axis 1)", bshape, spatial)


def channels(x: Array) -> Layout:
    """BatchNorm: x (N, C, *spatial), statistics per channel over N and every spatial axis."""
    if x.ndim < 2:
        raise ValueError(
            f"batch_norm needs x of shape (N, C) or (N, C, *spatial), got shape {x.shape}; "
            "a single sample of C features is x[None, :]"
        )
    if x.shape[1] == 0:
        raise ValueError(f"x has shape {x.shape}: the channel axis (axis 1) is empty")
    return _per_channel(x, x.shape, (0,) + tuple(range(2, x.ndim)))


def groups(x: Array, G: int) -> Layout:
    """GroupNorm: x (N, C, *spatial) viewed as (N, G, C/G * prod(spatial)), one row per group."""
    if x.ndim < 2:
        raise ValueError(
            f"group_norm needs x of shape (N, C) or (N, C, *spatial), got shape {x.shape}; "
            "a single sample is x[None]"
        )
    c = x.shape[1]
    if isinstance(G, bool) or not isinstance(G, (int, np.integer)) or G < 1:
        raise ValueError(f"G (the number of groups) must be a positive integer, got {G!r}")
    if c == 0 or c % G != 0:
        raise ValueError(
            f"the C = {c} channels of x (shape {x.shape}) cannot be split into G = {G} "
            f"groups of equal size: C must be divisible by G"
        )
    if x.size == 0:
        raise ValueError(f"x has shape {x.shape}: there is nothing to normalize")
    return _per_channel(x, (x.shape[0], int(G), -1), (-1,))


def same_shape(dy: Array, xf: Array) -> None:
    if dy.shape != xf.shape:
        raise ValueError(f"dout has shape {dy.shape}, expected the shape of x {xf.shape}")


# --------------------------------------------------------------------------- statistics


def rstd_of(var: Array, eps: float) -> Array:
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


class Stats(NamedTuple):
    """The forward statistics, all in the layout's ``view`` (reduced axes kept, length 1).

    x_hat: normalized x; rstd: 1 / sqrt(var + eps); mean: None without centering; var: the
    biased variance (the mean square without centering).
    """

    x_hat: Array
    rstd: Array
    mean: Array | None
    var: Array


def stats(xf: Array, layout: Layout, eps: float, center: bool = True) -> Stats:
    """The statistics of ``xf`` (a compute-precision array) in ``layout``: the one place the
    mean, the two-pass biased variance and ``1 / sqrt(var + eps)`` are computed."""
    xv = xf.reshape(layout.view)
    if center:
        centered, mean = _center(xv, axis=layout.axes)
    else:
        centered, mean = xv, None
    var = np.mean(centered * centered, axis=layout.axes, keepdims=True)
    rstd = rstd_of(var, eps)
    return Stats(centered * rstd, rstd, mean, var)


def affine(x_hat: Array, g: Array | None, b: Array | None) -> Array:
    """``gamma * x_hat + beta`` with either left out when None (already in param_shape)."""
    out = x_hat if g is None else x_hat * g
    return out if b is None else out + b


# --------------------------------------------------------------------------- backward


def input_grad(gx: Array, x_hat: Array, rstd: Array, axes, center: bool = True) -> Array:
    """``dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))``, means over ``axes``.

    ``gx = dout * gamma`` and ``x_hat``, ``rstd`` come in the layout's view. The subtracted
    terms are the projections out of the two directions normalization removes: the constant
    shift (``mean(g)``, absent without centering, as in RMSNorm) and the scale (``x_hat``).
    """
    proj = x_hat * np.mean(gx * x_hat, axis=axes, keepdims=True)
    if center:
        gx = gx - np.mean(gx, axis=axes, keepdims=True)
    return rstd * (gx - proj)


def backward(
    dout: ArrayLike,
    xf: Array,
    layout: Layout,
    gamma: ArrayLike | None,
    eps: float,
    center: bool = True,
) -> tuple[Array, Array, Array]:
    """``(dx, dgamma, dbeta)`` in compute precision, for any layout: the one backward.

    ``dgamma = sum(dout * x_hat)`` and ``dbeta = sum(dout)`` over ``layout.param_axes``.
    """
    dy, _ = as_float(dout, "dout")
    same_shape(dy, xf)
    g = layout.param(gamma, "gamma", xf.shape)
    st = stats(xf, layout, eps, center)
    x_hat = st.x_hat.reshape(xf.shape)
    dgamma = np.sum(dy * x_hat, axis=layout.param_axes)
    dbeta = np.sum(dy, axis=layout.param_axes)
    gx = (dy if g is None else dy * g).reshape(layout.view)
    dx = input_grad(gx, st.x_hat, st.rstd, layout.axes, center).reshape(xf.shape)
    return dx, dgamma, dbeta
