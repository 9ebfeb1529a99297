"""Correct ``rmsnorm`` answers (see the package's docstring). The module cell keeps the
solution's (the variants are of the NumPy functions)."""

_F_NORM = """import numpy as np


def rmsnorm_forward(x, gamma, eps=1e-5):
    d = x.shape[-1]
    sq = np.linalg.norm(x, axis=-1, keepdims=True) ** 2 / d
    return x / np.sqrt(sq + eps) * gamma
"""

_F_RSQRT = """import numpy as np


def rmsnorm_forward(x, gamma, eps=1e-5):
    inv = (np.mean(np.square(x), axis=-1, keepdims=True) + eps) ** -0.5
    return gamma * x * inv
"""

_F_EINSUM = """import numpy as np


def rmsnorm_forward(x, gamma, eps=1e-5):
    ms = np.einsum("...d,...d->...", x, x)[..., None] / x.shape[-1]
    return np.einsum("...d,d->...d", x / np.sqrt(ms + eps), gamma)
"""

_B_PROJ = """import numpy as np


def rmsnorm_backward(dout, x, gamma, eps=1e-5):
    r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    n = x.shape[-1]
    z = dout * gamma
    dot = np.sum(z * x, axis=-1, keepdims=True)
    dx = z / r - x * dot / (n * r ** 3)
    dgamma = np.sum((dout * x / r).reshape(-1, n), axis=0)
    return dx, dgamma
"""

_B_CHAIN = """import numpy as np


def rmsnorm_backward(dout, x, gamma, eps=1e-5):
    D = x.shape[-1]
    ms = (x ** 2).mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(ms + eps)
    dy = dout * gamma
    dinv = np.sum(dy * x, axis=-1, keepdims=True)
    dms = dinv * -0.5 * (ms + eps) ** -1.5
    dx = dy * inv + dms * 2.0 * x / D
    lead = tuple(range(x.ndim - 1))
    return dx, np.sum(dout * x * inv, axis=lead)
"""

_B_EINSUM = """import numpy as np


def rmsnorm_backward(dout, x, gamma, eps=1e-5):
    rstd = 1 / np.sqrt(np.einsum("...d,...d->...", x, x)[..., None] / x.shape[-1] + eps)
    xhat = x * rstd
    g = dout * gamma
    proj = np.einsum("...d,...d->...", g, xhat)[..., None] / x.shape[-1]
    d = x.shape[-1]
    return rstd * (g - xhat * proj), np.einsum("nd,nd->d", dout.reshape(-1, d), xhat.reshape(-1, d))
"""

VARIANTS = {
    "linalg_projection": {"rmsnorm_forward": _F_NORM, "rmsnorm_backward": _B_PROJ},
    "rsqrt_chain": {"rmsnorm_forward": _F_RSQRT, "rmsnorm_backward": _B_CHAIN},
    "einsum": {"rmsnorm_forward": _F_EINSUM, "rmsnorm_backward": _B_EINSUM},
}
