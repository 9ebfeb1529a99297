"""Correct ``dyt`` answers (see the package's docstring): tanh from exponentials, einsum
reductions with alpha cast to x's dtype first, and rows reshaped to (N, D)."""

_F_EXP = """import numpy as np


def _tanh(u):
    # sign(u) (1 - e^{-2|u|}) / (1 + e^{-2|u|}): never exponentiates a positive number
    e = np.exp(-2 * np.abs(u))
    return np.sign(u) * (1 - e) / (1 + e)


def dyt_forward(x, alpha, gamma, beta):
    a = np.asarray(alpha)
    if a.shape != ():
        raise ValueError("alpha has to be a scalar")
    return (_tanh(a.astype(x.dtype) * x) * gamma + beta).astype(x.dtype)
"""

_B_EXP = """import numpy as np


def dyt_backward(dout, x, alpha, gamma):
    a = np.asarray(alpha, dtype=x.dtype)
    e = np.exp(-2 * np.abs(a * x))
    sech2 = 4 * e / (1 + e) ** 2  # 1 - tanh^2
    t = np.sign(a * x) * (1 - e) / (1 + e)
    g = dout * gamma * sech2
    axes = tuple(range(x.ndim - 1))
    return ((a * g).astype(x.dtype), np.asarray(np.sum(g * x), dtype=x.dtype),
            np.sum(dout * t, axis=axes).astype(x.dtype), np.sum(dout, axis=axes).astype(x.dtype))
"""

_F_EINSUM = """import numpy as np


def dyt_forward(x, alpha, gamma, beta):
    if np.ndim(alpha) > 0:
        raise ValueError(f"expected a scalar alpha, got shape {np.shape(alpha)}")
    a = np.asarray(alpha, dtype=x.dtype)
    return np.einsum("...d,d->...d", np.tanh(a * x), gamma) + beta
"""

_B_EINSUM = """import numpy as np


def dyt_backward(dout, x, alpha, gamma):
    a = np.asarray(alpha, dtype=x.dtype)
    t = np.tanh(a * x)
    local = dout * gamma * (1 - t * t)
    d = x.shape[-1]
    rows = dout.reshape(-1, d), t.reshape(-1, d)
    dalpha = np.einsum("nd,nd->", local.reshape(-1, d), x.reshape(-1, d))
    dgamma = np.einsum("nd,nd->d", *rows)
    dbeta = np.einsum("nd->d", rows[0])
    return a * local, dalpha, dgamma, dbeta
"""

_F_ROWS = """import numpy as np


def dyt_forward(x, alpha, gamma, beta):
    D = x.shape[-1]
    if np.size(alpha) != 1 or np.ndim(alpha) != 0:
        raise ValueError("alpha must be a single number")
    if gamma.shape != (D,) or beta.shape != (D,):
        raise ValueError(f"gamma and beta must have shape ({D},)")
    rows = x.reshape(-1, D)
    y = np.tanh(float(alpha) * rows) * gamma[None, :] + beta[None, :]
    return y.reshape(x.shape).astype(x.dtype)
"""

_B_ROWS = """import numpy as np


def dyt_backward(dout, x, alpha, gamma):
    D = x.shape[-1]
    a = float(alpha)
    X, G = x.reshape(-1, D), dout.reshape(-1, D)
    T = np.tanh(a * X)
    dU = G * gamma[None, :] * (1.0 - T ** 2)
    dx = (a * dU).reshape(x.shape).astype(x.dtype)
    dalpha = x.dtype.type((dU * X).sum())
    return dx, dalpha, (G * T).sum(axis=0).astype(x.dtype), G.sum(axis=0).astype(x.dtype)
"""

VARIANTS = {
    "exp_tanh": {"dyt_forward": _F_EXP, "dyt_backward": _B_EXP},
    "einsum": {"dyt_forward": _F_EINSUM, "dyt_backward": _B_EINSUM},
    "rows": {"dyt_forward": _F_ROWS, "dyt_backward": _B_ROWS},
}
