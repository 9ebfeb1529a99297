# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""The catalog of realistic wrong implementations, one :class:`Mistake` each.

A mistake is the instructor's solution of one answer cell with a small edit, the way a student's
almost-right code looks: the wrong axis, ``ddof=1``, eps outside the square root, a dropped term.
(Shortcuts that call a library replace the whole cell.) Each entry names the phrase that the
message of a failing check must contain.

``tests/test_grading.py`` feeds every entry through the checks directly, and
``tests/test_exercises.py`` submits each one as its own notebook to nbgrader and checks that it
scores strictly below full marks. The diagnosis in the check modules is written independently
of these edits: it recomputes each mistake's output from formulas (:mod:`.diagnose`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mistake", "CATALOG", "SHORTCUTS", "for_assignment"]


@dataclass(frozen=True)
class Mistake:
    """One wrong answer cell.

    - assignment: the nbgrader assignment, e.g. ``"batchnorm"``.
    - cell: ``grade_id`` of the answer cell it replaces, e.g. ``"batchnorm_forward"``.
    - name: short name of the mistake.
    - phrase: text the message of a failing check must contain.
    - edits: ``(old, new)`` replacements applied to the solution's cell source; each ``old``
      must occur exactly once.
    - replacement: a whole new cell source instead of edits (for shortcuts).
    """

    assignment: str
    cell: str
    name: str
    phrase: str
    edits: tuple[tuple[str, str], ...] = ()
    replacement: str | None = None

    def source(self, solution_source: str) -> str:
        """The wrong cell: ``solution_source`` (the solution's answer cell) with the edits."""
        if self.replacement is not None:
            return self.replacement
        src = solution_source
        for old, new in self.edits:
            count = src.count(old)
            if count != 1:
                raise ValueError(
                    f"mistake {self.assignment}/{self.name!r}: {old!r} occurs {count} times in "
                    f"the solution of cell {self.cell!r}, expected exactly once"
                )
            src = src.replace(old, new)
        return src


def _m(assignment: str, cell: str, name: str, phrase: str, *edits: tuple[str, str]) -> Mistake:
    return Mistake(assignment, cell, name, phrase, tuple(edits))


# --------------------------------------------------------------------------- batchnorm
_BF, _BB = "batchnorm_forward", "batchnorm_backward"
_BN_VAR = "var = ((x - mu) ** 2).mean(axis=0)\n        out"
BATCHNORM = [
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
    _m("batchnorm", _BB, "dgamma and dbeta not summed", "sums over the batch",
       ("(dout * x_hat).sum(axis=0)", "dout * x_hat"), ("dout.sum(axis=0)", "dout")),
    _m("batchnorm", _BB, "dgamma and dbeta averaged", "not means",
       ("(dout * x_hat).sum(axis=0)", "(dout * x_hat).mean(axis=0)"),
       ("dout.sum(axis=0)", "dout.mean(axis=0)")),
]  # fmt: skip

# --------------------------------------------------------------------------- layernorm
_LF, _LB = "layernorm_forward", "layernorm_backward"
_LN_STATS = (
    "mu = x.mean(axis=-1, keepdims=True)\n    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)"  # noqa: E501
)
LAYERNORM = [
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
]  # fmt: skip

# --------------------------------------------------------------------------- rmsnorm
_RF, _RB, _RM = "rmsnorm_forward", "rmsnorm_backward", "rmsnorm_module"
_RMS = "rms = np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)"
_RMS_T = "torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)"
RMSNORM = [
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
]  # fmt: skip

# --------------------------------------------------------------------------- jacobian
_JJ = "layernorm_jacobian"
JACOBIAN = [
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

# --------------------------------------------------------------------------- drift
_DS, _DF, _DP = "activation_stats", "forward_stack", "drift_profile"
DRIFT = [
    _m("drift", _DS, "unbiased std", "ddof=0", ("float(h.std())", "float(h.std(ddof=1))")),
    _m("drift", _DS, "mean of |h|", "not the mean of |h|", ("float(h.mean())", "float(np.abs(h).mean())")),  # noqa: E501
    _m("drift", _DS, "saturation on one side only", "either side", ("np.abs(h) > threshold", "h > threshold")),  # noqa: E501
    _m("drift", _DS, "threshold hard-coded", "threshold argument", ("np.abs(h) > threshold)", "np.abs(h) > 0.97)")),
    _m("drift", _DS, "statistics per feature", "ALL entries",
       ("float(h.mean()), float(h.std())", "h.mean(axis=0), h.std(axis=0)")),
    _m("drift", _DS, "std without centering", "subtracts the mean",
       ("float(h.std())", "float(np.sqrt((h ** 2).mean()))")),
    _m("drift", _DS, ">= instead of >", "strictly greater", ("np.abs(h) > threshold)", "np.abs(h) >= threshold)")),
    _m("drift", _DF, "transposed weights", "not W @ h", ("activation(h @ w)", "activation(h @ w.T)")),  # noqa: E501
    _m("drift", _DF, "input in the list", "do not include the input", ("outputs, h = [], x", "outputs, h = [x], x")),  # noqa: E501
    _m("drift", _DF, "stores pre-activations", "not the pre-activations",
       ("h = activation(h @ w)\n        outputs.append(h)", "z = h @ w\n        h = activation(z)\n        outputs.append(z)")),  # noqa: E501
    _m("drift", _DF, "activation argument ignored", "activation argument", ("activation(h @ w)", "np.tanh(h @ w)")),  # noqa: E501
    _m("drift", _DF, "nonlinearity before the weights", "weights first", ("activation(h @ w)", "activation(h) @ w")),  # noqa: E501
    _m("drift", _DF, "every layer fed x", "previous layer's output", ("activation(h @ w)", "activation(x @ w)")),  # noqa: E501
    _m("drift", _DF, "returns only the last layer", "not only the last one", ("return outputs", "return h")),  # noqa: E501
    _m("drift", _DP, "profile transposed", "in this order",
       ("return np.array([activation_stats(h) for h in forward_stack(x, weights, activation)])",
        "return np.array([activation_stats(h)[::-1] for h in forward_stack(x, weights, activation)])")),  # noqa: E501
    _m("drift", "answers", "wrong answer to question 1", "gain-0.5 profile", ('answer_q1 = "b"', 'answer_q1 = "c"')),  # noqa: E501
    _m("drift", "answers", "wrong answer to question 3", "read the std and the saturated", ('answer_q3 = "c"', 'answer_q3 = "d"')),  # noqa: E501
]  # fmt: skip

# --------------------------------------------------------------------------- prepost
_PP, _PO, _PG = "pre_norm_residual", "post_norm_residual", "block_input_grad_norms"
PREPOST = [
    _m("prepost", _PP, "pre-norm block computes post-norm", "computed the Post-Norm block", ("return x + sublayer(norm(x))", "return norm(x + sublayer(x))")),
    _m("prepost", _PP, "pre-norm without the residual", "residual connection is missing", ("return x + sublayer(norm(x))", "return sublayer(norm(x))")),
    _m("prepost", _PP, "residual carries norm(x)", "raw x", ("return x + sublayer(norm(x))", "h = norm(x)\n    return h + sublayer(h)")),
    _m("prepost", _PP, "pre-norm normalizes twice", "apply the norm once", ("return x + sublayer(norm(x))", "return norm(x + sublayer(norm(x)))")),
    _m("prepost", _PP, "pre-norm forgets the norm", "the norm is missing", ("return x + sublayer(norm(x))", "return x + sublayer(x)")),
    _m("prepost", _PO, "post-norm block computes pre-norm", "computed the Pre-Norm block", ("return norm(x + sublayer(x))", "return x + sublayer(norm(x))")),
    _m("prepost", _PO, "post-norm without the residual", "residual connection is missing", ("return norm(x + sublayer(x))", "return norm(sublayer(x))")),
    _m("prepost", _PO, "post-norm normalizes the sublayer input too", "sublayer sees the raw x", ("return norm(x + sublayer(x))", "return norm(x + sublayer(norm(x)))")),
    _m("prepost", _PO, "post-norm normalizes x only", "not x alone", ("return norm(x + sublayer(x))", "return norm(x) + sublayer(x)")),
    _m("prepost", _PO, "post-norm forgets the norm", "the norm is missing", ("return norm(x + sublayer(x))", "return x + sublayer(x)")),
    _m("prepost", _PG, "gradient norms reversed", "block order", ("return [g.norm().item() for g in grads]", "return [g.norm().item() for g in grads][::-1]")),
    _m("prepost", _PG, "squared norms", "not its square", ("g.norm().item() for g", "g.norm().item() ** 2 for g")),
    _m("prepost", _PG, "upstream gradient ignored", "upstream gradient", ("torch.autograd.grad(h, inputs, upstream)", "torch.autograd.grad(h.sum(), inputs)")),
    _m("prepost", _PG, "loss is the mean of the output", "upstream gradient", ("torch.autograd.grad(h, inputs, upstream)", "torch.autograd.grad(h.mean(), inputs)")),
    _m("prepost", _PG, "gradients at the block outputs", "INPUT", ("inputs.append(h)\n        h = block(h)", "h = block(h)\n        inputs.append(h)")),
    _m("prepost", "answers", "wrong answer to question 1", "g_pre[0]", ('answer_q1 = "a"', 'answer_q1 = "c"')),
]  # fmt: skip


# --------------------------------------------------------------------------- groupnorm
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
GROUPNORM = [
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
]  # fmt: skip


# --------------------------------------------------------------------------- shortcuts
def _s(assignment: str, cell: str, name: str, source: str) -> Mistake:
    return Mistake(assignment, cell, name, "earns no points", replacement=source)


SHORTCUTS: list[Mistake] = [
    _s(
        "batchnorm",
        "batchnorm_forward",
        "calls normedu.functional.batch_norm",
        """import numpy as np
from normedu import functional as F


def batchnorm_forward(x, gamma, beta, running_mean, running_var, training=True,
                      momentum=0.1, eps=1e-5):
    return F.batch_norm(x, gamma=gamma, beta=beta, running_mean=running_mean,
                        running_var=running_var, training=training, momentum=momentum, eps=eps)
""",
    ),
    _s(
        "batchnorm",
        "batchnorm_backward",
        "calls normedu's backward through an alias",
        """import numpy as np
from normedu.functional import batch_norm_backward as helper


def batchnorm_backward(dout, x, gamma, eps=1e-5):
    return helper(dout, x, gamma, eps)
""",
    ),
    _s(
        "layernorm",
        "layernorm_forward",
        "calls torch.nn.functional.layer_norm",
        """import numpy as np


def layernorm_forward(x, gamma, beta, eps=1e-5):
    import torch
    t = torch.nn.functional.layer_norm(torch.from_numpy(x), x.shape[-1:], torch.from_numpy(gamma),
                                       torch.from_numpy(beta), eps)
    return t.numpy()
""",
    ),
    _s(
        "layernorm",
        "layernorm_forward",
        "reaches normedu by getattr (caught at run time)",
        """import numpy as np
import importlib


def layernorm_forward(x, gamma, beta, eps=1e-5):
    lib = importlib.import_module("normedu." + "functional")
    return getattr(lib, "layer" + "_norm")(x, gamma, beta, eps)
""",
    ),
    _s(
        "layernorm",
        "layernorm_backward",
        "calls normedu's backward from a helper",
        """import numpy as np
import normedu.functional


def _helper(*args):
    return normedu.functional.layer_norm_backward(*args)


def layernorm_backward(dout, x, gamma, eps=1e-5):
    return _helper(dout, x, gamma, eps)
""",
    ),
    _s(
        "rmsnorm",
        "rmsnorm_forward",
        "calls normedu.functional.rms_norm",
        """import numpy as np
from normedu.functional import rms_norm


def rmsnorm_forward(x, gamma, eps=1e-5):
    return rms_norm(x, gamma, eps)
""",
    ),
    _s(
        "rmsnorm",
        "rmsnorm_module",
        "module calls F.rms_norm",
        """import torch
from torch import nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
""",
    ),
    _s(
        "rmsnorm",
        "rmsnorm_module",
        "module subclasses nn.RMSNorm",
        """import torch
from torch import nn


class RMSNorm(nn.RMSNorm):
    def __init__(self, d, eps=1e-5):
        super().__init__(d, eps=eps)
""",
    ),
    _s(
        "jacobian",
        "layernorm_jacobian",
        "calls normedu.functional.layer_norm_jacobian",
        """import numpy as np
import normedu.functional as nf


def layernorm_jacobian(x, eps=1e-5):
    return nf.layer_norm_jacobian(x, eps)
""",
    ),
    _s(
        "jacobian",
        "layernorm_jacobian",
        "torch.autograd.functional.jacobian",
        """import numpy as np


def layernorm_jacobian(x, eps=1e-5):
    import torch
    f = lambda t: (t - t.mean()) / torch.sqrt(t.var(unbiased=False) + eps)
    return torch.autograd.functional.jacobian(f, torch.from_numpy(x)).numpy()
""",
    ),
]

SHORTCUTS += [
    _s(
        "groupnorm",
        "groupnorm_forward",
        "calls torch.nn.functional.group_norm",
        """import numpy as np
import torch
import torch.nn.functional as F


def groupnorm_forward(x, gamma, beta, G, eps=1e-5):
    t = F.group_norm(torch.from_numpy(x), G, torch.from_numpy(gamma), torch.from_numpy(beta), eps)
    return t.numpy()
""",
    ),
    _s(
        "groupnorm",
        "groupnorm_backward",
        "calls normedu's backward through an alias",
        """import numpy as np
from normedu.functional import group_norm_backward as helper


def groupnorm_backward(dout, x, gamma, G, eps=1e-5):
    return helper(dout, x, gamma, G, eps)
""",
    ),
]


_SF, _SB = "syncbn_forward", "syncbn_backward"
_SVAR = "var = all_reduce(((x - mu) ** 2).sum(axis=0)) / n\n    out"
SYNCBN = [
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

CATALOG: list[Mistake] = [
    *BATCHNORM,
    *LAYERNORM,
    *RMSNORM,
    *JACOBIAN,
    *DRIFT,
    *PREPOST,
    *GROUPNORM,
    *SYNCBN,
]


def for_assignment(assignment: str, shortcuts: bool = True) -> list[Mistake]:
    """The catalog entries of one assignment (with the shortcut attempts unless told not to)."""
    pool = CATALOG + (SHORTCUTS if shortcuts else [])
    return [m for m in pool if m.assignment == assignment]
