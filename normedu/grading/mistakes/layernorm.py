# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``layernorm`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m
from normedu.grading.mistakes.mistake import shortcut as _s

_LF, _LB = "layernorm_forward", "layernorm_backward"
_LN_STATS = (
    "mu = x.mean(axis=-1, keepdims=True)\n    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)"  # noqa: E501
)
MISTAKES = [
    _m("layernorm", _LF, "wrong axis (batch axis)", "axis 0",
       (_LN_STATS, "mu = x.mean(axis=0, keepdims=True)\n    var = ((x - mu) ** 2).mean(axis=0, keepdims=True)")),  # noqa: E501
    _m("layernorm", _LF, "axis 1 (wrong for 3-D input)", "B·T vectors",
       (_LN_STATS, "mu = x.mean(axis=1, keepdims=True)\n    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)")),  # noqa: E501
    _m("layernorm", _LF, "unbiased variance", "D−1",
       ("var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)", "var = x.var(axis=-1, keepdims=True, ddof=1)")),  # noqa: E501
    _m("layernorm", _LF, "eps outside the square root", "inside the square root",
       ("np.sqrt(var + eps)", "(np.sqrt(var) + eps)")),
    _m("layernorm", _LF, "eps ignored", "eps argument", ("np.sqrt(var + eps)", "np.sqrt(var)")),
    _m("layernorm", _LF, "forgot beta", "β is missing", ("gamma * x_hat + beta", "gamma * x_hat")),
    _m("layernorm", _LF, "forgot to center", "subtract the mean",
       ("x_hat = (x - mu) / np.sqrt", "x_hat = x / np.sqrt")),
    _m("layernorm", _LF, "one-pass variance", "E[x²] − E[x]²",
       ("var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)", "var = (x ** 2).mean(axis=-1, keepdims=True) - mu ** 2")),  # noqa: E501
    _m("layernorm", _LF, "missing keepdims", "keepdims",
       (_LN_STATS, "mu = x.mean(axis=-1)\n    var = ((x - mu) ** 2).mean(axis=-1)")),
    _m("layernorm", _LF, "statistics of the whole array", "whole array",
       (_LN_STATS, "mu = x.mean()\n    var = x.var()")),
    _m("layernorm", _LB, "dgamma summed over axis 0 only", "EVERY leading axis",
       ("(dout * x_hat).reshape(-1, d).sum(axis=0)", "(dout * x_hat).sum(axis=0)"),
       ("dout.reshape(-1, d).sum(axis=0)", "dout.sum(axis=0)")),
    _m("layernorm", _LB, "backward missing the variance term", "variance depending on x",
       ("\n                 - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)", "")),
    _m("layernorm", _LB, "backward missing the mean term", "mean depending on x",
       ("g - g.mean(axis=-1, keepdims=True)\n", "g\n")),
    _m("layernorm", _LB, "statistics treated as constants", "as constants",
       ("(g - g.mean(axis=-1, keepdims=True)\n                 - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))", "g")),  # noqa: E501
    _m("layernorm", _LB, "dx forgets gamma", "include γ", ("g = dout * gamma", "g = dout")),
    _m("layernorm", _LB, "dgamma uses x instead of x_hat", "not dout·x",
       ("(dout * x_hat).reshape(-1, d)", "(dout * x).reshape(-1, d)")),
    _m("layernorm", _LB, "means over the batch axis in dx", "axis 0",
       ("g.mean(axis=-1, keepdims=True)", "g.mean(axis=0, keepdims=True)"),
       ("(g * x_hat).mean(axis=-1, keepdims=True)", "(g * x_hat).mean(axis=0, keepdims=True)")),
    _m("layernorm", _LB, "dgamma and dbeta averaged", "not means",
       ("(dout * x_hat).reshape(-1, d).sum(axis=0)", "(dout * x_hat).reshape(-1, d).mean(axis=0)"),  # noqa: E501
       ("dout.reshape(-1, d).sum(axis=0)", "dout.reshape(-1, d).mean(axis=0)")),
    # Bugs seen in published CS231n-style code (issue 30).
    _m("layernorm", _LB, "dgamma and dbeta summed over the feature axis (shape (N,))", "summed over the wrong axis",
       ("dgamma = (dout * x_hat).reshape(-1, d).sum(axis=0)\n    dbeta = dout.reshape(-1, d).sum(axis=0)",
        "dgamma = (dout * x_hat).sum(axis=-1)\n    dbeta = dout.sum(axis=-1)")),
    _m("layernorm", _LB, "gamma applied after the row means", "before the row means",
       ("g = dout * gamma", "g = dout"), ("return dx, dgamma, dbeta", "return dx * gamma, dgamma, dbeta")),
    _m("layernorm", _LB, "variance term summed instead of averaged (a factor D)", "variance term",
       ("x_hat * (g * x_hat).mean(axis=-1, keepdims=True)", "x_hat * (g * x_hat).sum(axis=-1, keepdims=True)")),
    _m("layernorm", _LB, "eps missing in dgamma's x_hat", "ε included",
       ("dgamma = (dout * x_hat)", "dgamma = (dout * (x - mu) / np.sqrt(var))")),
]  # fmt: skip

SHORTCUTS = [
    _s("layernorm", "layernorm_forward", "calls torch.nn.functional.layer_norm", """import numpy as np


def layernorm_forward(x, gamma, beta, eps=1e-5):
    import torch
    t = torch.nn.functional.layer_norm(torch.from_numpy(x), x.shape[-1:], torch.from_numpy(gamma),
                                       torch.from_numpy(beta), eps)
    return t.numpy()
"""),
    _s("layernorm", "layernorm_forward", "reaches normedu by getattr (caught at run time)", """import numpy as np
import importlib


def layernorm_forward(x, gamma, beta, eps=1e-5):
    lib = importlib.import_module("normedu." + "functional")
    return getattr(lib, "layer" + "_norm")(x, gamma, beta, eps)
"""),
    _s("layernorm", "layernorm_backward", "calls normedu's backward from a helper", """import numpy as np
import normedu.functional


def _helper(*args):
    return normedu.functional.layer_norm_backward(*args)


def layernorm_backward(dout, x, gamma, eps=1e-5):
    return _helper(dout, x, gamma, eps)
"""),
]  # fmt: skip
