"""Correct ``jacobian`` answers (see the package's docstring)."""

_OUTER = """import numpy as np


def layernorm_jacobian(x, eps=1e-5):
    D = len(x)
    s = np.sqrt(np.var(x) + eps)
    z = (x - np.mean(x)) / s
    return (np.identity(D) - 1.0 / D - np.outer(z, z) / D) / s
"""

_LOOPS = """import numpy as np


def layernorm_jacobian(x, eps=1e-5):
    n = x.shape[0]
    mu = sum(x) / n
    var = sum((xi - mu) ** 2 for xi in x) / n
    sigma = (var + eps) ** 0.5
    xh = [(xi - mu) / sigma for xi in x]
    J = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            J[i, j] = ((i == j) - 1 / n - xh[i] * xh[j] / n) / sigma
    return J
"""

_CHAIN = """import numpy as np


def layernorm_jacobian(x, eps=1e-5):
    # out = C x / sigma(x) with the centering matrix C; d sigma / dx = C x / (D sigma).
    d = x.size
    C = np.eye(d) - np.full((d, d), 1.0 / d)
    xc = C @ x
    sigma = np.sqrt(xc @ xc / d + eps)
    return C / sigma - np.einsum("i,j->ij", xc, xc) / (d * sigma ** 3)
"""

VARIANTS = {
    "outer_npvar": {"layernorm_jacobian": _OUTER},
    "loops": {"layernorm_jacobian": _LOOPS},
    "centering_matrix_chain_rule": {"layernorm_jacobian": _CHAIN},
}
