# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``groupnorm`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m
from normedu.grading.mistakes.mistake import shortcut as _s

_GF, _GB = "groupnorm_forward", "groupnorm_backward"
_GN_STATS = (
    "mu = xg.mean(axis=-1, keepdims=True)\n    var = ((xg - mu) ** 2).mean(axis=-1, keepdims=True)"  # noqa: E501
)
_GN_VAR = "var = ((xg - mu) ** 2).mean(axis=-1, keepdims=True)"
_GN_CHECK = '    if C % G != 0:\n        raise ValueError(f"C = {C} channels cannot be split into G = {G} equal groups")\n'  # noqa: E501
_GN_DPARAMS = (
    "dgamma = (dout * x_hat.reshape(x.shape)).sum(axis=axes)\n    dbeta = dout.sum(axis=axes)"  # noqa: E501
)
_GN_G = "g = (dout * gamma.reshape(shape)).reshape(N, G, -1)"
MISTAKES = [
    _m("groupnorm", _GF, "normalizes over all channels (LayerNorm)", "all of its channels",
       ("xg = x.reshape(N, G, -1)", "xg = x.reshape(N, 1, -1)")),
    _m("groupnorm", _GF, "statistics over the batch too", "batch axis",
       (_GN_STATS, "mu = xg.mean(axis=(0, 2), keepdims=True)\n    var = ((xg - mu) ** 2).mean(axis=(0, 2), keepdims=True)")),  # noqa: E501
    _m("groupnorm", _GF, "normalizes per channel (InstanceNorm)", "InstanceNorm",
       ("xg = x.reshape(N, G, -1)", "xg = x.reshape(N, C, -1)")),
    _m("groupnorm", _GF, "unbiased variance", "M−1", (_GN_VAR, "var = xg.var(axis=-1, keepdims=True, ddof=1)")),
    _m("groupnorm", _GF, "wrong reshape order (groups of non-adjacent values)", "adjacent channels",
       ("xg = x.reshape(N, G, -1)", "xg = x.reshape(N, -1, G)"),
       (_GN_STATS, "mu = xg.mean(axis=1, keepdims=True)\n    var = ((xg - mu) ** 2).mean(axis=1, keepdims=True)")),  # noqa: E501
    _m("groupnorm", _GF, "eps outside the square root", "inside the square root",
       ("np.sqrt(var + eps)", "(np.sqrt(var) + eps)")),
    _m("groupnorm", _GF, "assumes (N, C, H, W) input", "any number of spatial axes",
       ("N, C = x.shape[:2]", "N, C, H, W = x.shape")),
    _m("groupnorm", _GF, "float32 input returned as float64", "float32 output",
       ("N, C = x.shape[:2]", "x = x.astype(np.float64)\n    N, C = x.shape[:2]")),
    _m("groupnorm", _GF, "no check that G divides C", "must raise a ValueError", (_GN_CHECK, "")),
    _m("groupnorm", _GF, "one-pass variance", "E[x²] − E[x]²",
       (_GN_VAR, "var = (xg ** 2).mean(axis=-1, keepdims=True) - mu ** 2")),
    _m("groupnorm", _GF, "forgot beta", "β is missing",
       ("* x_hat + beta.reshape(shape)", "* x_hat")),
    _m("groupnorm", _GB, "dgamma not summed over the spatial axes", "every spatial axis",
       (_GN_DPARAMS, "dgamma = (dout * x_hat.reshape(x.shape)).sum(axis=0)\n    dbeta = dout.sum(axis=0)")),  # noqa: E501
    _m("groupnorm", _GB, "backward missing the variance term", "variance depending on x",
       ("\n                 - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)", "")),
    _m("groupnorm", _GB, "backward missing the mean term", "mean depending on x",
       ("g - g.mean(axis=-1, keepdims=True)\n", "g\n")),
    _m("groupnorm", _GB, "statistics treated as constants", "as constants",
       ("(g - g.mean(axis=-1, keepdims=True)\n                 - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))", "g")),  # noqa: E501
    _m("groupnorm", _GB, "gamma applied after the group means", "before the group means",
       (_GN_G, "g = dout.reshape(N, G, -1)"),
       ("return dx.reshape(x.shape), dgamma", "return dx.reshape(x.shape) * gamma.reshape(shape), dgamma")),  # noqa: E501
    _m("groupnorm", _GB, "dx forgets gamma", "include γ", (_GN_G, "g = dout.reshape(N, G, -1)")),
    _m("groupnorm", _GB, "dgamma uses x instead of x_hat", "not dout·x",
       ("(dout * x_hat.reshape(x.shape))", "(dout * x)")),
    _m("groupnorm", _GB, "dgamma and dbeta averaged", "not means",
       (_GN_DPARAMS, "dgamma = (dout * x_hat.reshape(x.shape)).mean(axis=axes)\n    dbeta = dout.mean(axis=axes)")),  # noqa: E501
    _m("groupnorm", _GB, "backward with the unbiased variance", "unbiased variance",
       (_GN_VAR, "var = xg.var(axis=-1, keepdims=True, ddof=1)")),
    # Bugs seen in published CS231n-style code (issue 30).
    _m("groupnorm", _GF, "statistics per spatial position", "per spatial position",
       ("xg = x.reshape(N, G, -1)", "xg = x.reshape(N, G, C // G, -1)"),
       (_GN_STATS, "mu = xg.mean(axis=2, keepdims=True)\n    var = ((xg - mu) ** 2).mean(axis=2, keepdims=True)")),
    _m("groupnorm", _GB, "backward with statistics per spatial position", "per spatial position",
       ("xg = x.reshape(N, G, -1)", "xg = x.reshape(N, G, C // G, -1)"),
       (_GN_STATS, "mu = xg.mean(axis=2, keepdims=True)\n    var = ((xg - mu) ** 2).mean(axis=2, keepdims=True)"),
       ("(dout * gamma.reshape(shape)).reshape(N, G, -1)", "(dout * gamma.reshape(shape)).reshape(N, G, C // G, -1)"),
       ("g - g.mean(axis=-1, keepdims=True)\n                 - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)",
        "g - g.mean(axis=2, keepdims=True)\n                 - x_hat * (g * x_hat).mean(axis=2, keepdims=True)")),
    _m("groupnorm", _GB, "backward normalizes per channel (InstanceNorm)", "InstanceNorm's backward",
       ("xg = x.reshape(N, G, -1)", "xg = x.reshape(N, C, -1)"),
       ("(dout * gamma.reshape(shape)).reshape(N, G, -1)", "(dout * gamma.reshape(shape)).reshape(N, C, -1)")),
    _m("groupnorm", _GB, "backward crashes at G = 1 (squeeze)", "G=1",
       ("xg = x.reshape(N, G, -1)", "xg = x.reshape(N, G, -1).squeeze()")),
]  # fmt: skip

SHORTCUTS = [
    _s("groupnorm", "groupnorm_forward", "calls torch.nn.functional.group_norm", """import numpy as np
import torch
import torch.nn.functional as F


def groupnorm_forward(x, gamma, beta, G, eps=1e-5):
    t = F.group_norm(torch.from_numpy(x), G, torch.from_numpy(gamma), torch.from_numpy(beta), eps)
    return t.numpy()
"""),
    _s("groupnorm", "groupnorm_backward", "calls normedu's backward through an alias", """import numpy as np
from normedu.functional import group_norm_backward as helper


def groupnorm_backward(dout, x, gamma, G, eps=1e-5):
    return helper(dout, x, gamma, G, eps)
"""),
]  # fmt: skip
