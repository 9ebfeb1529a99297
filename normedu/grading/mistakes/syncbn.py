# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``syncbn`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import Mistake
from normedu.grading.mistakes.mistake import edit as _m

_SF, _SB = "syncbn_forward", "syncbn_backward"
_SVAR = "var = all_reduce(((x - mu) ** 2).sum(axis=0)) / n\n    out"
MISTAKES = [
    _m("syncbn", _SF, "local statistics (no all-reduce)", "OWN batch statistics",
       ("total = all_reduce(np.concatenate([n_local, x.sum(axis=0)]))", "total = np.concatenate([n_local, x.sum(axis=0)])"),  # noqa: E501
       (_SVAR, "var = ((x - mu) ** 2).sum(axis=0) / n\n    out")),
    _m("syncbn", _SF, "mean of the processes' means", "COUNT and the SUMS",
       ("n, mu = total[0], total[1:] / total[0]", "n, mu = total[0], all_reduce(x.mean(axis=0)) / all_reduce(np.ones(1))[0]")),  # noqa: E501
    _m("syncbn", _SF, "average of the local variances", "not the average of the local variances",
       (_SVAR, "var = all_reduce(x.var(axis=0)) / all_reduce(np.ones(1))[0]\n    out")),
    _m("syncbn", _SF, "unbiased variance", "N−1",
       (_SVAR, "var = all_reduce(((x - mu) ** 2).sum(axis=0)) / (n - 1)\n    out")),
    _m("syncbn", _SF, "one-pass variance", "E[x²] − E[x]²",
       (_SVAR, "var = all_reduce((x ** 2).sum(axis=0)) / n - mu ** 2\n    out")),
    _m("syncbn", _SF, "eps outside the square root", "inside the square root",
       ("(x - mu) / np.sqrt(var + eps) + beta", "(x - mu) / (np.sqrt(var) + eps) + beta")),
    _m("syncbn", _SF, "forgot beta", "β is missing",
       ("(x - mu) / np.sqrt(var + eps) + beta", "(x - mu) / np.sqrt(var + eps)")),
    _m("syncbn", _SF, "all-reduce skipped on a one-sample process", "deadlock",
       (_SVAR, "sq = ((x - mu) ** 2).sum(axis=0)\n    if x.shape[0] > 1:  # one row has no spread\n        sq = all_reduce(sq)\n    var = sq / n\n    out")),  # noqa: E501
    _m("syncbn", _SB, "backward without all-reduce", "own sums of dout",
       ("sums = all_reduce(np.concatenate([dbeta, dgamma]))", "sums = np.concatenate([dbeta, dgamma])")),  # noqa: E501
    _m("syncbn", _SB, "backward divides by the local count", "GLOBAL count",
       ("g_sum / n - x_hat * gx_sum / n", "g_sum / x.shape[0] - x_hat * gx_sum / x.shape[0]")),
    _m("syncbn", _SB, "dgamma and dbeta all-reduced", "LOCAL sums",
       ("return dx, dgamma, dbeta", "return dx, sums[c:], sums[:c]")),
    _m("syncbn", _SB, "dx forgets gamma", "multiplied by γ",
       ("gamma * dout - g_sum / n - x_hat * gx_sum / n", "dout - sums[:c] / n - x_hat * sums[c:] / n")),  # noqa: E501
    _m("syncbn", _SB, "backward missing the variance term", "variance depending on x",
       (" - x_hat * gx_sum / n", "")),
    _m("syncbn", _SB, "backward missing the mean term", "mean depending on x",
       ("gamma * dout - g_sum / n - ", "gamma * dout - ")),
    _m("syncbn", _SB, "dgamma uses x instead of x_hat", "not dout·x",
       ("dgamma = (dout * x_hat).sum(axis=0)", "dgamma = (dout * x).sum(axis=0)")),
    Mistake("syncbn", _SF, "local BatchNorm from a library", "earns no points", replacement="""import numpy as np
import normedu.functional as nf


def syncbn_forward(x, gamma, beta, all_reduce, eps=1e-5):
    return nf.batch_norm(x, gamma=gamma, beta=beta, eps=eps)[0]
"""),
]  # fmt: skip

SHORTCUTS: list = []
