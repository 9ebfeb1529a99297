# ruff: noqa: E501  (catalog entries are one line each: an edit reads best unbroken)
"""Catalogued mistakes of the ``drift`` assignment (:mod:`normedu.grading.mistakes`)."""

from normedu.grading.mistakes.mistake import edit as _m

_DS, _DF, _DP = "activation_stats", "forward_stack", "drift_profile"
MISTAKES = [
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

SHORTCUTS: list = []
