"""Checks for the ``prepost`` assignment (torch): residual blocks with the norm before or after.

Student code:
- ``pre_norm_residual(x, sublayer, norm) -> x + sublayer(norm(x))``
- ``post_norm_residual(x, sublayer, norm) -> norm(x + sublayer(x))``
- ``block_input_grad_norms(blocks, x, upstream) -> list of L floats``: run ``x`` through the
  callables ``blocks`` in order, backpropagate ``upstream`` (the gradient of the loss with
  respect to the final output) and return the L2 norm of the gradient with respect to the
  INPUT of each block, in block order.
- ``answer_q1``, ``answer_q2``, ``answer_q3``: letters, checked by hash.

:func:`make_stack` builds the deep stack of the experiment; :func:`experiment` runs it with the
reference implementation (the tests use it to prove the answer keys agree with the measurement).
torch is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from normedu.grading.answers import check_answer as _check_answer
from normedu.grading.answers import check_format
from normedu.grading.compare import GradingError
from normedu.grading.diagnose import check_against
from normedu.grading.guard import TORCH_OK, assert_no_shortcut
from normedu.grading.prepost_kernel import (
    NOT_FLOAT,
    _block_run,
    _grad_norms_run,
    _post,
    _pre,
    _probe_fns,
    _residual_run,
    blocks_from,
    make_blocks,
    make_inputs,
    make_stack,
    plot_grad_norms,
)

__all__ = [
    "make_stack",
    "make_inputs",
    "experiment",
    "measured_answers",
    "plot_grad_norms",
    "check_pre_norm",
    "check_post_norm",
    "check_residual_on",
    "check_grad_norms",
    "check_grad_norms_on",
    "make_blocks",
    "blocks_from",
    "check_answers_format",
    "check_answer",
]

PRE_IS_POST = "pre_norm_residual computed the Post-Norm block: Pre-Norm normalizes the sublayer's INPUT and adds the raw x: x + sublayer(norm(x))"  # noqa: E501
POST_IS_PRE = "post_norm_residual computed the Pre-Norm block: Post-Norm adds first and normalizes the SUM: norm(x + sublayer(x))"  # noqa: E501
NO_RESIDUAL = "the residual connection is missing: add the block's input x"
NORMED_RESIDUAL = "the residual path must carry the raw x, not norm(x): x + sublayer(norm(x))"
POST_SUB_NORMED = (
    "in Post-Norm the sublayer sees the raw x; only the sum is normalized: norm(x + sublayer(x))"  # noqa: E501
)
DOUBLE_NORM = "apply the norm once: Pre-Norm normalizes the sublayer input only"
POST_NORM_X = "Post-Norm normalizes the sum x + sublayer(x), not x alone"
NO_NORM = "the norm is missing: Pre-Norm normalizes the sublayer's input, x + sublayer(norm(x))"
POST_NO_NORM = "the norm is missing: Post-Norm normalizes the sum, norm(x + sublayer(x))"
CALLS = "call sublayer and norm exactly once each"
REVERSED = "return the gradient norms in block order (block 1 first)"
OUTPUTS = "take the gradient with respect to each block's INPUT (block 1's input is x itself), not its output"  # noqa: E501
UPSTREAM = "backpropagate the given upstream gradient (out.backward(upstream) or torch.autograd.grad(out, inputs, upstream)), not a loss such as out.sum() or out.mean()"  # noqa: E501
SQUARED = "return the L2 norm of each gradient (tensor.norm()), not its square"


def _grad_norms(blocks: list, x: Any, upstream: Any) -> list[float]:
    import torch

    h = x.detach().clone().requires_grad_(True)
    inputs = []
    for block in blocks:
        inputs.append(h)
        h = block(h)
    grads = torch.autograd.grad(h, inputs, upstream)
    return [float(g.norm()) for g in grads]


@lru_cache(maxsize=1)
def experiment() -> dict[str, list[float]]:
    """Reference run: {"pre": L gradient norms, "post": L gradient norms}."""
    subs, norms = make_stack()
    x, up = make_inputs()
    return {k: _grad_norms(make_blocks(k, subs, norms), x, up) for k in ("pre", "post")}


def _ratio_letter(r: float) -> str:
    return "c" if abs(r - 1) <= 0.1 else ("a" if r > 1 else "b")


def measured_answers() -> dict[str, str]:
    """The answers that follow from :func:`experiment` (the keys must agree with them)."""
    res = experiment()
    return {
        "prepost_q1": _ratio_letter(res["pre"][0] / res["pre"][-1]),
        "prepost_q2": _ratio_letter(res["post"][0] / res["post"][-1]),
        "prepost_q3": "a",  # conceptual: the identity path of x + f(norm(x))
    }


# --------------------------------------------------------------------------- the two blocks


def _wirings(x: Any, sub: Callable, norm: Callable, kind: str) -> list:
    """Generic relations of a residual block: the output equals another wiring of x, norm and
    sublayer (one term, a sum of two terms, or norm of such a sum), said as an expression."""
    atoms = {
        "x": lambda: x,
        "norm(x)": lambda: norm(x),
        "sublayer(x)": lambda: sub(x),
        "sublayer(norm(x))": lambda: sub(norm(x)),
        "norm(sublayer(x))": lambda: norm(sub(x)),
    }
    names = list(atoms)
    exprs = dict(atoms)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            exprs[f"{a} + {b}"] = lambda a=a, b=b: atoms[a]() + atoms[b]()
            exprs[f"norm({a} + {b})"] = lambda a=a, b=b: norm(atoms[a]() + atoms[b]())
    right = "x + sublayer(norm(x))" if kind == "pre" else "norm(x + sublayer(x))"
    return [
        (
            f"your block computes {e}; the {kind.title()}-Norm block is {right}",
            lambda t=t: t().numpy(),
        )
        for e, t in exprs.items()
        if e != right
    ]


def _check_block(f: Callable, kind: str) -> None:
    import torch

    assert_no_shortcut(f, TORCH_OK)
    norm, sub = _probe_fns()
    x = torch.linspace(-1.5, 2.0, 12, dtype=torch.float64).reshape(3, 4)
    res = _block_run(f, x.numpy())
    out = res.get("out") if isinstance(res, dict) else None
    if not isinstance(out, np.ndarray) or out.shape != tuple(x.shape):
        raise GradingError(f"{f.__name__} must return a tensor of shape {tuple(x.shape)}")
    if kind == "pre":
        hyps = [
            (PRE_IS_POST, lambda: _post(x, sub, norm)),
            (NO_RESIDUAL, lambda: sub(norm(x))),
            (NORMED_RESIDUAL, lambda: norm(x) + sub(norm(x))),
            (DOUBLE_NORM, lambda: norm(x + sub(norm(x)))),
            (NO_NORM, lambda: x + sub(x)),
        ]
    else:
        hyps = [
            (POST_IS_PRE, lambda: _pre(x, sub, norm)),
            (NO_RESIDUAL, lambda: norm(sub(x))),
            (POST_SUB_NORMED, lambda: norm(x + sub(norm(x)))),
            (POST_NORM_X, lambda: norm(x) + sub(x)),
            (POST_NO_NORM, lambda: x + sub(x)),
        ]
    expected = (_pre if kind == "pre" else _post)(x, sub, norm)
    check_against(
        out,
        expected.numpy(),
        f"{f.__name__}(x, sublayer, norm)",
        [(m, lambda t=t: t().numpy()) for m, t in hyps],
        relations=_wirings(x, sub, norm, kind),
    )
    calls = (res.get("norm_calls"), res.get("sub_calls"))
    if calls != (1, 1):
        raise GradingError(
            f"{CALLS}; {f.__name__} called norm {calls[0]} and sublayer {calls[1]} times"
        )


def check_pre_norm(f: Callable) -> None:
    """pre_norm_residual wires x + sublayer(norm(x)) (probed with stand-in functions)."""
    _check_block(f, "pre")


def check_post_norm(f: Callable) -> None:
    """post_norm_residual wires norm(x + sublayer(x)) (probed with stand-in functions)."""
    _check_block(f, "post")


def check_residual_on(pre: Callable, post: Callable, x: Any, seed: int) -> None:
    """Both blocks on the caller's tensor ``x`` (..., D) with a real sublayer and norm, those
    of ``make_stack(depth=1, width=D, seed=seed)``: outputs and the gradient with respect to
    x against the reference wiring."""
    import torch

    x = torch.as_tensor(x)
    subs, norms = make_stack(depth=1, width=int(x.shape[-1]), seed=seed)
    for f, ref in ((pre, _pre), (post, _post)):
        assert_no_shortcut(f, TORCH_OK)
        res = _residual_run(f, x.detach().numpy(), seed)
        xr = x.detach().clone().requires_grad_(True)
        expected = ref(xr, subs[0], norms[0])
        got = {k: res.get(k) if isinstance(res, dict) else None for k in ("out", "gx")}
        if not isinstance(got["out"], np.ndarray) or got["out"].shape != tuple(x.shape):
            raise GradingError(f"{f.__name__} must return a tensor of shape {tuple(x.shape)}")
        check_against(
            got["out"],
            expected.detach().double().numpy(),
            f"{f.__name__} with a LayerNorm and an MLP",
            rtol=1e-5,
            atol=1e-6,
        )
        if not isinstance(got["gx"], np.ndarray) or got["gx"].shape != tuple(x.shape):
            raise GradingError(f"{f.__name__}'s output does not require grad: keep it in torch")
        (ex,) = torch.autograd.grad(expected.sum(), xr)
        check_against(
            got["gx"],
            ex.double().numpy(),
            f"the gradient of {f.__name__} with respect to x",
            rtol=1e-5,
            atol=1e-6,
        )


# --------------------------------------------------------------------------- gradient norms


def _grad_hypotheses(blocks, x, up) -> list:
    import torch

    def variant(which: str):
        h = x.detach().clone().requires_grad_(True)
        inputs, outputs = [], []
        for b in blocks:
            inputs.append(h)
            h = b(h)
            outputs.append(h)
        if which == "outputs":
            gs = torch.autograd.grad(h, outputs, up)
        elif which == "sum":
            gs = torch.autograd.grad(h.sum(), inputs)
        elif which == "mean":
            gs = torch.autograd.grad(h.mean(), inputs)
        else:
            gs = torch.autograd.grad(h, inputs, up)
        norms = [float(g.norm()) for g in gs]
        if which == "squared":
            norms = [v * v for v in norms]
        if which == "reversed":
            norms = norms[::-1]
        return tuple(norms)

    return [
        (REVERSED, lambda: variant("reversed")),
        (OUTPUTS, lambda: variant("outputs")),
        (UPSTREAM, lambda: variant("sum")),
        (UPSTREAM, lambda: variant("mean")),
        (SQUARED, lambda: variant("squared")),
    ]


def _check_grads(f: Callable, spec: tuple, x: Any, up: Any, label: str) -> None:
    import torch

    assert_no_shortcut(f, TORCH_OK)
    x, up = torch.as_tensor(x), torch.as_tensor(up)
    blocks = blocks_from(spec)
    res = _grad_norms_run(f, spec, x.numpy(), up.numpy())
    if not isinstance(res, list) or len(res) != len(blocks):
        raise GradingError(f"{f.__name__} must return a list of {len(blocks)} floats")
    if not all(type(v) is float for v in res):
        raise GradingError(NOT_FLOAT)
    expected = tuple(_grad_norms(blocks, x, up))
    # As arrays, so that a difference no cause names is described (a constant factor, ...).
    check_against(
        np.asarray(res),
        np.asarray(expected),
        f"the gradient norms {label}",
        [(m, lambda t=t: np.asarray(t())) for m, t in _grad_hypotheses(blocks, x, up)],
        rtol=1e-4,
        atol=1e-7,
        diag_tol=(1e-4, 1e-7),
    )


def check_grad_norms(f: Callable) -> None:
    """A 4-block Pre-Norm stack of the reference blocks, random upstream gradient."""
    x, up = make_inputs(batch=5, width=8, seed=8)
    _check_grads(f, ("pre", 4, 8, 7), x, up, "of a 4-block Pre-Norm stack")


def check_grad_norms_on(f: Callable, spec: tuple, x: Any, upstream: Any, label: str = "") -> None:
    """``f(blocks, x, upstream)`` against the L2 norms of the gradient at each block's input,
    for the blocks a plain ``spec`` names (:func:`blocks_from`), and the caller's input and
    upstream gradient."""
    _check_grads(f, tuple(spec), x, upstream, label or f"of the blocks {spec}")


# --------------------------------------------------------------------------- answers

_HINTS = {
    "prepost_q1": "Compare g_pre[0] with g_pre[-1].",
    "prepost_q2": "Compare g_post[0] with g_post[-1].",
    "prepost_q3": "Differentiate x + f(norm(x)) with respect to x: which term does not depend on f?",  # noqa: E501
}


def check_answers_format(q1: object, q2: object, q3: object) -> None:
    """Each answer is one of the offered letters (says nothing about correctness)."""
    for name, a in (("answer_q1", q1), ("answer_q2", q2), ("answer_q3", q3)):
        check_format(name, a, ("a", "b", "c"))


def check_answer(question: str, answer: object, key: str) -> None:
    """Raise with a hint unless ``answer`` hashes to ``key`` (the hidden test holds the key,
    :func:`normedu.grading.answers.answer_hash` of the right letter)."""
    _check_answer(question, answer, key, _HINTS[question])
