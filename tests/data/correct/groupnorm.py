"""Correct ``groupnorm`` answers (see the package's docstring)."""

_F_LOOP = """import numpy as np


def groupnorm_forward(x, gamma, beta, G, eps=1e-5):
    C = x.shape[1]
    if C % G:
        raise ValueError("the number of channels must be divisible by the number of groups")
    per = C // G
    out = np.empty_like(x)
    shape = (1, C) + (1,) * (x.ndim - 2)
    for g in range(G):
        block = x[:, g * per:(g + 1) * per]
        axes = tuple(range(1, x.ndim))
        mean = block.mean(axis=axes, keepdims=True)
        var = block.var(axis=axes, keepdims=True)
        out[:, g * per:(g + 1) * per] = (block - mean) / np.sqrt(var + eps)
    return out * gamma.reshape(shape) + beta.reshape(shape)
"""

_F_RESHAPE = """import numpy as np


def groupnorm_forward(x, gamma, beta, G, eps=1e-5):
    # No explicit check: the reshape itself raises ValueError when G does not divide C.
    N, C = x.shape[0], x.shape[1]
    xg = x.reshape(N, G, C // G, *x.shape[2:])
    axes = tuple(range(2, xg.ndim))
    mu = xg.mean(axis=axes, keepdims=True)
    var = xg.var(axis=axes, keepdims=True)
    xhat = ((xg - mu) / np.sqrt(var + eps)).reshape(x.shape)
    bshape = [1] * x.ndim
    bshape[1] = C
    return np.reshape(gamma, bshape) * xhat + np.reshape(beta, bshape)
"""

_F_CHANNELS_LAST = """import numpy as np


def groupnorm_forward(x, gamma, beta, G, eps=1e-5):
    N, C = x.shape[:2]
    if C % G != 0:
        raise ValueError(f"C={C} is not a multiple of G={G}")
    xl = np.moveaxis(x, 1, -1)                  # (N, *spatial, C)
    xg = xl.reshape(N, -1, G, C // G)           # (N, positions, G, C/G)
    mu = xg.mean(axis=(1, 3), keepdims=True)
    var = ((xg - mu) ** 2).mean(axis=(1, 3), keepdims=True)
    xhat = (xg - mu) / np.sqrt(var + eps)
    out = xhat.reshape(xl.shape) * gamma + beta
    return np.moveaxis(out, -1, 1)
"""

_B_LOOP = """import numpy as np


def groupnorm_backward(dout, x, gamma, G, eps=1e-5):
    N, C = x.shape[:2]
    if C % G:
        raise ValueError("groups do not divide channels")
    per = C // G
    shape = (1, C) + (1,) * (x.ndim - 2)
    sum_axes = (0,) + tuple(range(2, x.ndim))
    axes = tuple(range(1, x.ndim))
    dx = np.empty_like(x)
    xhat = np.empty_like(x)
    g = dout * gamma.reshape(shape)
    for k in range(G):
        sl = slice(k * per, (k + 1) * per)
        xb, gb = x[:, sl], g[:, sl]
        m = xb[0].size
        std = np.sqrt(xb.var(axis=axes, keepdims=True) + eps)
        xh = (xb - xb.mean(axis=axes, keepdims=True)) / std
        xhat[:, sl] = xh
        dx[:, sl] = (m * gb - gb.sum(axis=axes, keepdims=True)
                     - xh * (gb * xh).sum(axis=axes, keepdims=True)) / (m * std)
    return dx, (dout * xhat).sum(axis=sum_axes), dout.sum(axis=sum_axes)
"""

_B_RESHAPE = """import numpy as np


def groupnorm_backward(dout, x, gamma, G, eps=1e-5):
    N, C = x.shape[0], x.shape[1]
    xg = x.reshape(N, G, C // G, *x.shape[2:])
    axes = tuple(range(2, xg.ndim))
    M = xg[0, 0].size
    mu = xg.mean(axis=axes, keepdims=True)
    xmu = xg - mu
    var = (xmu ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    bshape = [1] * x.ndim
    bshape[1] = C
    dxhat = (dout * np.reshape(gamma, bshape)).reshape(xg.shape)
    dvar = np.sum(dxhat * xmu, axis=axes, keepdims=True) * -0.5 * inv ** 3
    dmu = -np.sum(dxhat * inv, axis=axes, keepdims=True)
    dx = dxhat * inv + dvar * 2 * xmu / M + dmu / M
    sum_axes = (0,) + tuple(range(2, x.ndim))
    dgamma = np.sum(dout * (xmu * inv).reshape(x.shape), axis=sum_axes)
    return dx.reshape(x.shape), dgamma, np.sum(dout, axis=sum_axes)
"""

_B_CHANNELS_LAST = """import numpy as np


def groupnorm_backward(dout, x, gamma, G, eps=1e-5):
    N, C = x.shape[:2]
    if C % G != 0:
        raise ValueError(f"C={C} is not a multiple of G={G}")
    xl = np.moveaxis(x, 1, -1)
    dl = np.moveaxis(dout, 1, -1)
    dgamma = None
    xg = xl.reshape(N, -1, G, C // G)
    mu = xg.mean(axis=(1, 3), keepdims=True)
    rstd = 1 / np.sqrt(((xg - mu) ** 2).mean(axis=(1, 3), keepdims=True) + eps)
    xhat = (xg - mu) * rstd
    lead = tuple(range(xl.ndim - 1))
    dgamma = (dl * xhat.reshape(xl.shape)).sum(axis=lead)
    dbeta = dl.sum(axis=lead)
    g = (dl * gamma).reshape(xg.shape)
    mean_g = g.mean(axis=(1, 3), keepdims=True)
    mean_gx = (g * xhat).mean(axis=(1, 3), keepdims=True)
    dx = (rstd * (g - mean_g - xhat * mean_gx)).reshape(xl.shape)
    return np.moveaxis(dx, -1, 1), dgamma, dbeta
"""

VARIANTS = {
    "loop_over_groups": {"groupnorm_forward": _F_LOOP, "groupnorm_backward": _B_LOOP},
    "numpy_reshape_error": {"groupnorm_forward": _F_RESHAPE, "groupnorm_backward": _B_RESHAPE},
    "channels_last": {
        "groupnorm_forward": _F_CHANNELS_LAST,
        "groupnorm_backward": _B_CHANNELS_LAST,
    },
}
