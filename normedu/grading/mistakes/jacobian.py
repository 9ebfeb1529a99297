# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``jacobian`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m
from normedu.grading.mistakes.mistake import shortcut as _s

_JJ = "layernorm_jacobian"
MISTAKES = [
    _m("jacobian", _JJ, "centering term missing", "centering term −𝟏𝟏ᵀ/D is missing",
       (" - np.ones((d, d)) / d", "")),
    _m("jacobian", _JJ, "centering term not divided by D", "centering term is 𝟏𝟏ᵀ/D",
       ("np.ones((d, d)) / d", "np.ones((d, d))")),
    _m("jacobian", _JJ, "variance term missing", "variance depending on x",
       (" - np.outer(x_hat, x_hat) / d", "")),
    _m("jacobian", _JJ, "outer product not divided by D", "divided by D",
       ("np.outer(x_hat, x_hat) / d", "np.outer(x_hat, x_hat)")),
    _m("jacobian", _JJ, "forgot the 1/sigma factor", "scaled by 1/σ", ("/ d) / sigma", "/ d)")),
    _m("jacobian", _JJ, "divides by the variance", "not by 1/σ²",
       ("/ d) / sigma", "/ d) / sigma ** 2")),
    _m("jacobian", _JJ, "eps outside the square root", "inside the square root",
       ("np.sqrt(((x - mu) ** 2).mean() + eps)", "np.sqrt(((x - mu) ** 2).mean()) + eps")),
    _m("jacobian", _JJ, "unbiased variance", "D−1",
       ("np.sqrt(((x - mu) ** 2).mean() + eps)", "np.sqrt(x.var(ddof=1) + eps)")),
    _m("jacobian", _JJ, "outer product of the raw x", "not the raw x",
       ("np.outer(x_hat, x_hat)", "np.outer(x, x)")),
    _m("jacobian", _JJ, "returns the forward output", "(D, D) matrix",
       ("return (np.eye(d)", "return x_hat\n    (np.eye(d)")),
]  # fmt: skip

SHORTCUTS = [
    _s("jacobian", "layernorm_jacobian", "calls normedu.functional.layer_norm_jacobian", """import numpy as np
import normedu.functional as nf


def layernorm_jacobian(x, eps=1e-5):
    return nf.layer_norm_jacobian(x, eps)
"""),
    _s("jacobian", "layernorm_jacobian", "torch.autograd.functional.jacobian", """import numpy as np


def layernorm_jacobian(x, eps=1e-5):
    import torch
    f = lambda t: (t - t.mean()) / torch.sqrt(t.var(unbiased=False) + eps)
    return torch.autograd.functional.jacobian(f, torch.from_numpy(x)).numpy()
"""),
]  # fmt: skip
