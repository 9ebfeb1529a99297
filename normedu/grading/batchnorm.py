"""Checks for the ``batchnorm`` assignment (numpy; x of shape (N, C), PyTorch's conventions).

Student functions:
- ``batchnorm_forward(x, gamma, beta, running_mean, running_var, training=True, momentum=0.1,
  eps=1e-5) -> (out, new_running_mean, new_running_var)``
- ``batchnorm_backward(dout, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)`` (training mode)

Every check first runs the anti-shortcut guard; the references are
:func:`normedu.functional.batch_norm` / :func:`~normedu.functional.batch_norm_backward`
(tested against PyTorch) and central finite differences with a random upstream gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.grading.compare import GradingError, assert_array, call, unchanged
from normedu.grading.diagnose import (
    Hypothesis,
    check_affine_backward,
    check_against,
    explained_by_rerun,
    norm_relations,
    normalize,
    normalize_backward,
)
from normedu.grading.gradcheck import numerical_gradient
from normedu.grading.guard import assert_no_shortcut
from normedu.grading.messages import EPS_IGNORED, EPS_OUT, NO_BETA, NO_GAMMA, NO_SQRT, SWAPPED

__all__ = [
    "check_forward_shapes",
    "check_forward_training",
    "check_forward_running",
    "check_forward_eval",
    "check_training_on",
    "check_running_steps",
    "check_backward_shapes",
    "check_backward_values",
    "check_backward_on",
]

AXIS = "you normalized each sample over its features (axis 1); BatchNorm normalizes each feature over the batch: mean and variance along axis 0"  # noqa: E501
UNBIASED = "your variance divides by N−1; BatchNorm normalizes with the biased variance (divide by N, np.var's default ddof=0)"  # noqa: E501
NO_CENTER = "you forgot to subtract the batch mean before dividing"
RUNNING_IN_TRAIN = "in training mode normalize with the statistics of the current batch, not with running_mean/running_var"  # noqa: E501
ONE_PASS = "E[x²] − E[x]² loses all precision when the data has a large offset; compute the variance of the centered data, mean((x − μ)²) (or np.var)"  # noqa: E501
RV_BIASED = "running_var must store the unbiased batch variance (divide by N−1), as PyTorch does; only the normalization uses the biased one"  # noqa: E501
MOMENTUM = "momentum weights the NEW batch statistic: running = (1 − momentum)·running + momentum·batch (PyTorch's convention; CS231n's 0.9 weights the old value)"  # noqa: E501
NOT_UPDATED = "the running statistics were not updated in training mode: running = (1 − momentum)·running + momentum·batch"  # noqa: E501
RV_STD = "running_var must hold a variance, not a standard deviation"
EVAL_BATCH = "in eval mode (training=False) normalize with running_mean and running_var, not with the batch statistics"  # noqa: E501
EVAL_UPDATES = "eval mode (training=False) must return the running statistics unchanged"
DX_VAR = "dx is missing the term that comes from the variance depending on x: dx = (γ/σ)·(dout − mean(dout) − x̂·mean(dout·x̂)), means over the batch"  # noqa: E501
DX_MEAN = "dx is missing the term that comes from the mean depending on x: subtract mean(γ·dout) over the batch"  # noqa: E501
DX_CONST = "dx treats μ and σ as constants (dx = γ·dout/σ); they depend on x, which adds two terms: dx = (γ/σ)·(dout − mean(dout) − x̂·mean(dout·x̂))"  # noqa: E501
DX_GAMMA = "dx must be multiplied by γ (the upstream gradient reaches x̂ as γ·dout)"
DX_UNBIASED = "your backward uses the unbiased variance; the forward normalizes with the biased one (divide by N)"  # noqa: E501
DG_X = "dγ = Σ dout·x̂ over the batch (the normalized input x̂), not dout·x"
DG_MEAN = "dγ and dβ are sums over the batch axis, not means"
DG_AXIS = "dγ and dβ are sums over the batch (axis 0), one value per feature"


def _reference(x, gamma, beta, running_mean, running_var, *, training=True, momentum=0.1, eps=1e-5):
    """The reference ``(out, new_running_mean, new_running_var)``, with the (C,) arrays in the
    student function's order (its signature is the assignment's contract) passed by keyword
    to :func:`normedu.functional.batch_norm`, which takes them keyword-only."""
    return ref.batch_norm(
        x,
        gamma=gamma,
        beta=beta,
        running_mean=running_mean,
        running_var=running_var,
        training=training,
        momentum=momentum,
        eps=eps,
    )


def _probe(seed: int, n: int = 8, c: int = 5, offset: float = 0.0, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    x = offset + scale * rng.standard_normal((n, c)) + rng.standard_normal(c)
    gamma = rng.uniform(0.5, 2.0, c)
    beta = rng.standard_normal(c)
    rm = rng.standard_normal(c)
    rv = rng.uniform(0.5, 2.0, c)
    return x, gamma, beta, rm, rv


def _fwd(f: Callable, x, gamma, beta, rm, rv, training=True, momentum=0.1, eps=1e-5):
    """Call the student's forward on copies; check the inputs stay untouched."""
    args = [a.copy() for a in (x, gamma, beta, rm, rv)]
    res = call(f, *args, training=training, momentum=momentum, eps=eps)
    for name, before, after in zip(
        ("x", "gamma", "beta", "running_mean", "running_var"),
        (x, gamma, beta, rm, rv),
        args,
        strict=True,
    ):
        unchanged(before, after, name, f.__name__)
    if not isinstance(res, tuple) or len(res) != 3:
        raise GradingError(
            f"{f.__name__} must return a tuple (out, new_running_mean, new_running_var), "
            f"got {type(res).__name__}"
            + (f" of length {len(res)}" if isinstance(res, tuple) else "")
        )
    out = assert_array(res[0], x.shape, "out")
    rm_new = assert_array(np.asarray(res[1]), rm.shape, "new_running_mean")
    rv_new = assert_array(np.asarray(res[2]), rv.shape, "new_running_var")
    return out, rm_new, rv_new


def _out_hypotheses(x, gamma, beta, rm, rv, eps) -> list[Hypothesis]:
    def v(**kw):
        return lambda: normalize(x, 0, gamma, beta, eps, **kw)

    return [
        (AXIS, lambda: normalize(x, 1, gamma, beta, eps)),
        (UNBIASED, v(ddof=1)),
        (EPS_OUT, v(eps_mode="outside")),
        (EPS_IGNORED, v(eps_mode="none")),
        (EPS_IGNORED, lambda: normalize(x, 0, gamma, beta, 1e-5)),
        (EPS_IGNORED, lambda: normalize(x, 0, gamma, beta, 1e-8)),
        (NO_SQRT, v(sqrt=False)),
        (NO_CENTER, lambda: x / np.sqrt(x.var(axis=0) + eps) * gamma + beta),
        (NO_BETA, lambda: normalize(x, 0, gamma, None, eps)),
        (NO_GAMMA, lambda: normalize(x, 0, None, beta, eps)),
        (SWAPPED, lambda: normalize(x, 0, beta, gamma, eps)),
        (RUNNING_IN_TRAIN, lambda: (x - rm) / np.sqrt(rv + eps) * gamma + beta),
        (ONE_PASS, v(one_pass=True)),
        (
            UNBIASED + " (and ε belongs inside the square root)",
            lambda: (x - x.mean(0)) / (x.std(0, ddof=1) + eps) * gamma + beta,
        ),  # noqa: E501
    ]


def _running_hypotheses(x, rm, rv, momentum) -> list[Hypothesis]:
    n = x.shape[0]
    mu, var = x.mean(0), x.var(0)
    unb = var * n / (n - 1)
    return [
        (
            RV_BIASED,
            lambda: ((1 - momentum) * rm + momentum * mu, (1 - momentum) * rv + momentum * var),
        ),  # noqa: E501
        (
            MOMENTUM,
            lambda: (momentum * rm + (1 - momentum) * mu, momentum * rv + (1 - momentum) * unb),
        ),  # noqa: E501
        (
            MOMENTUM + "; also, running_var stores the unbiased variance",
            lambda: (momentum * rm + (1 - momentum) * mu, momentum * rv + (1 - momentum) * var),
        ),  # noqa: E501
        (NOT_UPDATED, lambda: (rm, rv)),
        (
            RV_STD,
            lambda: (
                (1 - momentum) * rm + momentum * mu,
                (1 - momentum) * rv + momentum * np.sqrt(unb),
            ),
        ),  # noqa: E501
        (
            RV_STD,
            lambda: (
                (1 - momentum) * rm + momentum * mu,
                (1 - momentum) * rv + momentum * np.sqrt(var),
            ),
        ),  # noqa: E501
    ]


def check_forward_shapes(f: Callable) -> None:
    """Return types and shapes in training and eval mode, for float64 and float32 input."""
    assert_no_shortcut(f)
    for dtype in (np.float64, np.float32):
        x, gamma, beta, rm, rv = (a.astype(dtype) for a in _probe(1, n=6, c=4))
        for training in (True, False):
            _fwd(f, x, gamma, beta, rm, rv, training=training)


def check_forward_training(f: Callable) -> None:
    """Training-mode output against the reference, with the default eps and with eps = 0.3."""
    assert_no_shortcut(f)
    for seed, eps, scale in ((2, 1e-5, 1.0), (3, 0.3, 0.4)):
        x, gamma, beta, rm, rv = _probe(seed, scale=scale)
        out, _, _ = _fwd(f, x, gamma, beta, rm, rv, eps=eps)
        expected, _, _ = _reference(x, gamma, beta, rm, rv, eps=eps)
        with _rerun(f, x, gamma, beta, rm, rv, 0.1, eps):
            check_against(
                out,
                expected,
                f"out (training mode, eps={eps})",
                _out_hypotheses(x, gamma, beta, rm, rv, eps),
                relations=norm_relations(x, 0, gamma, beta, eps),
            )


def check_forward_running(f: Callable) -> None:
    """The running statistics after one training step (momentum 0.1, N = 4)."""
    assert_no_shortcut(f)
    x, gamma, beta, rm, rv = _probe(4, n=4)
    _, rm_new, rv_new = _fwd(f, x, gamma, beta, rm, rv, momentum=0.1)
    _, erm, erv = _reference(x, gamma, beta, rm, rv)
    check_against(
        (rm_new, rv_new),
        (erm, erv),
        "(new_running_mean, new_running_var)",
        _running_hypotheses(x, rm, rv, 0.1),
    )


def check_forward_eval(f: Callable) -> None:
    """Eval mode: normalize with the running statistics and return them unchanged."""
    assert_no_shortcut(f)
    x, gamma, beta, rm, rv = _probe(5)
    out, rm_new, rv_new = _fwd(f, x, gamma, beta, rm, rv, training=False)
    if not (np.allclose(rm_new, rm) and np.allclose(rv_new, rv)):
        raise GradingError(f"the running statistics returned in eval mode changed: {EVAL_UPDATES}")
    expected, _, _ = _reference(x, gamma, beta, rm, rv, training=False)
    hyps = [
        (EVAL_BATCH, lambda: normalize(x, 0, gamma, beta, 1e-5)),
        (EVAL_BATCH, lambda: normalize(x, 0, gamma, beta, 1e-5, ddof=1)),
        (EPS_OUT, lambda: (x - rm) / (np.sqrt(rv) + 1e-5) * gamma + beta),
        (NO_BETA, lambda: (x - rm) / np.sqrt(rv + 1e-5) * gamma),
        (NO_GAMMA, lambda: (x - rm) / np.sqrt(rv + 1e-5) + beta),
    ]
    check_against(out, expected, "out (eval mode)", hyps)


def check_training_on(
    f: Callable,
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    running_mean: np.ndarray,
    running_var: np.ndarray,
    *,
    momentum: float = 0.1,
    eps: float = 1e-5,
    rtol: float = 1e-6,
    atol: float = 1e-8,
) -> None:
    """Training-mode ``out`` of ``f`` against the reference on the caller's inputs.

    x: (N, C); the others (C,). A float64 probe that fails is diagnosed against the known
    mistakes; a float32 one only compared (pass a looser ``rtol``/``atol``).
    """
    assert_no_shortcut(f)
    rm, rv = running_mean, running_var
    out, _, _ = _fwd(f, x, gamma, beta, rm, rv, momentum=momentum, eps=eps)
    expected, _, _ = _reference(x, gamma, beta, rm, rv, momentum=momentum, eps=eps)
    float64 = np.asarray(x).dtype == np.float64
    with _rerun(f, x, gamma, beta, rm, rv, momentum, eps):
        check_against(
            out,
            expected,
            f"out (training mode) for N={x.shape[0]}, eps={eps}"
            + ("" if float64 else f", {x.dtype}"),
            _out_hypotheses(x, gamma, beta, rm, rv, eps) if float64 else (),
            rtol=rtol,
            atol=atol,
        )


def _rerun(f, x, gamma, beta, rm, rv, momentum, eps):
    """Explain an unexplained training-mode mismatch by re-running with γ = 1 / β = 0."""
    return explained_by_rerun(
        lambda g, b: _fwd(f, x, g, b, rm, rv, momentum=momentum, eps=eps)[0],
        lambda g, b: _reference(x, g, b, rm, rv, momentum=momentum, eps=eps)[0],
        gamma,
        beta,
    )


def check_running_steps(
    f: Callable,
    batches: list[np.ndarray],
    gamma: np.ndarray,
    beta: np.ndarray,
    x_eval: np.ndarray,
    *,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> None:
    """Training steps on ``batches`` (each (N, C)) from running statistics 0 and 1, each
    step's running statistics checked, then eval mode on ``x_eval`` with the final ones."""
    assert_no_shortcut(f)
    c = gamma.shape[0]
    rm, rv = np.zeros(c), np.ones(c)
    erm, erv = rm, rv
    for step, x in enumerate(batches, start=1):
        _, rm, rv = _fwd(f, x, gamma, beta, rm, rv, momentum=momentum, eps=eps)
        prev = (erm, erv)
        _, erm, erv = _reference(x, gamma, beta, erm, erv, momentum=momentum, eps=eps)
        check_against(
            (rm, rv),
            (erm, erv),
            f"running statistics after step {step} of {len(batches)}",
            _running_hypotheses(x, *prev, momentum),
        )
    out, _, _ = _fwd(f, x_eval, gamma, beta, rm, rv, training=False, momentum=momentum, eps=eps)
    expected, _, _ = _reference(
        x_eval, gamma, beta, erm, erv, training=False, momentum=momentum, eps=eps
    )
    check_against(
        out,
        expected,
        f"out in eval mode after {len(batches)} training steps",
        [(EVAL_BATCH, lambda: normalize(x_eval, 0, gamma, beta, eps))],
    )


def _bwd(b: Callable, dout, x, gamma, eps=1e-5):
    args = [a.copy() for a in (dout, x, gamma)]
    res = call(b, *args, eps=eps)
    if not isinstance(res, tuple) or len(res) != 3:
        raise GradingError(f"{b.__name__} must return a tuple (dx, dgamma, dbeta)")
    dx, dgamma, dbeta = res
    c = x.shape[1]
    for name, val in (("dgamma", dgamma), ("dbeta", dbeta)):
        v = np.asarray(val)
        if v.shape == x.shape:
            raise GradingError(f"{name} has shape {v.shape}, expected ({c},): {DG_AXIS}")
        if v.shape == (x.shape[0],):
            raise GradingError(f"{name} has shape {v.shape}, expected ({c},): {DG_AXIS}")
    dx = assert_array(dx, x.shape, "dx")
    return (
        dx,
        assert_array(np.asarray(dgamma), (c,), "dgamma"),
        assert_array(np.asarray(dbeta), (c,), "dbeta"),
    )  # noqa: E501


def _dx_hypotheses(dout, x, gamma, eps) -> list[Hypothesis]:
    def v(**kw):
        return lambda: normalize_backward(dout, x, 0, gamma, eps, **kw)

    return [
        (DX_CONST, v(mean_term=False, var_term=False)),
        (DX_VAR, v(var_term=False)),
        (DX_MEAN, v(mean_term=False)),
        (DX_GAMMA, v(use_gamma=False)),
        (DX_UNBIASED, v(ddof=1)),
        (AXIS, lambda: normalize_backward(dout, x, 1, gamma, eps)),
    ]


def _dparam_hypotheses(dout, x, eps) -> list[Hypothesis]:
    x_hat = normalize(x, 0, eps=eps)
    n = x.shape[0]
    return [
        (DG_X, lambda: ((dout * x).sum(0), dout.sum(0))),
        (DG_MEAN, lambda: ((dout * x_hat).mean(0), dout.mean(0))),
        (DG_MEAN, lambda: ((dout * x_hat).sum(0), dout.sum(0) / n)),
        (DG_MEAN, lambda: ((dout * x_hat).sum(0) / n, dout.sum(0))),
    ]


def _check_backward(b: Callable, dout, x, gamma, eps, expected, label, rtol=1e-6, atol=1e-8):
    dx, dgamma, dbeta = _bwd(b, dout, x, gamma, eps)
    check_affine_backward(
        (dx, dgamma, dbeta),
        expected,
        label,
        _dparam_hypotheses(dout, x, eps),
        _dx_hypotheses(dout, x, gamma, eps),
        rtol=rtol,
        atol=atol,
    )


def check_backward_shapes(b: Callable) -> None:
    """Return types and shapes: dx like x, dgamma and dbeta one value per feature."""
    assert_no_shortcut(b)
    x, gamma, _, _, _ = _probe(10, n=6, c=4)
    dout = np.random.default_rng(11).standard_normal(x.shape)
    _bwd(b, dout, x, gamma)


def check_backward_values(b: Callable) -> None:
    """Against central finite differences of the forward, with a random upstream gradient."""
    assert_no_shortcut(b)
    x, gamma, beta, _, _ = _probe(12, n=5, c=3)
    dout = np.random.default_rng(13).standard_normal(x.shape)
    eps = 1e-5

    def fx(x_):
        return normalize(x_, 0, gamma, beta, eps)

    dx_num = numerical_gradient(fx, x, dout)
    dg_num = numerical_gradient(lambda g: normalize(x, 0, g, beta, eps), gamma, dout)
    db_num = numerical_gradient(lambda bb: normalize(x, 0, gamma, bb, eps), beta, dout)
    _check_backward(
        b,
        dout,
        x,
        gamma,
        eps,
        (dx_num, dg_num, db_num),
        "(vs finite differences)",
        rtol=1e-5,
        atol=1e-7,
    )


def check_backward_on(
    b: Callable,
    dout: np.ndarray,
    x: np.ndarray,
    gamma: np.ndarray,
    eps: float = 1e-5,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-8,
) -> None:
    """``b(dout, x, gamma, eps=eps)`` against the reference backward on the caller's inputs
    (dout, x: (N, C); gamma: (C,)); raises with the likely mistake."""
    assert_no_shortcut(b)
    expected = ref.batch_norm_backward(dout, x, gamma, eps)
    n, c = x.shape
    _check_backward(
        b, dout, x, gamma, eps, expected, f"for N={n}, C={c}, eps={eps}", rtol=rtol, atol=atol
    )
