# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``batchnorm`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m
from normedu.grading.mistakes.mistake import shortcut as _s

_BF, _BB = "batchnorm_forward", "batchnorm_backward"
_BN_VAR = "var = ((x - mu) ** 2).mean(axis=0)\n        out"
MISTAKES = [
    _m("batchnorm", _BF, "wrong axis", "axis 0",
       ("mu = x.mean(axis=0)\n        var = ((x - mu) ** 2).mean(axis=0)\n        out = gamma * (x - mu) / np.sqrt(var + eps)",  # noqa: E501
        "mu1 = x.mean(axis=1, keepdims=True)\n        mu = x.mean(axis=0)\n        var = ((x - mu) ** 2).mean(axis=0)\n        out = gamma * (x - mu1) / np.sqrt(x.var(axis=1, keepdims=True) + eps)")),  # noqa: E501
    _m("batchnorm", _BF, "unbiased variance to normalize", "N−1",
       (_BN_VAR, "var = x.var(axis=0, ddof=1)\n        out"),
       ("momentum * var * n / (n - 1)", "momentum * var")),
    _m("batchnorm", _BF, "eps outside the square root", "inside the square root",
       ("(x - mu) / np.sqrt(var + eps)", "(x - mu) / (np.sqrt(var) + eps)")),
    _m("batchnorm", _BF, "forgot beta", "β is missing",
       ("(x - mu) / np.sqrt(var + eps) + beta", "(x - mu) / np.sqrt(var + eps)")),
    _m("batchnorm", _BF, "eval mode uses batch statistics", "in eval mode",
       ("(x - running_mean) / np.sqrt(running_var + eps)",
        "(x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + eps)")),
    _m("batchnorm", _BF, "momentum on the old value", "NEW batch statistic",
       ("(1 - momentum) * running_mean + momentum * mu", "momentum * running_mean + (1 - momentum) * mu"),  # noqa: E501
       ("(1 - momentum) * running_var + momentum * var", "momentum * running_var + (1 - momentum) * var")),  # noqa: E501
    _m("batchnorm", _BF, "biased running variance", "unbiased batch variance",
       ("momentum * var * n / (n - 1)", "momentum * var")),
    _m("batchnorm", _BF, "running statistics updated in place", "in place",
       ("new_running_mean = (1 - momentum) * running_mean + momentum * mu",
        "running_mean *= 1 - momentum\n        running_mean += momentum * mu\n        new_running_mean = running_mean")),  # noqa: E501
    _m("batchnorm", _BF, "one-pass variance", "E[x²] − E[x]²",
       (_BN_VAR, "var = (x ** 2).mean(axis=0) - mu ** 2\n        out")),
    _m("batchnorm", _BF, "eps hard-coded", "eps argument",
       ("np.sqrt(var + eps)", "np.sqrt(var + 1e-5)")),
    _m("batchnorm", _BF, "eval mode updates the running statistics", "unchanged",
       ("new_running_mean, new_running_var = running_mean.copy(), running_var.copy()",
        "new_running_mean = 0.9 * running_mean + 0.1 * x.mean(axis=0)\n        new_running_var = 0.9 * running_var + 0.1 * x.var(axis=0, ddof=1)")),  # noqa: E501
    _m("batchnorm", _BB, "backward missing the variance term", "variance depending on x",
       (" - x_hat * (g * x_hat).mean(axis=0)", "")),
    _m("batchnorm", _BB, "backward missing the mean term", "mean depending on x",
       ("g - g.mean(axis=0) - ", "g - ")),
    _m("batchnorm", _BB, "statistics treated as constants", "as constants",
       ("(g - g.mean(axis=0) - x_hat * (g * x_hat).mean(axis=0))", "g")),
    _m("batchnorm", _BB, "dx forgets gamma", "multiplied by γ",
       ("g = dout * gamma", "g = dout")),
    _m("batchnorm", _BB, "dgamma uses x instead of x_hat", "not dout·x",
       ("(dout * x_hat).sum(axis=0)", "(dout * x).sum(axis=0)")),
    _m("batchnorm", _BB, "dgamma uses the centred x, not divided by sigma", "without the division by the standard deviation",
       ("(dout * x_hat).sum(axis=0)", "(dout * (x - mu)).sum(axis=0)")),
    _m("batchnorm", _BB, "dgamma and dbeta keep the summed axis", "keepdims=True",
       ("(dout * x_hat).sum(axis=0)", "(dout * x_hat).sum(axis=0, keepdims=True)"),
       ("dout.sum(axis=0)", "dout.sum(axis=0, keepdims=True)")),
    _m("batchnorm", _BB, "dgamma and dbeta not summed", "sums over the batch",
       ("(dout * x_hat).sum(axis=0)", "dout * x_hat"), ("dout.sum(axis=0)", "dout")),
    _m("batchnorm", _BB, "dgamma and dbeta averaged", "not means",
       ("(dout * x_hat).sum(axis=0)", "(dout * x_hat).mean(axis=0)"),
       ("dout.sum(axis=0)", "dout.mean(axis=0)")),
    # Bugs seen in published CS231n-style code (issue 30): eval mode, the running variance, ε.
    _m("batchnorm", _BF, "eval mode drops gamma and beta", "still needs γ and β",
       ("out = gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta", "out = (x - running_mean) / np.sqrt(running_var + eps)")),
    _m("batchnorm", _BF, "eval mode leaves eps out", "in eval mode ε is missing",
       ("np.sqrt(running_var + eps)", "np.sqrt(running_var)")),
    _m("batchnorm", _BF, "eval mode eps outside the square root", "inside the square root",
       ("np.sqrt(running_var + eps)", "(np.sqrt(running_var) + eps)")),
    _m("batchnorm", _BF, "running variance accumulates var + eps", "without ε",
       ("momentum * var * n / (n - 1)", "momentum * (var * n / (n - 1) + eps)")),
    _m("batchnorm", _BF, "eps missing in training mode", "eps argument",
       ("out = gamma * (x - mu) / np.sqrt(var + eps) + beta", "out = gamma * (x - mu) / np.sqrt(var) + beta")),
    _m("batchnorm", _BF, "eps fixed at 1e-6 in both modes", "eps argument",
       ("np.sqrt(var + eps)", "np.sqrt(var + 1e-6)"), ("np.sqrt(running_var + eps)", "np.sqrt(running_var + 1e-6)")),
    _m("batchnorm", _BB, "eps missing in dgamma's x_hat", "ε included",
       ("dgamma = (dout * x_hat).sum(axis=0)", "dgamma = (dout * (x - mu) / np.sqrt(var)).sum(axis=0)")),
    _m("batchnorm", _BB, "eps missing in dx's sigma", "depends on ε",
       ("dx = rstd * (", "dx = (1.0 / np.sqrt(var)) * (")),
    _m("batchnorm", _BB, "variance term summed instead of averaged (a factor N)", "variance term",
       ("x_hat * (g * x_hat).mean(axis=0)", "x_hat * (g * x_hat).sum(axis=0)")),
]  # fmt: skip

SHORTCUTS = [
    _s("batchnorm", "batchnorm_forward", "calls normedu.functional.batch_norm", """import numpy as np
from normedu import functional as F


def batchnorm_forward(x, gamma, beta, running_mean, running_var, training=True,
                      momentum=0.1, eps=1e-5):
    return F.batch_norm(x, gamma=gamma, beta=beta, running_mean=running_mean,
                        running_var=running_var, training=training, momentum=momentum, eps=eps)
"""),
    _s("batchnorm", "batchnorm_backward", "calls normedu's backward through an alias", """import numpy as np
from normedu.functional import batch_norm_backward as helper


def batchnorm_backward(dout, x, gamma, eps=1e-5):
    return helper(dout, x, gamma, eps)
"""),
]  # fmt: skip
