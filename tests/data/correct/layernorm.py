"""Correct ``layernorm`` answers (see the package's docstring)."""

_F_NPVAR = """import numpy as np


def layernorm_forward(x, gamma, beta, eps=1e-5):
    rstd = 1.0 / np.sqrt(np.var(x, axis=-1, keepdims=True) + eps)
    return (x - np.mean(x, axis=-1, keepdims=True)) * rstd * gamma + beta
"""

_F_TRANSPOSE = """import numpy as np


def layernorm_forward(x, gamma, beta, eps=1e-5):
    # BatchNorm's code on the transposed rows (features on axis 0).
    shape = x.shape
    xt = x.reshape(-1, shape[-1]).T
    mu = xt.mean(axis=0)
    var = ((xt - mu) ** 2).mean(axis=0)
    xhat = ((xt - mu) / np.sqrt(var + eps)).T.reshape(shape)
    return xhat * gamma + beta
"""

_F_EINSUM = """import numpy as np


def layernorm_forward(x, gamma, beta, eps=1e-5):
    d = x.shape[-1]
    mean = np.einsum("...d->...", x)[..., None] / d
    c = x - mean
    var = np.einsum("...d,...d->...", c, c)[..., None] / d
    return gamma * c / np.sqrt(var + eps) + beta
"""

_B_COMPACT = """import numpy as np


def layernorm_backward(dout, x, gamma, eps=1e-5):
    D = x.shape[-1]
    std = np.sqrt(np.var(x, axis=-1, keepdims=True) + eps)
    xhat = (x - np.mean(x, axis=-1, keepdims=True)) / std
    dxhat = dout * gamma
    dx = (D * dxhat - dxhat.sum(-1, keepdims=True)
          - xhat * (dxhat * xhat).sum(-1, keepdims=True)) / (D * std)
    lead = tuple(range(x.ndim - 1))
    return dx, (dout * xhat).sum(axis=lead), dout.sum(axis=lead)
"""

_B_TRANSPOSE = """import numpy as np


def layernorm_backward(dout, x, gamma, eps=1e-5):
    D = x.shape[-1]
    x2, d2 = x.reshape(-1, D), dout.reshape(-1, D)
    dgamma = np.sum(d2 * ((x2 - x2.mean(1, keepdims=True))
                          / np.sqrt(x2.var(1, keepdims=True) + eps)), axis=0)
    dbeta = np.sum(d2, axis=0)
    # BatchNorm's backward on the transposed rows.
    xt, gt = x2.T, (d2 * gamma).T
    mu = xt.mean(axis=0)
    istd = 1.0 / np.sqrt(xt.var(axis=0) + eps)
    xhat = (xt - mu) * istd
    dxt = istd / D * (D * gt - gt.sum(axis=0) - xhat * (gt * xhat).sum(axis=0))
    return dxt.T.reshape(x.shape), dgamma, dbeta
"""

_B_CHAIN = """import numpy as np


def layernorm_backward(dout, x, gamma, eps=1e-5):
    D = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    xmu = x - mu
    var = (xmu * xmu).mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    dxhat = dout * gamma
    dvar = -0.5 * np.sum(dxhat * xmu, axis=-1, keepdims=True) * inv ** 3
    dmu = -np.sum(dxhat * inv, axis=-1, keepdims=True) - 2.0 * dvar * xmu.mean(-1, keepdims=True)
    dx = dxhat * inv + dvar * 2.0 * xmu / D + dmu / D
    dgamma = np.einsum("nd,nd->d", dout.reshape(-1, D), (xmu * inv).reshape(-1, D))
    dbeta = np.einsum("nd->d", dout.reshape(-1, D))
    return dx, dgamma, dbeta
"""

VARIANTS = {
    "npvar_rstd": {"layernorm_forward": _F_NPVAR, "layernorm_backward": _B_COMPACT},
    "transposed_batchnorm": {"layernorm_forward": _F_TRANSPOSE, "layernorm_backward": _B_TRANSPOSE},
    "einsum_chain": {"layernorm_forward": _F_EINSUM, "layernorm_backward": _B_CHAIN},
}
