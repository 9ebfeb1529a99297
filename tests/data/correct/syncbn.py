"""Correct ``syncbn`` answers (see the package's docstring)."""

_F_SEPARATE = """import numpy as np


def syncbn_forward(x, gamma, beta, all_reduce, eps=1e-5):
    n = all_reduce(np.array([float(len(x))]))[0]
    mean = all_reduce(np.sum(x, axis=0)) / n
    var = all_reduce(np.sum((x - mean) ** 2, axis=0)) / n
    return (x - mean) / np.sqrt(var + eps) * gamma + beta
"""

_F_CHAN = """import numpy as np


def syncbn_forward(x, gamma, beta, all_reduce, eps=1e-5):
    # Each process's own mean and M2, combined (Chan et al.'s parallel variance).
    n_p = x.shape[0]
    m_p = x.mean(axis=0)
    counts = all_reduce(np.concatenate([[n_p], n_p * m_p]))
    n, mu = counts[0], counts[1:] / counts[0]
    m2 = ((x - m_p) ** 2).sum(axis=0) + n_p * (m_p - mu) ** 2
    var = all_reduce(m2) / n
    rstd = 1 / np.sqrt(var + eps)
    return gamma * ((x - mu) * rstd) + beta
"""

_F_STACK = """import numpy as np


def syncbn_forward(x, gamma, beta, all_reduce, eps=1e-5):
    c = x.shape[1]
    s = all_reduce(np.stack([x.sum(axis=0), np.full(c, x.shape[0], dtype=x.dtype)]))
    mu = s[0] / s[1]
    var = all_reduce(np.einsum("nc,nc->c", x - mu, x - mu)) / s[1]
    return gamma * (x - mu) / np.sqrt(var + eps) + beta
"""

_B_SEPARATE = """import numpy as np


def syncbn_backward(dout, x, gamma, all_reduce, eps=1e-5):
    n = all_reduce(np.array([float(len(x))]))[0]
    mean = all_reduce(np.sum(x, axis=0)) / n
    var = all_reduce(np.sum((x - mean) ** 2, axis=0)) / n
    xhat = (x - mean) / np.sqrt(var + eps)
    dbeta = dout.sum(axis=0)
    dgamma = (dout * xhat).sum(axis=0)
    sum_g = all_reduce(dbeta) * gamma
    sum_gx = all_reduce(dgamma) * gamma
    dx = (gamma * dout - sum_g / n - xhat * sum_gx / n) / np.sqrt(var + eps)
    return dx, dgamma, dbeta
"""

_B_CHAIN = """import numpy as np


def syncbn_backward(dout, x, gamma, all_reduce, eps=1e-5):
    n = all_reduce(np.array([x.shape[0]], dtype=np.float64))[0]
    mu = all_reduce(x.sum(axis=0)) / n
    xmu = x - mu
    var = all_reduce((xmu ** 2).sum(axis=0)) / n
    inv = 1.0 / np.sqrt(var + eps)
    dxhat = dout * gamma
    dvar = all_reduce((dxhat * xmu).sum(axis=0)) * -0.5 * inv ** 3
    dmu = -all_reduce(dxhat.sum(axis=0)) * inv
    dx = dxhat * inv + dvar * 2 * xmu / n + dmu / n
    return dx, (dout * xmu * inv).sum(axis=0), dout.sum(axis=0)
"""

_B_STACK = """import numpy as np


def syncbn_backward(dout, x, gamma, all_reduce, eps=1e-5):
    c = x.shape[1]
    s = all_reduce(np.stack([x.sum(axis=0), np.full(c, x.shape[0], dtype=x.dtype)]))
    mu, n = s[0] / s[1], s[1]
    rstd = 1 / np.sqrt(all_reduce(((x - mu) ** 2).sum(axis=0)) / n + eps)
    xh = (x - mu) * rstd
    local = np.stack([dout.sum(axis=0), (dout * xh).sum(axis=0)])
    tot = all_reduce(local)
    dx = rstd * gamma * (dout - tot[0] / n - xh * tot[1] / n)
    return dx, local[1], local[0]
"""

VARIANTS = {
    "separate_reductions": {"syncbn_forward": _F_SEPARATE, "syncbn_backward": _B_SEPARATE},
    "parallel_variance_chain_rule": {"syncbn_forward": _F_CHAN, "syncbn_backward": _B_CHAIN},
    "stacked_reductions": {"syncbn_forward": _F_STACK, "syncbn_backward": _B_STACK},
}
