# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``qknorm`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m
from normedu.grading.mistakes.mistake import shortcut as _s

_A = "qk_norm_attention"
_MS = "np.mean(z ** 2, axis=-1, keepdims=True)"
_RMS = "return z / np.sqrt(np.mean(z ** 2, axis=-1, keepdims=True) + eps) * g"
_FUTURE = "future = np.triu(np.ones((T, T), dtype=bool), k=1)"
_SHAPE_CHECK = """    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k and v must have one shape, got {q.shape}, {k.shape}, {v.shape}")
"""
MISTAKES = [
    _m("qknorm", _A, "RMS over T instead of Dh", "not over the T positions", (_MS, "np.mean(z ** 2, axis=-2, keepdims=True)")),
    _m("qknorm", _A, "L2 norm instead of RMS", "root MEAN square", (_MS, "np.sum(z ** 2, axis=-1, keepdims=True)")),
    _m("qknorm", _A, "forgot the 1/sqrt(Dh) scale", "divided by √Dh", (" / np.sqrt(Dh)\n", "\n")),
    _m("qknorm", _A, "eps outside the square root", "inside the square root", (_RMS, "return z / (np.sqrt(np.mean(z ** 2, axis=-1, keepdims=True)) + eps) * g")),
    _m("qknorm", _A, "gains before normalizing", "AFTER normalizing", (_RMS, "z = z * g\n        return z / np.sqrt(np.mean(z ** 2, axis=-1, keepdims=True) + eps)")),
    _m("qknorm", _A, "normalizes v too", "v is not normalized", ("(weights @ v)", "(weights @ rms_normalize(v, np.ones(Dh)))")),
    _m("qknorm", _A, "softmax over the queries", "runs over the keys", ("scores.max(axis=-1, keepdims=True)", "scores.max(axis=-2, keepdims=True)"), ("weights.sum(axis=-1, keepdims=True)", "weights.sum(axis=-2, keepdims=True)")),
    _m("qknorm", _A, "causal mask hides the diagonal", "hides the diagonal", ("k=1)", "k=0)")),
    _m("qknorm", _A, "causal mask applied after the softmax", "before the softmax", ("scores = np.where(future, -np.inf, scores)", "pass"), ("    return (weights @ v)", "    if causal:\n        weights = np.where(future, 0.0, weights)\n    return (weights @ v)")),
    _m("qknorm", _A, "causal mask with -1e9", "not a large negative constant", ("-np.inf", "-1e9")),
    _m("qknorm", _A, "naive softmax (no max subtracted)", "Subtract each row's max", ("    scores = scores - scores.max(axis=-1, keepdims=True)\n", "")),
    _m("qknorm", _A, "returns float64 for float32 input", "q's dtype", ("(weights @ v).astype(q.dtype, copy=False)", "weights @ v")),
    _m("qknorm", _A, "eps hard-coded", "eps argument", (_RMS, "return z / np.sqrt(np.mean(z ** 2, axis=-1, keepdims=True) + 1e-6) * g")),
    _m("qknorm", _A, "no check that q, k and v have one shape", "ValueError", (_SHAPE_CHECK, "")),
    _m("qknorm", _A, "no normalization of q and k", "not normalized", (_RMS, "return z * g")),
    _m("qknorm", _A, "standard deviation (np.var) instead of RMS", "not by the standard deviation", (_MS, "np.var(z, axis=-1, keepdims=True)")),
    _m("qknorm", _A, "causal mask off by one", "off by one", ("k=1)", "k=2)")),
    _m("qknorm", _A, "causal mask on the wrong triangle", "wrong triangle", (_FUTURE, "future = np.tril(np.ones((T, T), dtype=bool), k=-1)")),
    _m("qknorm", _A, "causal mask with -1e30", "not a large negative constant", ("-np.inf", "-1e30")),
    _m("qknorm", _A, "causal mask with -1e4", "not a large negative constant", ("-np.inf", "-1e4")),
    _m("qknorm", _A, "causal mask with finfo(float16).min", "not a large negative constant", ("-np.inf", "np.finfo(np.float16).min")),
    _m("qknorm", _A, "RMS over all heads' features (OLMo)", "not over all heads' features", (_MS, "np.mean(z ** 2, axis=(-3, -1), keepdims=True)")),
    _m("qknorm", _A, "LayerNorm instead of RMSNorm on q and k", "no mean subtracted", (_RMS, "c = z - z.mean(axis=-1, keepdims=True)\n        return c / np.sqrt(np.mean(c ** 2, axis=-1, keepdims=True) + eps) * g")),
    _m("qknorm", _A, "cosine attention with a temperature of 10", "times a temperature", (_RMS, "return z / np.sqrt(np.sum(z ** 2, axis=-1, keepdims=True) + eps) * g"), (" / np.sqrt(Dh)\n", " * 10.0\n")),
    _m("qknorm", _A, "mask multiplied after exp (max over the whole row)", "mask is applied after exp", ("scores = np.where(future, -np.inf, scores)", "pass"), ("    weights = np.exp(scores)\n", "    weights = np.exp(scores)\n    if causal:\n        weights = weights * ~future\n")),
    _m("qknorm", _A, "scipy.special.softmax", "write the stable softmax yourself", ("    scores = scores - scores.max(axis=-1, keepdims=True)\n    weights = np.exp(scores)\n    weights = weights / weights.sum(axis=-1, keepdims=True)\n", "    from scipy.special import softmax\n\n    weights = softmax(scores, axis=-1)\n")),
]  # fmt: skip

SHORTCUTS = [
    _s("qknorm", _A, "calls normedu.functional.qk_norm_attention", """import numpy as np
from normedu import functional


def qk_norm_attention(q, k, v, g_q, g_k, eps=1e-6, causal=False):
    if not q.shape == k.shape == v.shape or np.shape(g_q) != (q.shape[-1],):
        raise ValueError("shapes")
    return functional.qk_norm_attention(q, k, v, g_q, g_k, eps, causal)
"""),
]  # fmt: skip
