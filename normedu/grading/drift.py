"""Checks for the ``drift`` assignment (numpy): activation statistics of a deep tanh stack.

Student code:
- ``activation_stats(h, threshold=0.97) -> (mean, std, saturated)``: the mean and the biased
  standard deviation over all entries of ``h`` (any shape), and the fraction of entries with
  ``|h| > threshold`` (a tanh unit there is saturated: its gradient ``1 - h**2`` is tiny).
- ``forward_stack(x, weights, activation=np.tanh) -> list``: the L layer outputs
  ``h_l = activation(h_{l-1} @ W_l)``, ``h_0 = x`` of shape (N, D_0), ``W_l`` of shape
  (D_{l-1}, D_l); the input itself is not in the list.
- ``drift_profile(x, weights, activation=np.tanh) -> array (L, 3)``: row l holds
  ``activation_stats`` of layer l's output.
- ``answer_q1``, ``answer_q2``, ``answer_q3``: letters, checked by hash.

The experiment the questions are about is :func:`experiment` (also used by the tests to prove
that the stored answer keys agree with the measurement).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from normedu.grading.answers import check_answer as _check_answer
from normedu.grading.answers import check_format
from normedu.grading.compare import (
    GradingError,
    assert_array,
    assert_close,
    call,
    unchanged,
)
from normedu.grading.diagnose import Hypothesis, check_against, diagnose
from normedu.grading.drift_inputs import GAINS, make_weights, plot_profiles
from normedu.grading.guard import assert_no_shortcut
from normedu.grading.kernel_side import relu

__all__ = [
    "GAINS",
    "make_weights",
    "experiment",
    "measured_answers",
    "plot_profiles",
    "check_stats",
    "check_stats_on",
    "check_forward_stack",
    "check_stack_on",
    "relu",
    "check_drift_profile",
    "check_answers_format",
    "check_answer",
]


DDOF = "the standard deviation should be the biased one over all entries (np.std's default, ddof=0), not ddof=1"  # noqa: E501
ABS_MEAN = (
    "the mean is the plain mean of h (positive and negative values cancel), not the mean of |h|"  # noqa: E501
)
NO_ABS = "a unit is saturated when |h| > threshold, on either side: use np.abs(h) > threshold"
PER_FEATURE = "return three numbers (floats) computed over ALL entries of h, not one value per feature: use h.mean(), h.std()"  # noqa: E501
THRESHOLD = "use the threshold argument you were given (the tests call it with other values)"
RMS = "the standard deviation subtracts the mean: sqrt(mean((h − mean(h))²)), not sqrt(mean(h²))"
GE = "count |h| > threshold (strictly greater), not >="
ORDER = "return (mean, std, saturated) in this order"
TRANSPOSED = "each layer computes h @ W with W of shape (D_in, D_out), not W @ h or h @ W.T"
WITH_INPUT = "the list holds the L layer outputs only; do not include the input x"
PRE_ACT = "store the activations (after the nonlinearity), not the pre-activations h @ W"
ACT_ARG = "use the activation argument you were given (the tests pass other functions than np.tanh)"  # noqa: E501
ACT_FIRST = "apply the weights first, then the nonlinearity: h_l = activation(h_{l−1} @ W_l)"
NOT_CHAINED = "each layer takes the previous layer's output as input: h_l = activation(h_{l−1} @ W_l), not activation(x @ W_l)"  # noqa: E501
LAST_ONLY = "return the list of all L layer outputs, not only the last one"


def _stats(h: np.ndarray, threshold: float = 0.97) -> tuple[float, float, float]:
    return float(h.mean()), float(h.std()), float((np.abs(h) > threshold).mean())


def _stack(x, weights, activation=np.tanh) -> list[np.ndarray]:
    out, h = [], x
    for w in weights:
        h = activation(h @ w)
        out.append(h)
    return out


@lru_cache(maxsize=1)
def experiment(depth: int = 20, width: int = 128, n: int = 256, seed: int = 0) -> dict:
    """Reference run of the notebook's experiment: {gain: (depth, 3) array of statistics}."""
    x = np.random.default_rng(seed + 1).standard_normal((n, width))
    return {
        g: np.array([_stats(h) for h in _stack(x, make_weights(depth, width, g, seed))])
        for g in GAINS
    }


def measured_answers() -> dict[str, str]:
    """The answers that follow from :func:`experiment` (the keys must agree with them)."""
    res = experiment()
    small = res[0.5][:, 1]
    q1 = "b" if small[-1] < small[0] / 1000 else ("a" if small[-1] > small[0] else "c")
    sat = res[3.0][-1, 2]
    q2 = "a" if sat < 0.05 else ("b" if sat < 0.2 else "c")
    alive = [g for g in GAINS if res[g][-1, 1] > 0.5 and res[g][-1, 2] < 0.1]
    q3 = "abcd"[GAINS.index(alive[0])] if len(alive) == 1 else "none"
    return {"drift_q1": q1, "drift_q2": q2, "drift_q3": q3}


# --------------------------------------------------------------------------- activation_stats


def _stats_result(f: Callable, h: np.ndarray, threshold: float | None) -> tuple:
    arg = h.copy()
    res = call(f, arg) if threshold is None else call(f, arg, threshold=threshold)
    unchanged(h, arg, "h", f.__name__)
    if not isinstance(res, tuple) or len(res) != 3:
        raise GradingError(f"{f.__name__} must return a tuple (mean, std, saturated)")
    if any(np.ndim(v) != 0 for v in res):
        raise GradingError(PER_FEATURE)
    return tuple(float(v) for v in res)


def _stats_hypotheses(h, t) -> list[Hypothesis]:
    m, s, sat = h.mean(), h.std(), (np.abs(h) > t).mean()
    return [
        (DDOF, lambda: (m, h.std(ddof=1), sat)),
        (ABS_MEAN, lambda: (np.abs(h).mean(), s, sat)),
        (NO_ABS, lambda: (m, s, (h > t).mean())),
        (THRESHOLD, lambda: (m, s, (np.abs(h) > 0.97).mean())),
        (RMS, lambda: (m, np.sqrt((h * h).mean()), sat)),
        (GE, lambda: (m, s, (np.abs(h) >= t).mean())),
        (ORDER, lambda: (s, m, sat)),
    ]


def _check_stats(f, h, threshold):
    res = _stats_result(f, h, threshold)
    t = 0.97 if threshold is None else threshold
    check_against(
        res,
        _stats(h, t),
        f"activation_stats for h of shape {h.shape}, threshold {t}",
        _stats_hypotheses(h, t),
    )


def check_stats(f: Callable) -> None:
    """Values on a small tanh activation, with the default threshold and with 0.5."""
    assert_no_shortcut(f)
    rng = np.random.default_rng(40)
    h = np.tanh(rng.standard_normal((4, 5)) * 2)
    h[0, 0], h[1, 1] = 0.97, -0.97
    _check_stats(f, h, None)
    _check_stats(f, h, 0.5)


def check_stats_on(f: Callable, h: np.ndarray, threshold: float | None = None) -> None:
    """``f(h)`` (or ``f(h, threshold=threshold)``) against ``(mean, std, saturated
    fraction)`` of the caller's activation array ``h`` (any shape)."""
    assert_no_shortcut(f)
    _check_stats(f, np.asarray(h, dtype=np.float64), threshold)


# --------------------------------------------------------------------------- forward_stack


def _stack_result(f: Callable, x, weights, activation) -> list[np.ndarray]:
    xs, ws = x.copy(), [w.copy() for w in weights]
    try:
        res = call(f, xs, ws) if activation is None else call(f, xs, ws, activation=activation)
    except GradingError as e:
        if "matmul" in str(e) or "aligned" in str(e):
            raise GradingError(f"{e}. Likely cause: {TRANSPOSED}") from e
        raise
    unchanged(x, xs, "x", f.__name__)
    if isinstance(res, np.ndarray):
        raise GradingError(f"{f.__name__} returned one array; {LAST_ONLY}")
    if not isinstance(res, (list, tuple)):
        raise GradingError(f"{f.__name__} must return a list of arrays, got {type(res).__name__}")
    if len(res) == len(weights) + 1:
        raise GradingError(
            f"{f.__name__} returned {len(res)} arrays for {len(weights)} layers: {WITH_INPUT}"
        )  # noqa: E501
    if len(res) != len(weights):
        raise GradingError(
            f"{f.__name__} returned {len(res)} arrays, expected one per layer ({len(weights)})"
        )  # noqa: E501
    return [np.asarray(r) for r in res]


def _stack_hypotheses(x, weights, act) -> list[Hypothesis]:
    def chain(step):
        out, h = [], x
        for w in weights:
            h = step(h, w)
            out.append(h)
        return tuple(out)

    return [
        (TRANSPOSED, lambda: chain(lambda h, w: act(h @ w.T))),
        (TRANSPOSED, lambda: chain(lambda h, w: act((w @ h.T).T))),
        (PRE_ACT, lambda: chain(lambda h, w: h @ w)),
        (PRE_ACT, lambda: _pre_activations(x, weights, act)),
        (ACT_ARG, lambda: chain(lambda h, w: np.tanh(h @ w))),
        (ACT_FIRST, lambda: chain(lambda h, w: act(h) @ w)),
        (NOT_CHAINED, lambda: tuple(act(x @ w) for w in weights)),
    ]


def _pre_activations(x, weights, act) -> tuple:
    """The right chain h_l = act(h_{l-1} @ W_l), but storing each pre-activation h_{l-1} @ W_l."""
    out, h = [], x
    for w in weights:
        z = h @ w
        out.append(z)
        h = act(z)
    return tuple(out)


def _check_stack(f, x, weights, activation):
    res = _stack_result(f, x, weights, activation)
    act = np.tanh if activation is None else activation
    expected = _stack(x, weights, act)
    hyps = _stack_hypotheses(x, weights, act)
    for i, (r, e) in enumerate(zip(res, expected, strict=True)):
        if r.shape != e.shape:
            found = [m for m, t in hyps[:2] if np.shape(t()[i]) == r.shape]
            raise GradingError(
                f"layer {i + 1}'s output has shape {r.shape}, expected {e.shape}"
                + (f". Likely cause: {found[0]}" if found else "")
            )
    found = None
    for i, (r, e) in enumerate(zip(res, expected, strict=True)):
        if not np.allclose(r, e, rtol=1e-6, atol=1e-8):
            found = diagnose(tuple(res), hyps, tuple(expected))
            if found is not None:
                raise GradingError(f"the layer outputs are wrong. Likely cause: {found}")
            assert_close(r, e, f"layer {i + 1}'s output")


def check_forward_stack(f: Callable) -> None:
    """A 3-layer stack with tanh (default) and with another activation; non-square weights."""
    assert_no_shortcut(f)
    rng = np.random.default_rng(42)
    x = rng.standard_normal((4, 3))
    weights = [rng.standard_normal(s) for s in ((3, 5), (5, 5), (5, 2))]
    _check_stack(f, x, weights, None)
    _check_stack(f, x, weights, np.sin)


def check_stack_on(
    f: Callable, x: np.ndarray, weights: list[np.ndarray], activation: Callable | None = None
) -> None:
    """``f(x, weights)`` (or with ``activation=``) against the L layer outputs
    ``h_l = activation(h_{l-1} @ W_l)``; x: (N, D_0), W_l: (D_{l-1}, D_l); default tanh.
    ``activation``: ``np.tanh``, ``np.sin`` or :func:`relu` (the functions that reach the
    student's code when the grader runs the checks outside the kernel)."""
    assert_no_shortcut(f)
    _check_stack(f, x, weights, activation)


def check_drift_profile(f: Callable) -> None:
    """(L, 3) array: activation_stats of each layer's output."""
    assert_no_shortcut(f)
    rng = np.random.default_rng(45)
    x = rng.standard_normal((8, 6))
    weights = make_weights(4, 6, 2.0, seed=46)
    # Copies: the reference below is computed from x and weights after the call.
    got = call(f, x.copy(), [w.copy() for w in weights])
    res = assert_array(np.asarray(got, dtype=float), (4, 3), "the profile")
    expected = np.array([_stats(h) for h in _stack(x, weights)])
    hyps = [
        (PRE_ACT, lambda: np.array([_stats(h) for h in _stack(x, weights, lambda z: z)])),
        (WITH_INPUT, lambda: np.array([_stats(h) for h in [x, *_stack(x, weights)]][:4])),
        (ORDER, lambda: expected[:, [1, 0, 2]]),
        (ORDER, lambda: expected[:, ::-1]),
        (TRANSPOSED, lambda: expected.T),
    ]
    check_against(res, expected, "drift_profile", hyps)


# --------------------------------------------------------------------------- answers

_HINTS = {
    "drift_q1": "Look at the std column of the gain-0.5 profile, layer 1 against layer 20.",
    "drift_q2": "Look at the saturated column of the gain-3.0 profile at layer 20.",
    "drift_q3": "For each gain, read the std and the saturated fraction at layer 20.",
}


def check_answers_format(q1: object, q2: object, q3: object) -> None:
    """Each answer is one of the offered letters (says nothing about correctness)."""
    check_format("answer_q1", q1, ("a", "b", "c"))
    check_format("answer_q2", q2, ("a", "b", "c"))
    check_format("answer_q3", q3, ("a", "b", "c", "d"))


def check_answer(question: str, answer: object, key: str) -> None:
    """Raise with a hint unless ``answer`` hashes to ``key`` (the hidden test holds the key,
    :func:`normedu.grading.answers.answer_hash` of the right letter)."""
    _check_answer(question, answer, key, _HINTS[question])
