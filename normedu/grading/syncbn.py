"""Checks for the ``syncbn`` assignment: synchronized BatchNorm with an all-reduce (numpy).

Student functions (x of shape (N_p, C) is one process's slice of a global batch):
- ``syncbn_forward(x, gamma, beta, all_reduce, eps=1e-5) -> out`` (N_p, C), normalized with the
  statistics of the GLOBAL batch (biased variance, eps inside the square root);
- ``syncbn_backward(dout, x, gamma, all_reduce, eps=1e-5) -> (dx, dgamma, dbeta)``: dx (N_p, C)
  exact for this slice of the global batch, dgamma/dbeta (C,) this process's LOCAL sums.

``all_reduce(a)`` returns the elementwise sum of ``a`` over all processes. The checks run the
student's function on several simulated processes, one thread each (:func:`simulate`), whose
``all_reduce`` is a rendezvous: each call waits until every process has made its call with the
same index, checks that the shapes agree and hands everyone the sum. A process that makes a
call the others never make gets a message naming the call instead of a deadlock: at once when
another process has already returned, else after a timeout.

The reference is :func:`normedu.functional.batch_norm` / ``batch_norm_backward`` on the
concatenated batch (tested against PyTorch). The checks take their inputs as arguments, so
the hidden tests hold theirs in the notebook (``xs``: a list of per-process arrays).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from normedu import functional as ref
from normedu.conventions import DEFAULT_EPS
from normedu.grading.compare import GradingError, assert_close
from normedu.grading.diagnose import Hypothesis, diagnose, matches, normalize, normalize_backward
from normedu.grading.guard import assert_no_shortcut
from normedu.grading.messages import EPS_OUT, NO_BETA, NO_GAMMA, SWAPPED
from normedu.grading.normcheck import OTHER_EPS, NormTable, Probe
from normedu.grading.simulated import _simulated_run, simulate

__all__ = [
    "simulate",
    "check_forward_shapes",
    "check_forward",
    "check_backward_shapes",
    "check_backward",
]

LOCAL = "each process normalized with its OWN batch statistics (local BatchNorm); all-reduce the count, Σx and the squared deviations so that every process uses the mean and variance of the global batch"  # noqa: E501
MEAN_OF_MEANS = "you averaged the processes' means (or variances) as if every process held the same number of samples; with unequal local batches, all-reduce the COUNT and the SUMS and divide the global sum by the global count"  # noqa: E501
AVG_LOCAL_VAR = "the global variance is not the average of the local variances (that misses how far each process's mean is from the global mean); all-reduce Σ(x − μ)² with the GLOBAL mean μ, then divide by the global count"  # noqa: E501
UNBIASED = "your variance divides by N−1; BatchNorm normalizes with the biased variance (divide by the global count N)"  # noqa: E501
ONE_PASS = "E[x²] − E[x]² loses all precision when the data has a large offset; first all-reduce Σx to get the global mean μ, then all-reduce Σ(x − μ)²"  # noqa: E501
EPS_IGNORED = "the eps argument is not used (or not inside the square root): divide by sqrt(σ² + eps) with the eps you were given"  # noqa: E501
DX_LOCAL = "dx uses this process's own sums of dout and dout·x̂ (the backward of local BatchNorm); all-reduce Σdout and Σdout·x̂: every sample of the global batch affects μ and σ"  # noqa: E501
DX_LOCAL_COUNT = "dx divides the all-reduced sums by this process's batch size; divide by the GLOBAL count (the sum of all local batch sizes)"  # noqa: E501
DX_LOCAL_STATS = "dx uses the local mean and variance; the backward must use the same global μ and σ as the forward (all-reduce them again)"  # noqa: E501
DX_VAR = "dx is missing the term that comes from the variance depending on x: dx = (γ/σ)·(dout − Σdout/N − x̂·Σ(dout·x̂)/N), sums over the global batch"  # noqa: E501
DX_MEAN = "dx is missing the term that comes from the mean depending on x: subtract Σ(γ·dout)/N over the global batch"  # noqa: E501
DX_GAMMA = "dx must be multiplied by γ (the upstream gradient reaches x̂ as γ·dout)"
DG_GLOBAL = "dgamma and dbeta must be this process's LOCAL sums (Σ over its own rows): DistributedDataParallel averages the parameter gradients over processes afterwards, so returning the all-reduced sums counts every sample P times"  # noqa: E501
DG_X = "dγ = Σ dout·x̂ (the normalized input x̂, with the global statistics), not dout·x"
DG_LOCAL_XHAT = (
    "dγ uses x̂ normalized with the local statistics; use the global μ and σ, as in the forward"  # noqa: E501
)
DG_MEAN = "dγ and dβ are sums over this process's rows, not means"


# ------------------------------------------------------------------ references and mistakes


def _global_stats(xs: Sequence[np.ndarray], ddof: int = 0):
    x = np.concatenate(xs)
    return x.mean(0), x.var(0, ddof=ddof)


def _split(a: np.ndarray, xs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    return tuple(np.split(a, np.cumsum([len(x) for x in xs])[:-1]))


def _per_process(
    actual: tuple,
    expected: tuple,
    what: str,
    hypotheses: list[Hypothesis],
    rtol: float,
    atol: float,
    hint: str = "",
) -> None:
    """Pass if every process's arrays match; else name the likely mistake or the process.

    ``actual``/``expected``: a tuple with one entry per process (an array, or a tuple of
    arrays); the hypotheses compute the same structure.
    """
    if matches(actual, expected, rtol, atol):
        return
    found = diagnose(actual, hypotheses, expected)
    if found is not None:
        raise GradingError(f"{what} is wrong. Likely cause: {found}")
    for r, (a, e) in enumerate(zip(actual, expected, strict=True)):
        pairs = zip(*(v if isinstance(v, tuple) else (v,) for v in (a, e)), strict=True)
        for k, (ai, ei) in enumerate(pairs):
            item = f", item {k}" if isinstance(a, tuple) else ""
            assert_close(ai, ei, f"{what}, process {r}{item}", rtol, atol, hint=hint)


def _offset_hint(xs) -> str:
    """ONE_PASS when the data's mean is far larger than its spread (cancellation territory)."""
    x = np.concatenate(xs).astype(np.float64)
    ratio = np.abs(x.mean(0)) / np.maximum(x.std(0), 1e-300)
    return f"Your data has a large offset: {ONE_PASS}." if np.max(ratio) > 1e3 else ""


def _with_stats(xs, mus, vars_, gamma, beta, eps, eps_mode="inside"):
    """Per process: gamma * (x - mu_p) / sqrt(var_p + eps) + beta."""
    out = []
    for x, mu, var in zip(xs, mus, vars_, strict=True):
        den = np.sqrt(var + eps) if eps_mode == "inside" else np.sqrt(var) + eps
        out.append(gamma * (x - mu) / den + (0 if beta is None else beta))
    return tuple(out)


def _forward_hypotheses(xs, gamma, beta, eps) -> list[Hypothesis]:
    p = len(xs)
    mu, var = _global_stats(xs)
    x = np.concatenate(xs)
    n = len(x)
    means = [xi.mean(0) for xi in xs]
    local_vars = [xi.var(0) for xi in xs]

    def same(m, v):
        return lambda: _with_stats(xs, [m] * p, [v] * p, gamma, beta, eps)

    mean_of_means = sum(means) / p
    var_mom = sum(((xi - mean_of_means) ** 2).mean(0) for xi in xs) / p
    return [
        (LOCAL, lambda: tuple(normalize(xi, 0, gamma, beta, eps) for xi in xs)),
        (MEAN_OF_MEANS, same(mean_of_means, ((x - mean_of_means) ** 2).mean(0))),
        (MEAN_OF_MEANS, same(mean_of_means, var_mom)),
        (MEAN_OF_MEANS, same(mean_of_means, sum(local_vars) / p)),
        (AVG_LOCAL_VAR, same(mu, sum(local_vars) / p)),
        (
            AVG_LOCAL_VAR,
            same(mu, sum(v * len(xi) for v, xi in zip(local_vars, xs, strict=True)) / n),
        ),
        (UNBIASED, same(mu, var * n / max(n - 1, 1))),
        (ONE_PASS, same(mu, (x * x).mean(0) - mu * mu)),
        (EPS_OUT, lambda: _with_stats(xs, [mu] * p, [var] * p, gamma, beta, eps, "outside")),
        *[(EPS_IGNORED, same(mu, var - eps + e)) for e in OTHER_EPS if e != eps],
        (NO_BETA, lambda: _with_stats(xs, [mu] * p, [var] * p, gamma, None, eps)),
        (NO_GAMMA, lambda: _with_stats(xs, [mu] * p, [var] * p, np.ones_like(gamma), beta, eps)),
        (SWAPPED, lambda: _with_stats(xs, [mu] * p, [var] * p, beta, gamma, eps)),
    ]


def _backward_reference(douts, xs, gamma, eps):
    """(dx per process, dgamma per process, dbeta per process): full-batch dx, local sums."""
    x, dout = np.concatenate(xs), np.concatenate(douts)
    dx, _, _ = ref.batch_norm_backward(dout, x, gamma, eps)
    mu, var = _global_stats(xs)
    x_hats = [(xi - mu) / np.sqrt(var + eps) for xi in xs]
    dgs = tuple((d * xh).sum(0) for d, xh in zip(douts, x_hats, strict=True))
    dbs = tuple(d.sum(0) for d in douts)
    return _split(dx, xs), dgs, dbs


def _dx_mixed(douts, xs, gamma, eps, stats="global", sums="global", count="global") -> tuple:
    """dx per process with each ingredient global (right) or the process's own ("local"): the
    statistics μ, σ; the sums Σg and Σg·x̂ (g = γ·dout); the count the sums are divided by."""
    mu, var = _global_stats(xs)
    out = []
    for d, xi in zip(douts, xs, strict=True):
        m, v = (mu, var) if stats == "global" else (xi.mean(0), xi.var(0))
        r = 1 / np.sqrt(v + eps)
        pairs = list(zip(douts, xs, strict=True)) if sums == "global" else [(d, xi)]
        s1 = sum((dd * gamma).sum(0) for dd, _ in pairs)
        s2 = sum((dd * gamma * (xx - m) * r).sum(0) for dd, xx in pairs)
        n = sum(len(x) for x in xs) if count == "global" else len(xi)
        out.append(r * (d * gamma - s1 / n - (xi - m) * r * s2 / n))
    return tuple(out)


def _dx_hypotheses(douts, xs, gamma, eps) -> list[Hypothesis]:
    x, dout = np.concatenate(xs), np.concatenate(douts)

    def glob(**kw):
        return lambda: _split(normalize_backward(dout, x, 0, gamma, eps, **kw), xs)

    def mixed(**kw):
        return lambda: _dx_mixed(douts, xs, gamma, eps, **kw)

    return [
        (DX_LOCAL, mixed(stats="local", sums="local", count="local")),
        (DX_LOCAL, mixed(sums="local")),
        (DX_LOCAL_COUNT, mixed(count="local")),
        (DX_LOCAL_STATS, mixed(stats="local")),
        (DX_VAR, glob(var_term=False)),
        (DX_MEAN, glob(mean_term=False)),
        (DX_GAMMA, glob(use_gamma=False)),
        (UNBIASED, glob(ddof=1)),
    ]


def _dparam_hypotheses(douts, xs, eps) -> list[Hypothesis]:
    """Hypotheses for ``((dgamma per process), (dbeta per process))``... as per-process pairs."""
    mu, var = _global_stats(xs)
    x_hats = [(xi - mu) / np.sqrt(var + eps) for xi in xs]
    dg = [(d * xh).sum(0) for d, xh in zip(douts, x_hats, strict=True)]
    db = [d.sum(0) for d in douts]
    p = len(xs)

    def pairs(gs, bs):
        return lambda: tuple(zip(gs, bs, strict=True))

    return [
        (DG_GLOBAL, pairs([sum(dg)] * p, [sum(db)] * p)),
        (DG_GLOBAL, pairs([sum(dg) / p] * p, [sum(db) / p] * p)),
        (DG_X, pairs([(d * xi).sum(0) for d, xi in zip(douts, xs, strict=True)], db)),
        (DG_LOCAL_XHAT, pairs([(d * normalize(xi, 0, eps=eps)).sum(0) for d, xi in zip(douts, xs, strict=True)], db)),  # noqa: E501
        (DG_MEAN, pairs([(d * xh).mean(0) for d, xh in zip(douts, x_hats, strict=True)], [d.mean(0) for d in douts])),  # noqa: E501
    ]  # fmt: skip


# ------------------------------------------------------------------ the checks


def _as_lists(xs) -> list[np.ndarray]:
    xs = [np.asarray(x) for x in xs]
    if len(xs) < 1 or any(x.ndim != 2 or len(x) < 1 for x in xs):
        raise ValueError("xs must be a non-empty list of (N_p, C) arrays with N_p >= 1")
    return xs


#: What each simulated process takes and returns (the reference is BatchNorm of the
#: concatenated batch; dgamma and dbeta are the process's local sums).
SYNCBN = NormTable(
    inputs=("x", "gamma", "beta"),
    reference=ref.batch_norm,
    grads=(("dx", "x"), ("dgamma", "gamma"), ("dbeta", "beta")),
    grad_shape_hint="one value per channel, summed over this process's rows",
)


def _simulated(fn, names, per_process, eps, backward=False) -> list:
    """The results of :func:`_simulated_run`, every process's checked like a single call's."""
    results = _simulated_run(fn, list(names), per_process, eps)
    fn_name = getattr(fn, "__name__", "your function")
    if not isinstance(results, list) or len(results) != len(per_process):
        raise GradingError(f"{fn_name} did not return a result on every simulated process")
    checked = []
    for r, (args, res) in enumerate(zip(per_process, results, strict=True)):
        named = dict(zip(names, args, strict=True))
        named.setdefault("beta", named["gamma"])  # the backward has none; dbeta is shaped like it
        probe = Probe(named)
        outputs, hint = (SYNCBN.grads, SYNCBN.grad_shape_hint) if backward else (SYNCBN.outputs, "")
        checked.append(SYNCBN.validate(res, probe, outputs, fn_name, hint, f" of process {r}"))
    return checked


def _forward(f, xs, gamma, beta, eps):
    return tuple(_simulated(f, ("x", "gamma", "beta"), [(x, gamma, beta) for x in xs], eps))


def _sizes(xs) -> str:
    return f"{len(xs)} processes with local batches {tuple(len(x) for x in xs)}"


def check_forward_shapes(f: Callable) -> None:
    """``out`` is an array shaped like x on every process, for float64 and float32 input."""
    assert_no_shortcut(f)
    rng = np.random.default_rng(0)
    for dtype in (np.float64, np.float32):
        xs = [rng.standard_normal((n, 4)).astype(dtype) for n in (3, 2)]
        gamma, beta = np.ones(4, dtype), np.zeros(4, dtype)
        _forward(f, xs, gamma, beta, DEFAULT_EPS)


def check_forward(
    f: Callable,
    xs: Sequence[np.ndarray],
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float = DEFAULT_EPS,
    rtol: float = 1e-6,
    atol: float = 1e-8,
) -> None:
    """Every process's ``out`` equals its rows of BatchNorm on the concatenated batch.

    ``xs``: one (N_p, C) array per simulated process (N_p >= 1, the total at least 2).
    """
    assert_no_shortcut(f)
    xs = _as_lists(xs)
    outs = _forward(f, xs, gamma, beta, eps)
    expected, _, _ = ref.batch_norm(np.concatenate(xs), gamma=gamma, beta=beta, eps=eps)
    _per_process(
        outs,
        _split(expected, xs),
        f"out ({_sizes(xs)}, eps={eps:g})",
        _forward_hypotheses(xs, gamma, beta, eps),
        rtol,
        atol,
        _offset_hint(xs),
    )


def _backward(b, douts, xs, gamma, eps):
    per = [(d, x, gamma) for d, x in zip(douts, xs, strict=True)]
    res = _simulated(b, ("dout", "x", "gamma"), per, eps, backward=True)
    return tuple(tuple(grads) for grads in zip(*res, strict=True))


def check_backward_shapes(b: Callable) -> None:
    """``(dx, dgamma, dbeta)`` with dx like x and dgamma, dbeta of shape (C,) on every process."""
    assert_no_shortcut(b)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((n, 3)) for n in (2, 4)]
    douts = [rng.standard_normal(x.shape) for x in xs]
    _backward(b, douts, xs, np.ones(3), DEFAULT_EPS)


def check_backward(
    b: Callable,
    douts: Sequence[np.ndarray],
    xs: Sequence[np.ndarray],
    gamma: np.ndarray,
    eps: float = DEFAULT_EPS,
    rtol: float = 1e-6,
    atol: float = 1e-8,
) -> None:
    """dx is each process's slice of the full-batch gradient; dgamma, dbeta its local sums.

    ``douts``, ``xs``: one (N_p, C) array per simulated process. Use a random ``douts``.
    """
    assert_no_shortcut(b)
    xs = _as_lists(xs)
    douts = [np.asarray(d) for d in douts]
    dxs, dgs, dbs = _backward(b, douts, xs, gamma, eps)
    edx, edg, edb = _backward_reference(douts, xs, gamma, eps)
    label = f"({_sizes(xs)}, eps={eps:g})"
    _per_process(
        tuple(zip(dgs, dbs, strict=True)),
        tuple(zip(edg, edb, strict=True)),
        f"(dgamma, dbeta) {label}",
        _dparam_hypotheses(douts, xs, eps),
        rtol,
        atol,
    )
    hint = _offset_hint(xs)
    _per_process(dxs, edx, f"dx {label}", _dx_hypotheses(douts, xs, gamma, eps), rtol, atol, hint)
