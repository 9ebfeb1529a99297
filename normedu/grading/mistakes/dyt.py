# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``dyt`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m
from normedu.grading.mistakes.mistake import shortcut as _s

_F, _B = "dyt_forward", "dyt_backward"
_OUT = "out = gamma * np.tanh(alpha * x) + beta"
_CHECK = """    if np.ndim(alpha) != 0:
        raise ValueError(f"alpha must be one scalar, got an array of shape {np.shape(alpha)}")
"""
MISTAKES = [
    _m("dyt", _F, "alpha outside the tanh", "inside the tanh", (_OUT, "out = gamma * alpha * np.tanh(x) + beta")),
    _m("dyt", _F, "divides by alpha", "not tanh(x/α)", (_OUT, "out = gamma * np.tanh(x / alpha) + beta")),
    _m("dyt", _F, "gamma inside the tanh", "not tanh(α·γ·x)", (_OUT, "out = np.tanh(alpha * gamma * x) + beta")),
    _m("dyt", _F, "beta inside the tanh", "β is added after the tanh", (_OUT, "out = gamma * np.tanh(alpha * x + beta)")),
    _m("dyt", _F, "forgot beta", "β is missing", (_OUT, "out = gamma * np.tanh(alpha * x)")),
    _m("dyt", _F, "forgot gamma", "γ is missing", (_OUT, "out = np.tanh(alpha * x) + beta")),
    _m("dyt", _F, "gamma and beta swapped", "swapped", (_OUT, "out = beta * np.tanh(alpha * x) + gamma")),
    _m("dyt", _F, "returns float64 for float32 input", "x's dtype", ("return out.astype(x.dtype, copy=False)", "return out.astype(np.float64)")),
    _m("dyt", _F, "no check that alpha is a scalar", "ValueError", (_CHECK, "")),
    _m("dyt", _B, "1 - tanh instead of 1 - tanh squared", "not 1 − tanh(u)", ("du = dt * (1 - t ** 2)", "du = dt * (1 - t)")),
    _m("dyt", _B, "dalpha forgets gamma", "missing γ", ("dalpha = np.sum(du * x)", "dalpha = np.sum(dout * (1 - t ** 2) * x)")),
    _m("dyt", _B, "dx forgets gamma", "missing γ", ("dx = alpha * du", "dx = alpha * dout * (1 - t ** 2)")),
    _m("dyt", _B, "dalpha without the factor x", "missing the factor x", ("dalpha = np.sum(du * x)", "dalpha = np.sum(du)")),
    _m("dyt", _B, "dx without the factor alpha", "∂u/∂x = α", ("dx = alpha * du", "dx = du")),
    _m("dyt", _B, "dalpha summed per feature only", "one number", ("dalpha = np.sum(du * x)", "dalpha = (du * x).sum(axis=lead)")),
    _m("dyt", _B, "alpha treated as a vector (one per row)", "one number", ("dalpha = np.sum(du * x)", "dalpha = np.sum(du * x, axis=-1)")),
    _m("dyt", _B, "dgamma summed over axis 0 only", "EVERY leading axis", ("dgamma = (dout * t).sum(axis=lead)", "dgamma = (dout * t).sum(axis=0)")),
    _m("dyt", _B, "dgamma uses x instead of tanh", "not dout·x", ("dgamma = (dout * t).sum(axis=lead)", "dgamma = (dout * x).sum(axis=lead)")),
    _m("dyt", _B, "dbeta multiplied by gamma", "not Σ dout·γ", ("dbeta = dout.sum(axis=lead)", "dbeta = (dout * gamma).sum(axis=lead)")),
    _m("dyt", _B, "dbeta averaged", "not means", ("dbeta = dout.sum(axis=lead)", "dbeta = dout.mean(axis=lead)")),
    _m("dyt", _B, "gradients returned in float64", "x's dtype", ("dtype = x.dtype", "dtype = np.dtype(np.float64)")),
    _m("dyt", _F, "tanh from exp (overflows)", "tanh computed from exp overflows", (_OUT, "e, f = np.exp(alpha * x), np.exp(-alpha * x)\n    out = gamma * (e - f) / (e + f) + beta")),
    _m("dyt", _F, "hard tanh (clip)", "not a hard tanh", (_OUT, "out = gamma * np.clip(alpha * x, -1, 1) + beta")),
    _m("dyt", _F, "computes in float32", "float32 precision only", (_OUT, "out = gamma.astype(np.float32) * np.tanh(np.float32(alpha) * x.astype(np.float32)) + beta.astype(np.float32)")),
    _m("dyt", _B, "dalpha returned last", "in the wrong order", ("return dx.astype(dtype), dtype.type(dalpha), dgamma.astype(dtype), dbeta.astype(dtype)", "return dx.astype(dtype), dgamma.astype(dtype), dbeta.astype(dtype), dtype.type(dalpha)")),
    _m("dyt", _B, "dalpha as the sum of dx", "not Σ dx", ("dalpha = np.sum(du * x)", "dalpha = np.sum(dx)")),
    _m("dyt", _B, "(1 - t) squared instead of 1 - t squared", "not (1 − t)²", ("du = dt * (1 - t ** 2)", "du = dt * (1 - t) ** 2")),
    _m("dyt", _B, "backward of a hard tanh", "DyT's tanh is smooth", ("t = np.tanh(u)", "t = np.clip(u, -1, 1)"), ("du = dt * (1 - t ** 2)", "du = dt * (np.abs(u) < 1)")),
    _m("dyt", _F, "output rounded to 4 decimals", "rounded to 4 decimals", ("return out.astype(x.dtype, copy=False)", "return np.round(out, 4).astype(x.dtype, copy=False)")),
]  # fmt: skip

SHORTCUTS = [
    _s("dyt", _F, "calls normedu.functional.dyt", """import numpy as np
from normedu.functional import dyt


def dyt_forward(x, alpha, gamma, beta):
    if np.ndim(alpha) != 0:
        raise ValueError("alpha must be a scalar")
    return dyt(x, alpha, gamma, beta)
"""),
    _s("dyt", _B, "calls normedu.functional.dyt_backward", """import normedu.functional as F


def dyt_backward(dout, x, alpha, gamma):
    return F.dyt_backward(dout, x, alpha, gamma)
"""),
]  # fmt: skip
