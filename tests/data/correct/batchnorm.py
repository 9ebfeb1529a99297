"""Correct ``batchnorm`` answers (see the package's docstring)."""

_F_NPVAR = """import numpy as np


def batchnorm_forward(x, gamma, beta, running_mean, running_var, training=True,
                      momentum=0.1, eps=1e-5):
    if not training:
        rstd = 1 / np.sqrt(running_var + eps)
        return (x - running_mean) * rstd * gamma + beta, running_mean, running_var
    mean = np.mean(x, axis=0)
    var = np.var(x, axis=0)
    rstd = 1 / np.sqrt(var + eps)
    out = (x - mean) * rstd * gamma + beta
    unbiased = np.var(x, axis=0, ddof=1)
    rm = momentum * mean + (1 - momentum) * running_mean
    rv = momentum * unbiased + (1 - momentum) * running_var
    return out, rm, rv
"""

_F_STAGED = """import numpy as np


def batchnorm_forward(x, gamma, beta, running_mean, running_var, training=True,
                      momentum=0.1, eps=1e-5):
    N, D = x.shape
    if training:
        mu = 1.0 / N * np.sum(x, axis=0)
        xmu = x - mu
        var = 1.0 / N * np.sum(xmu ** 2, axis=0)
        std = np.sqrt(var + eps)
        xhat = xmu / std
        running_mean = running_mean + momentum * (mu - running_mean)
        running_var = running_var + momentum * (var * N / (N - 1) - running_var)
    else:
        xhat = (x - running_mean) / np.sqrt(running_var + eps)
        running_mean, running_var = np.array(running_mean), np.array(running_var)
    return gamma * xhat + beta, running_mean, running_var
"""

_F_EINSUM = """import numpy as np


def batchnorm_forward(x, gamma, beta, running_mean, running_var, training=True,
                      momentum=0.1, eps=1e-5):
    mean_, var_ = running_mean, running_var
    if training:
        n = x.shape[0]
        mean_ = np.einsum("nd->d", x) / n
        centred = x - mean_
        var_ = np.einsum("nd,nd->d", centred, centred) / n
    y = (x - mean_) / np.sqrt(var_ + eps)
    y = y * gamma + beta
    if not training:
        return y, running_mean.copy(), running_var.copy()
    new_mean = (1.0 - momentum) * running_mean + momentum * mean_
    new_var = (1.0 - momentum) * running_var + momentum * (var_ * (n / (n - 1.0)))
    return y, new_mean.astype(x.dtype), new_var.astype(x.dtype)
"""

_B_GRAPH = """import numpy as np


def batchnorm_backward(dout, x, gamma, eps=1e-5):
    N, D = x.shape
    mu = x.mean(axis=0)
    xmu = x - mu
    var = (xmu ** 2).mean(axis=0)
    sqrtvar = np.sqrt(var + eps)
    ivar = 1.0 / sqrtvar
    xhat = xmu * ivar
    dbeta = dout.sum(axis=0)
    dgamma = (dout * xhat).sum(axis=0)
    dxhat = dout * gamma
    divar = (dxhat * xmu).sum(axis=0)
    dxmu1 = dxhat * ivar
    dsqrtvar = -divar / sqrtvar ** 2
    dvar = 0.5 * dsqrtvar / np.sqrt(var + eps)
    dsq = np.ones((N, D), dtype=x.dtype) * dvar / N
    dxmu2 = 2 * xmu * dsq
    dx1 = dxmu1 + dxmu2
    dmu = -(dxmu1 + dxmu2).sum(axis=0)
    dx2 = np.ones((N, D), dtype=x.dtype) * dmu / N
    return dx1 + dx2, dgamma, dbeta
"""

_B_COMPACT = """import numpy as np


def batchnorm_backward(dout, x, gamma, eps=1e-5):
    n = x.shape[0]
    std = np.sqrt(np.var(x, axis=0) + eps)
    z = (x - np.mean(x, axis=0)) / std
    dz = dout * gamma
    dx = (n * dz - dz.sum(axis=0) - z * (dz * z).sum(axis=0)) / (n * std)
    return dx, (dout * z).sum(axis=0), dout.sum(axis=0)
"""

_B_CHAIN = """import numpy as np


def batchnorm_backward(dout, x, gamma, eps=1e-5):
    m = x.shape[0]
    mu = np.mean(x, axis=0, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=0, keepdims=True)
    inv = (var + eps) ** -0.5
    xhat = (x - mu) * inv
    dxhat = dout * gamma
    dvar = np.sum(dxhat * (x - mu), axis=0, keepdims=True) * -0.5 * inv ** 3
    dmu = (-np.sum(dxhat * inv, axis=0, keepdims=True)
           - 2 * dvar * np.mean(x - mu, axis=0, keepdims=True))
    dx = dxhat * inv + dvar * 2 * (x - mu) / m + dmu / m
    return dx, np.sum(dout * xhat, axis=0), np.sum(dout, axis=0)
"""

VARIANTS = {
    "npvar_rstd_graph": {"batchnorm_forward": _F_NPVAR, "batchnorm_backward": _B_GRAPH},
    "staged_compact": {"batchnorm_forward": _F_STAGED, "batchnorm_backward": _B_COMPACT},
    "einsum_chain": {"batchnorm_forward": _F_EINSUM, "batchnorm_backward": _B_CHAIN},
}
