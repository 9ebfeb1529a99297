# ruff: noqa: E501  (a table's causes are one line each: a message reads best beside its variant)
"""Checks for the ``batchnorm`` assignment (numpy; x of shape (N, C), PyTorch's conventions).

Student functions:
- ``batchnorm_forward(x, gamma, beta, running_mean, running_var, training=True, momentum=0.1,
  eps=1e-5) -> (out, new_running_mean, new_running_var)``
- ``batchnorm_backward(dout, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)`` (training mode)

The table :data:`BATCHNORM` holds what is BatchNorm's own (references
:func:`normedu.functional.batch_norm` and its backward, causes and messages); the checks are
:class:`~normedu.grading.normcheck.NormTable`'s, except the running statistics', which are
BatchNorm's alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.conventions import DEFAULT_EPS, DEFAULT_MOMENTUM
from normedu.grading.causes import param_grad_causes, switched
from normedu.grading.compare import GradingError
from normedu.grading.diagnose import (
    Hypothesis,
    check_against,
    norm_relations,
    normalize,
    normalize_backward,
)
from normedu.grading.guard import assert_no_shortcut
from normedu.grading.messages import EPS_IGNORED, EPS_OUT, NO_BETA, NO_GAMMA, NO_SQRT, SWAPPED
from normedu.grading.normcheck import NormTable, Probe, backward_on

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

AXIS = "you normalized each sample over its features (axis 1); BatchNorm normalizes each feature over the batch: mean and variance along axis 0"
UNBIASED = "your variance divides by N−1; BatchNorm normalizes with the biased variance (divide by N, np.var's default ddof=0)"
EVAL_BATCH = "in eval mode (training=False) normalize with running_mean and running_var, not with the batch statistics"


def _bn(p: Probe, axes=0, **switches) -> np.ndarray:
    """Training-mode BatchNorm of the probe over ``axes`` with :func:`normalize`'s switches."""
    return normalize(p.x, axes, p.gamma, p.beta, p.eps, **switches)


def _dx(p: Probe, axes=0, **switches) -> np.ndarray:
    return normalize_backward(p.dout, p.x, axes, p.gamma, p.eps, **switches)


def _with_running(p: Probe, eps_outside: bool = False, eps: float | None = None) -> np.ndarray:
    """Normalized with running_mean/running_var (eval mode's formula; ``eps`` replaces the
    probe's, 0 for none)."""
    rm, rv, e = p.running_mean, p.running_var, p.eps if eps is None else eps
    den = np.sqrt(rv) + e if eps_outside else np.sqrt(rv + e)
    out = (p.x - rm) / den
    return out * (1 if p.gamma is None else p.gamma) + (0 if p.beta is None else p.beta)


BATCHNORM = NormTable(
    inputs=("x", "gamma", "beta", "running_mean", "running_var"),
    reference=ref.batch_norm,
    outputs=(("out", "x"), ("new_running_mean", "running_mean"), ("new_running_var", "running_var")),
    causes=[
        (AXIS, lambda p: _bn(p, 1)),
        *switched(_bn, unbiased=UNBIASED, eps_outside=EPS_OUT, no_sqrt=NO_SQRT),
        ("you forgot to subtract the batch mean before dividing", lambda p: p.x / np.sqrt(p.x.var(axis=0) + p.eps) * p.gamma + p.beta),
        *switched(_bn, no_beta=NO_BETA, no_gamma=NO_GAMMA, swapped=SWAPPED),
        ("in training mode normalize with the statistics of the current batch, not with running_mean/running_var", _with_running),
        *switched(_bn, one_pass="E[x²] − E[x]² loses all precision when the data has a large offset; compute the variance of the centered data, mean((x − μ)²) (or np.var)"),
        (UNBIASED + " (and ε belongs inside the square root)", lambda p: (p.x - p.x.mean(0)) / (p.x.std(0, ddof=1) + p.eps) * p.gamma + p.beta),
    ],
    backward_inputs=("dout", "x", "gamma"),
    backward_reference=ref.batch_norm_backward,
    grads=(("dx", "x"), ("dgamma", "gamma"), ("dbeta", "beta")),
    grad_checks=[
        (("dgamma", "dbeta"), param_grad_causes(
            lambda p: normalize(p.x, 0, eps=p.eps), lambda p: (0,),
            uses_x="dγ = Σ dout·x̂ over the batch (the normalized input x̂), not dout·x",
            means="dγ and dβ are sums over the batch axis, not means") + [
            ("dγ needs the forward's x̂ = (x − μ)/sqrt(σ² + ε), ε included; yours leaves ε out of x̂",
             lambda p: ((p.dout * normalize(p.x, 0, eps=0.0)).sum(0), p.dout.sum(0))),
            ("dγ = Σ dout·x̂ with x̂ = (x − μ)/sqrt(σ² + ε); yours uses x − μ, without the division by the standard deviation",
             lambda p: ((p.dout * (p.x - p.x.mean(0))).sum(0), p.dout.sum(0)))]),
        (("dx",), [
            *switched(_dx, constants="dx treats μ and σ as constants (dx = γ·dout/σ); they depend on x: in your graph, dx also receives gradient through σ² and through μ, two more terms, each with a sum over the batch"),
            *switched(_dx, no_var_term="dx is missing the term that comes from the variance depending on x: follow the path x → σ² → x̂ in your graph; it adds a term proportional to x̂, with a sum over the batch"),
            *switched(_dx, no_mean_term="dx is missing the term that comes from the mean depending on x: subtract mean(γ·dout) over the batch"),
            *switched(_dx, dx_no_gamma="dx must be multiplied by γ (the upstream gradient reaches x̂ as γ·dout)"),
            *switched(_dx, unbiased="your backward uses the unbiased variance; the forward normalizes with the biased one (divide by N)"),
            (AXIS, lambda p: _dx(p, 1)),
        ]),
    ],
    relations=lambda p: norm_relations(p.x, 0, p.gamma, p.beta, p.eps),
    eps_ignored=EPS_IGNORED,
    affine=("gamma", "beta"),
    grad_shape_hint="dγ and dβ were summed over the wrong axis: they are sums over the batch (axis 0), one value per feature",
    dx_layout=lambda p: (lambda a: a, p.dout * p.gamma, 0, True),
)  # fmt: skip

#: Eval mode's causes: the batch statistics instead of the running ones, and the usual ones.
EVAL_CAUSES = [
    (EVAL_BATCH, lambda p: _bn(p), lambda p: _bn(p, ddof=1)),
    (EPS_OUT, lambda p: _with_running(p, eps_outside=True)),
    (NO_BETA, lambda p: _with_running(p.replace(beta=None))),
    (NO_GAMMA, lambda p: _with_running(p.replace(gamma=None))),
    (
        "in eval mode the output still needs γ and β: out = γ·(x − running_mean)/sqrt(running_var + ε) + β; yours returns the normalized x alone",
        lambda p: _with_running(p.replace(gamma=None, beta=None)),
    ),
    (
        "in eval mode ε is missing: divide by sqrt(running_var + ε), as in training mode (eps is an argument; a running variance near 0 would divide by 0)",
        lambda p: _with_running(p, eps=0.0),
    ),
]


def _running_hypotheses(x, rm, rv, momentum, eps=DEFAULT_EPS) -> list[Hypothesis]:
    """The running statistics' mistakes, as (new_running_mean, new_running_var)."""
    n, mu, var = x.shape[0], x.mean(0), x.var(0)
    unb = var * n / (n - 1)

    def new(old_weight, v):  # running = old_weight * running + (1 - old_weight) * batch
        return lambda: (
            old_weight * rm + (1 - old_weight) * mu,
            old_weight * rv + (1 - old_weight) * v,
        )

    keep = 1 - momentum
    momentum_msg = "momentum weights the NEW batch statistic: running = (1 − momentum)·running + momentum·batch (PyTorch's convention; CS231n's 0.9 weights the old value)"
    std_msg = "running_var must hold a variance, not a standard deviation"
    return [
        ("running_var must store the unbiased batch variance (divide by N−1), as PyTorch does; only the normalization uses the biased one", new(keep, var)),
        ("running_var must accumulate the batch variance itself, without ε: ε is added only where you divide (sqrt(var + ε)); the average takes the unbiased variance (N−1), as PyTorch does", new(keep, unb + eps)),
        ("running_var must accumulate the batch variance itself, without ε: ε is added only where you divide (sqrt(var + ε)); the average takes the unbiased variance (N−1), as PyTorch does", new(keep, var + eps)),
        (momentum_msg, new(momentum, unb)),
        (momentum_msg + "; also, running_var stores the unbiased variance", new(momentum, var)),
        ("the running statistics were not updated in training mode: running = (1 − momentum)·running + momentum·batch", lambda: (rm, rv)),
        (std_msg, new(keep, np.sqrt(unb))),
        (std_msg, new(keep, np.sqrt(var))),
    ]  # fmt: skip


def _probe(seed: int, n: int = 8, c: int = 5, offset: float = 0.0, scale: float = 1.0, **options):
    """x (n, c) with an offset per feature; gamma, running_var in [0.5, 2); the rest normal.
    ``options``: training, momentum, eps (PyTorch's defaults)."""
    rng = np.random.default_rng(seed)
    x = offset + scale * rng.standard_normal((n, c)) + rng.standard_normal(c)
    names = ("gamma", "beta", "running_mean", "running_var")
    draws = (rng.uniform(0.5, 2.0, c), rng.standard_normal(c), rng.standard_normal(c))
    args = dict(zip(names, (*draws, rng.uniform(0.5, 2.0, c)), strict=True), x=x)
    args["dout"] = np.random.default_rng(seed + 1).standard_normal((n, c))
    defaults = {"training": True, "momentum": DEFAULT_MOMENTUM, "eps": DEFAULT_EPS}
    return Probe(args, {**defaults, **options})


def check_forward_shapes(f: Callable) -> None:
    """Return types and shapes in training and eval mode, for float64 and float32 input."""
    probes = [_probe(1, n=6, c=4, training=mode) for mode in (True, False)]
    f32 = [Probe({k: v.astype(np.float32) for k, v in p.args.items()}, p.options) for p in probes]
    BATCHNORM.check_shapes(f, probes + f32)


def check_forward_training(f: Callable) -> None:
    """Training-mode output against the reference: the default eps and eps = 0.3, N = 2,
    data with a large offset (1e6), float32 input."""
    for probe in (_probe(2), _probe(3, scale=0.4, eps=0.3)):
        what = f"out (training mode, eps={probe.eps})"
        BATCHNORM.check_forward(f, probe, item=0, what=what)
    BATCHNORM.check_forward(f, _probe(21, n=2), item=0, rtol=1e-5, atol=1e-6)
    BATCHNORM.check_forward(f, _probe(22, n=16, offset=1e6), item=0, rtol=1e-5, atol=1e-6)
    p = _probe(23)
    p32 = Probe({k: v.astype(np.float32) for k, v in p.args.items()}, p.options)
    BATCHNORM.check_forward(f, p32, item=0, rtol=1e-4, atol=1e-5)


def check_forward_running(f: Callable) -> None:
    """The running statistics after one training step (momentum 0.1, N = 4), with the
    default eps and with eps = 0.3 (which the running variance must not contain)."""
    assert_no_shortcut(f)
    for p in (_probe(4, n=4), _probe(26, n=4, eps=0.3)):
        _, rm_new, rv_new = BATCHNORM.run(f, p)
        _, erm, erv = BATCHNORM.forward_value(p)
        hyps = _running_hypotheses(p.x, p.running_mean, p.running_var, p.momentum, p.eps)
        what = f"(new_running_mean, new_running_var) for eps={p.eps}"
        check_against((rm_new, rv_new), (erm, erv), what, hyps)


def check_forward_eval(f: Callable) -> None:
    """Eval mode: normalize with the running statistics and return them unchanged."""
    assert_no_shortcut(f)
    p = _probe(5, training=False)
    _, rm_new, rv_new = BATCHNORM.run(f, p)
    if not (np.allclose(rm_new, p.running_mean) and np.allclose(rv_new, p.running_var)):
        raise GradingError(
            "the running statistics returned in eval mode changed: eval mode (training=False) must return the running statistics unchanged"
        )
    BATCHNORM.check_forward(f, p, item=0, what="out (eval mode)", causes=EVAL_CAUSES)


def check_training_on(
    f: Callable,
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    running_mean: np.ndarray,
    running_var: np.ndarray,
    *,
    momentum: float = DEFAULT_MOMENTUM,
    eps: float = DEFAULT_EPS,
    rtol: float = 1e-6,
    atol: float = 1e-8,
) -> None:
    """Training-mode ``out`` of ``f`` against the reference on the caller's inputs.

    x: (N, C); the others (C,). A float64 probe that fails is diagnosed against the known
    mistakes; a float32 one only compared (pass a looser ``rtol``/``atol``).
    """
    args = {"x": x, "gamma": gamma, "beta": beta, "running_mean": running_mean}
    options = {"training": True, "momentum": momentum, "eps": eps}
    probe = Probe({**args, "running_var": running_var}, options)
    BATCHNORM.check_forward(f, probe, item=0, rtol=rtol, atol=atol)


def check_running_steps(
    f: Callable,
    batches: list[np.ndarray],
    gamma: np.ndarray,
    beta: np.ndarray,
    x_eval: np.ndarray,
    *,
    momentum: float = DEFAULT_MOMENTUM,
    eps: float = DEFAULT_EPS,
) -> None:
    """Training steps on ``batches`` (each (N, C)) from running statistics 0 and 1, each
    step's running statistics checked, then eval mode on ``x_eval`` with the final ones."""
    assert_no_shortcut(f)

    def probe(x: np.ndarray, running: tuple, training: bool = True) -> Probe:
        args = {"x": x, "gamma": gamma, "beta": beta}
        args |= {"running_mean": running[0], "running_var": running[1]}
        return Probe(args, {"training": training, "momentum": momentum, "eps": eps})

    c = gamma.shape[0]
    got = expected = (np.zeros(c), np.ones(c))
    for step, x in enumerate(batches, start=1):
        prev, got = expected, BATCHNORM.run(f, probe(x, got))[1:]
        expected = BATCHNORM.forward_value(probe(x, prev))[1:]
        what = f"running statistics after step {step} of {len(batches)}"
        check_against(got, expected, what, _running_hypotheses(x, *prev, momentum))
    final = probe(x_eval, got, training=False)
    want = BATCHNORM.forward_value(probe(x_eval, expected, training=False), 0)
    what = f"out in eval mode after {len(batches)} training steps"
    check_against(BATCHNORM.run(f, final)[0], want, what, [(EVAL_BATCH, lambda: _bn(final))])


check_backward_on = backward_on(
    BATCHNORM,
    """``b(dout, x, gamma, eps=eps)`` against the reference backward on the caller's inputs
    (dout, x: (N, C); gamma: (C,)); raises with the likely mistake.""",
)


def _backward_probe(seed: int, n: int, c: int) -> Probe:
    p = _probe(seed, n=n, c=c)
    return Probe({k: p.args[k] for k in ("dout", "x", "gamma", "beta")}, {"eps": p.eps})


def check_backward_shapes(b: Callable) -> None:
    """Return types and shapes: dx like x, dgamma and dbeta one value per feature."""
    BATCHNORM.check_shapes(b, [_backward_probe(10, 6, 4)], backward=True)


def check_backward_values(b: Callable) -> None:
    """Against central finite differences of the forward, with a random upstream gradient;
    then against the reference backward for eps = 0.3, N = 2 and data with a large offset
    (1e4)."""
    BATCHNORM.check_backward(b, _backward_probe(12, 5, 3), numeric=True, rtol=1e-5, atol=1e-7)
    p = _backward_probe(27, 6, 4)
    BATCHNORM.check_backward(b, p.replace(eps=0.3), rtol=1e-5, atol=1e-6)
    BATCHNORM.check_backward(b, _backward_probe(24, 2, 3), rtol=1e-5, atol=1e-6)
    p = _backward_probe(25, 16, 4)
    BATCHNORM.check_backward(b, p.replace(x=p.x + 1e4), rtol=1e-5, atol=1e-6)
