# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``rmsnorm`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m
from normedu.grading.mistakes.mistake import shortcut as _s

_RF, _RB, _RM = "rmsnorm_forward", "rmsnorm_backward", "rmsnorm_module"
_RMS = "rms = np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)"
_RMS_T = "torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)"
MISTAKES = [
    _m("rmsnorm", _RF, "subtracts the mean", "does not subtract the mean",
       (_RMS, "x = x - x.mean(axis=-1, keepdims=True)\n    " + _RMS)),
    _m("rmsnorm", _RF, "wrong axis (batch axis)", "axis 0",
       (_RMS, "rms = np.sqrt((x ** 2).mean(axis=0, keepdims=True) + eps)")),
    _m("rmsnorm", _RF, "axis 1 (wrong for 3-D input)", "B·T vectors",
       (_RMS, "rms = np.sqrt((x ** 2).mean(axis=1, keepdims=True) + eps)")),
    _m("rmsnorm", _RF, "L2 norm instead of RMS", "root MEAN square",
       (_RMS, "rms = np.sqrt((x ** 2).sum(axis=-1, keepdims=True) + eps)")),
    _m("rmsnorm", _RF, "eps outside the square root", "inside the square root",
       (_RMS, "rms = np.sqrt((x ** 2).mean(axis=-1, keepdims=True)) + eps")),
    _m("rmsnorm", _RF, "eps hard-coded", "eps argument",
       (_RMS, "rms = np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + 1e-6)")),
    _m("rmsnorm", _RF, "forgot gamma", "γ is missing", ("return gamma * (x / rms)", "return x / rms")),  # noqa: E501
    _m("rmsnorm", _RF, "divides by the mean square", "divided by the mean square",
       (_RMS, "rms = (x ** 2).mean(axis=-1, keepdims=True) + eps")),
    _m("rmsnorm", _RB, "backward treats rms as a constant", "RMS as a constant",
       ("(g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / rms", "g / rms")),
    _m("rmsnorm", _RB, "backward with LayerNorm's mean term", "belongs to LayerNorm",
       ("(g - x_hat", "(g - g.mean(axis=-1, keepdims=True) - x_hat")),
    _m("rmsnorm", _RB, "dx forgets gamma", "include γ", ("g = dout * gamma", "g = dout")),
    _m("rmsnorm", _RB, "dgamma uses x instead of x_hat", "not dout·x",
       ("(dout * x_hat).reshape(-1, d)", "(dout * x).reshape(-1, d)")),
    _m("rmsnorm", _RB, "dgamma summed over axis 0 only", "EVERY leading axis",
       ("(dout * x_hat).reshape(-1, d).sum(axis=0)", "(dout * x_hat).sum(axis=0)")),
    _m("rmsnorm", _RB, "dgamma averaged", "not a mean",
       ("(dout * x_hat).reshape(-1, d).sum(axis=0)", "(dout * x_hat).reshape(-1, d).mean(axis=0)")),  # noqa: E501
    _m("rmsnorm", _RM, "weight is a plain tensor", "nn.Parameter",
       ("self.weight = nn.Parameter(torch.ones(d))", "self.weight = torch.ones(d)")),
    _m("rmsnorm", _RM, "weight initialized randomly", "start at ones",
       ("nn.Parameter(torch.ones(d))", "nn.Parameter(torch.randn(d))")),
    _m("rmsnorm", _RM, "module subtracts the mean", "does not subtract the mean",
       ("return self.weight * x * " + _RMS_T,
        "x = x - x.mean(dim=-1, keepdim=True)\n        return self.weight * x * " + _RMS_T)),
    _m("rmsnorm", _RM, "module ignores eps", "eps argument",
       ("+ self.eps)", "+ 1e-5)")),
    _m("rmsnorm", _RM, "module uses the L2 norm", "root MEAN square",
       ("x * " + _RMS_T, "x / x.norm(dim=-1, keepdim=True)")),
    _m("rmsnorm", _RM, "module forgets the weight", "γ is missing",
       ("return self.weight * x * ", "return x * ")),
    _m("rmsnorm", _RM, "module eps outside the square root", "inside the square root",
       (_RMS_T, "1 / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + self.eps)")),
    # Bugs seen in published RMSNorm code (issue 30).
    _m("rmsnorm", _RB, "projection term not divided by the RMS", "not divided by the RMS",
       ("dx = (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / rms", "dx = g / rms - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)")),
    _m("rmsnorm", _RB, "backward statistic over the batch axis", "axis 0",
       ("rms = np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)\n    x_hat", "rms = np.sqrt((x ** 2).mean(axis=0, keepdims=True) + eps)\n    x_hat"),
       ("(g * x_hat).mean(axis=-1, keepdims=True)", "(g * x_hat).mean(axis=0, keepdims=True)")),
]  # fmt: skip

SHORTCUTS = [
    _s("rmsnorm", "rmsnorm_forward", "calls normedu.functional.rms_norm", """import numpy as np
from normedu.functional import rms_norm


def rmsnorm_forward(x, gamma, eps=1e-5):
    return rms_norm(x, gamma, eps)
"""),
    _s("rmsnorm", "rmsnorm_module", "module calls F.rms_norm", """import torch
from torch import nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
"""),
    _s("rmsnorm", "rmsnorm_module", "module subclasses nn.RMSNorm", """import torch
from torch import nn


class RMSNorm(nn.RMSNorm):
    def __init__(self, d, eps=1e-5):
        super().__init__(d, eps=eps)
"""),
]  # fmt: skip
