"""Central finite differences for gradient checks with a random upstream gradient.

With an all-ones upstream gradient, the input gradient of any normalization is about zero
(the output's sum does not depend on x), so a broken backward would pass. Every check here
therefore contracts the output with a random ``dout``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["numerical_gradient", "rel_error"]


def numerical_gradient(
    f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, dout: np.ndarray, h: float = 1e-6
) -> np.ndarray:
    """Gradient of ``sum(f(x) * dout)`` with respect to ``x`` by central differences.

    Inputs:
    - f: maps an array shaped like x to an array shaped like dout (float64 throughout).
    - x: the point, any shape; it is not modified.
    - dout: the upstream gradient, shape of f(x).
    - h: step; 1e-6 gives about 1e-9 absolute accuracy on O(1) float64 functions.

    Returns:
    - grad: shape of x.
    """
    x = np.array(x, dtype=np.float64)
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        plus = np.sum(f(x) * dout)
        flat[i] = old - h
        minus = np.sum(f(x) * dout)
        flat[i] = old
        gflat[i] = (plus - minus) / (2 * h)
    return grad


def rel_error(a: Any, b: Any) -> float:
    """Largest elementwise relative error ``|a - b| / max(1e-8, |a| + |b|)`` (CS231n's)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(1e-8, np.abs(a) + np.abs(b))))
