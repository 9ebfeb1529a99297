"""normedu.functional against independent references.

- forwards against torch.nn.functional in float64 over many shapes (hypothesis);
- backwards against torch autograd AND central finite differences, always with a random
  upstream gradient (an all-ones upstream gradient gives dx = 0 for any normalization, so a
  broken backward would pass);
- the Jacobian against torch.autograd.functional.jacobian;
- running statistics against nn.BatchNorm1d over several steps;
- numerics (large offsets, constant rows, half precision) and bad inputs.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

from normedu import functional as F
from normedu.conventions import DEFAULT_EPS

SETTINGS = settings(max_examples=40, deadline=None)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def t(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


shapes_last = (
    st.lists(st.integers(1, 6), min_size=1, max_size=3)
    .map(tuple)
    .flatmap(lambda lead: st.integers(2, 33).map(lambda d: (*lead, d)))
)
shapes_bn = st.tuples(st.integers(2, 9), st.integers(1, 7)).flatmap(
    lambda nc: st.lists(st.integers(1, 4), max_size=2).map(lambda sp: (*nc, *sp))
)
seeds = st.integers(0, 2**31 - 1)
eps_values = st.sampled_from([DEFAULT_EPS, 1e-3, 0.1])


# --------------------------------------------------------------------------- forwards


@SETTINGS
@given(shape=shapes_last, seed=seeds, eps=eps_values)
def test_layer_norm_matches_torch(shape, seed, eps):
    r = rng(seed)
    x = r.normal(size=shape) * r.uniform(0.1, 10) + r.normal() * 5
    g, b = r.normal(size=shape[-1]), r.normal(size=shape[-1])
    want = TF.layer_norm(t(x), (shape[-1],), t(g), t(b), eps).numpy()
    np.testing.assert_allclose(F.layer_norm(x, g, b, eps), want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        F.layer_norm(x, eps=eps), TF.layer_norm(t(x), (shape[-1],), eps=eps).numpy(), atol=1e-10
    )


@SETTINGS
@given(shape=shapes_last, seed=seeds, eps=eps_values)
def test_rms_norm_matches_torch(shape, seed, eps):
    r = rng(seed)
    x = r.normal(size=shape) * r.uniform(0.1, 10)
    g = r.normal(size=shape[-1])
    want = TF.rms_norm(t(x), (shape[-1],), t(g), eps).numpy()
    np.testing.assert_allclose(F.rms_norm(x, g, eps), want, rtol=1e-10, atol=1e-10)


@SETTINGS
@given(shape=shapes_bn, seed=seeds, eps=eps_values, momentum=st.sampled_from([0.1, 0.5, 1.0]))
def test_batch_norm_training_matches_torch(shape, seed, eps, momentum):
    r = rng(seed)
    c = shape[1]
    x = r.normal(size=shape) * 3 + 1
    g, b = r.normal(size=c), r.normal(size=c)
    rm, rv = r.normal(size=c), r.uniform(0.5, 2, size=c)
    rm_t, rv_t = t(rm.copy()), t(rv.copy())
    want = TF.batch_norm(t(x), rm_t, rv_t, t(g), t(b), training=True, momentum=momentum, eps=eps)
    out, new_rm, new_rv = F.batch_norm(
        x,
        gamma=g,
        beta=b,
        running_mean=rm,
        running_var=rv,
        training=True,
        momentum=momentum,
        eps=eps,
    )
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(new_rm, rm_t.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new_rv, rv_t.numpy(), rtol=1e-12, atol=1e-12)


@SETTINGS
@given(shape=shapes_bn, seed=seeds)
def test_batch_norm_eval_matches_torch_and_leaves_stats(shape, seed):
    r = rng(seed)
    c = shape[1]
    x = r.normal(size=shape)
    g, b, rm, rv = r.normal(size=c), r.normal(size=c), r.normal(size=c), r.uniform(0.5, 2, c)
    want = TF.batch_norm(t(x), t(rm), t(rv), t(g), t(b), training=False, eps=DEFAULT_EPS).numpy()
    out, new_rm, new_rv = F.batch_norm(
        x, gamma=g, beta=b, running_mean=rm, running_var=rv, training=False
    )
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(new_rm, rm)
    np.testing.assert_array_equal(new_rv, rv)


def test_batch_norm_does_not_modify_inputs_in_place():
    r = rng(1)
    x = r.normal(size=(8, 3))
    rm, rv = np.zeros(3), np.ones(3)
    F.batch_norm(x, running_mean=rm, running_var=rv, training=True)
    np.testing.assert_array_equal(rm, np.zeros(3))
    np.testing.assert_array_equal(rv, np.ones(3))


def test_running_stats_follow_nn_batchnorm1d_over_steps():
    r = rng(2)
    bn = torch.nn.BatchNorm1d(5, dtype=torch.float64)
    rm, rv = np.zeros(5), np.ones(5)
    g, b = bn.weight.detach().numpy(), bn.bias.detach().numpy()
    for step in range(6):
        x = r.normal(size=(16, 5)) * (step + 1) + step
        want = bn(t(x)).detach().numpy()
        out, rm, rv = F.batch_norm(
            x, gamma=g, beta=b, running_mean=rm, running_var=rv, training=True
        )
        np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(rm, bn.running_mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv, bn.running_var.numpy(), rtol=1e-12)
    bn.eval()
    x = r.normal(size=(4, 5))
    out, _, _ = F.batch_norm(x, gamma=g, beta=b, running_mean=rm, running_var=rv, training=False)
    np.testing.assert_allclose(out, bn(t(x)).detach().numpy(), rtol=1e-10)


def test_worked_example_closed_form():
    # x = [2, 4, -1, 3]: mean 2, biased variance 3.5, RMS sqrt(7.5), all by hand.
    x = np.array([2.0, 4.0, -1.0, 3.0])
    centered = np.array([0.0, 2.0, -3.0, 1.0])
    np.testing.assert_allclose(F.layer_norm(x, eps=0.0), centered / np.sqrt(3.5), rtol=1e-15)
    np.testing.assert_allclose(F.rms_norm(x, eps=0.0), x / np.sqrt(7.5), rtol=1e-15)


# --------------------------------------------------------------------------- backwards


def numeric_grad(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of the scalar function f at x."""
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + h
        fp = f(x)
        x[i] = old - h
        fm = f(x)
        x[i] = old
        grad[i] = (fp - fm) / (2 * h)
    return grad


@SETTINGS
@given(shape=shapes_last, seed=seeds)
def test_layer_norm_backward_matches_autograd(shape, seed):
    r = rng(seed)
    x, dy = r.normal(size=shape) * 2 + 1, r.normal(size=shape)
    g, b = r.normal(size=shape[-1]), r.normal(size=shape[-1])
    xt, gt, bt = t(x, True), t(g, True), t(b, True)
    TF.layer_norm(xt, (shape[-1],), gt, bt, DEFAULT_EPS).backward(t(dy))
    dx, dg, db = F.layer_norm_backward(dy, x, g)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dg, gt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-8, atol=1e-10)


@SETTINGS
@given(shape=shapes_last, seed=seeds)
def test_rms_norm_backward_matches_autograd(shape, seed):
    r = rng(seed)
    x, dy, g = r.normal(size=shape) * 2, r.normal(size=shape), r.normal(size=shape[-1])
    xt, gt = t(x, True), t(g, True)
    TF.rms_norm(xt, (shape[-1],), gt, DEFAULT_EPS).backward(t(dy))
    dx, dg = F.rms_norm_backward(dy, x, g)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dg, gt.grad.numpy(), rtol=1e-8, atol=1e-10)


@SETTINGS
@given(shape=shapes_bn, seed=seeds)
def test_batch_norm_backward_matches_autograd(shape, seed):
    r = rng(seed)
    c = shape[1]
    x, dy = r.normal(size=shape) * 2 + 1, r.normal(size=shape)
    g, b = r.normal(size=c), r.normal(size=c)
    xt, gt, bt = t(x, True), t(g, True), t(b, True)
    TF.batch_norm(xt, None, None, gt, bt, training=True, eps=DEFAULT_EPS).backward(t(dy))
    dx, dg, db = F.batch_norm_backward(dy, x, g)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dg, gt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-8, atol=1e-10)


def _forward_backward_pairs() -> list[tuple]:
    """Every ``<norm>_backward`` of the module with its forward: a new norm is swept too."""
    names = [
        n for n in F.__all__ if n.endswith("_backward") and n[: -len("_backward")] in F.__all__
    ]
    assert len(names) >= 4
    return [(getattr(F, n[: -len("_backward")]), getattr(F, n)) for n in names]


@pytest.mark.parametrize("forward, backward", _forward_backward_pairs(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("seed", [0, 1])
def test_every_backward_matches_finite_differences_of_its_forward(forward, backward, seed):
    """dx and each parameter gradient against central differences of the forward, with a
    random upstream gradient. Arguments come from the signatures: (4, 6) input, so the
    feature axis (LayerNorm, RMSNorm) and the channel axis (BatchNorm, GroupNorm) are both 6;
    an int is the group count (2 divides 6); a float without a default is a learned scalar
    (DyT's alpha, a 0-d array here); the per-feature arrays (γ, β) are random; the backward
    returns dx, then one gradient per scalar or array in the forward's order."""
    r = rng(seed)
    x = r.normal(size=(4, 6)) * 1.5 + 0.5
    dy = r.normal(size=x.shape)
    params = list(inspect.signature(forward, eval_str=True).parameters.values())[1:]
    ints = {p.name: 2 for p in params if p.annotation is int}
    arrays = {
        p.name: np.array(r.uniform(0.5, 1.5)) if p.annotation is float else r.normal(size=6)
        for p in params
        if (p.annotation is float and p.default is p.empty)
        or (p.annotation not in (int, float, bool) and not p.name.startswith("running"))
    }

    def loss(**changed):
        out = forward(changed.pop("x", x), **{**arrays, **ints, **changed})
        return np.sum((out[0] if isinstance(out, tuple) else out) * dy)

    wanted = {}
    for p in list(inspect.signature(backward, eval_str=True).parameters.values())[2:]:
        if p.name in arrays or p.name in ints:
            wanted[p.name] = {**arrays, **ints}[p.name]
    grads = backward(dy, x, **wanted)
    assert len(grads) == 1 + len(arrays), backward.__name__
    for got, name in zip(grads, ["x", *arrays], strict=True):
        start = x if name == "x" else arrays[name]
        want = numeric_grad(lambda z, name=name: loss(**{name: z}), start.copy())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=name)


def test_gamma_gradients_are_summed_over_every_leading_axis():
    r = rng(3)
    x, dy = r.normal(size=(2, 3, 4, 6)), r.normal(size=(2, 3, 4, 6))
    _, dg, db = F.layer_norm_backward(dy, x, np.ones(6))
    assert dg.shape == db.shape == (6,)
    np.testing.assert_allclose(db, dy.reshape(-1, 6).sum(0))


# --------------------------------------------------------------------------- Jacobians


@pytest.mark.parametrize("d", [2, 4, 7])
def test_layer_norm_jacobian_matches_autograd(d):
    x = rng(d).normal(size=d) * 3
    want = torch.autograd.functional.jacobian(
        lambda z: TF.layer_norm(z, (d,), eps=DEFAULT_EPS), t(x)
    ).numpy()
    np.testing.assert_allclose(F.layer_norm_jacobian(x), want, rtol=1e-10, atol=1e-12)


def test_layer_norm_jacobian_batched_and_closed_form_structure():
    x = rng(4).normal(size=(3, 2, 5))
    jac = F.layer_norm_jacobian(x)
    assert jac.shape == (3, 2, 5, 5)
    for i in range(3):
        for j in range(2):
            want = torch.autograd.functional.jacobian(
                lambda z: TF.layer_norm(z, (5,), eps=DEFAULT_EPS), t(x[i, j])
            )
            np.testing.assert_allclose(jac[i, j], want.numpy(), rtol=1e-10, atol=1e-12)
    # Null space: the all-ones direction (centering) and, with eps = 0, x_hat (scale invariance).
    v = x[0, 0]
    j0 = F.layer_norm_jacobian(v, eps=0.0)
    xhat = (v - v.mean()) / v.std()
    np.testing.assert_allclose(j0 @ np.ones(5), 0, atol=1e-12)
    np.testing.assert_allclose(j0 @ xhat, 0, atol=1e-12)


# --------------------------------------------------------------------------- numerics


def test_large_offset_rows_normalize_accurately():
    # mean 1e6, std 1: E[x^2] - E[x]^2 loses every digit here; the two-pass variance does not.
    r = rng(6)
    z = r.normal(size=(4, 256))
    x = 1e6 + z
    want = TF.layer_norm(t(x), (256,)).numpy()
    np.testing.assert_allclose(F.layer_norm(x), want, rtol=1e-7, atol=1e-7)
    # In float32 the one-pass formula E[x^2] - E[x]^2 is pure rounding noise at this offset;
    # the reference must still match float64 arithmetic on the same (rounded) inputs.
    x32 = x.astype(np.float32)
    naive_var = np.mean(x32 * x32, -1) - np.mean(x32, -1) ** 2
    true_var = x32.astype(np.float64).var(-1)
    assert np.max(np.abs(naive_var - true_var)) > 1.0  # the naive formula really fails here
    out32 = F.layer_norm(x32)
    assert out32.dtype == np.float32
    want32 = TF.layer_norm(torch.tensor(x32, dtype=torch.float64), (256,)).numpy()
    np.testing.assert_allclose(out32, want32, atol=1e-6)
    outb, _, _ = F.batch_norm(x.T.copy())
    np.testing.assert_allclose(
        outb.T, TF.batch_norm(t(x.T.copy()), None, None, training=True).numpy().T, atol=1e-6
    )


@pytest.mark.parametrize("eps", [DEFAULT_EPS, 0.0])
def test_constant_rows_give_zeros_not_nan(eps):
    x = np.full((3, 5), 0.1)
    np.testing.assert_array_equal(F.layer_norm(x, eps=eps), 0.0)
    out, _, _ = F.batch_norm(np.full((4, 2), 7.3), eps=eps)
    np.testing.assert_array_equal(out, 0.0)
    dx, _, _ = F.layer_norm_backward(rng(0).normal(size=x.shape), x, eps=eps)
    assert np.all(np.isfinite(dx))
    assert np.all(np.isfinite(F.layer_norm_jacobian(x[0], eps=eps)))
    np.testing.assert_array_equal(F.rms_norm(np.zeros((2, 3)), eps=eps), 0.0)


def test_half_precision_is_computed_in_float32_and_returned_as_half():
    r = rng(7)
    x = (r.normal(size=(8, 512)) * 4 + 30).astype(np.float16)
    out = F.layer_norm(x)
    assert out.dtype == np.float16
    want = TF.layer_norm(torch.tensor(x, dtype=torch.float32), (512,)).numpy()
    np.testing.assert_allclose(out.astype(np.float32), want, atol=2e-3)
    assert F.rms_norm(x).dtype == np.float16
    assert F.batch_norm(x)[0].dtype == np.float16


def test_every_backward_and_the_running_statistics_keep_the_input_dtype():
    # (4, 6): the channel axis of BatchNorm and the feature axis of LayerNorm/RMSNorm are both
    # 6, so one set of arrays fits every backward of the module (new norms are swept too).
    r = rng(8)
    x, dy = (r.normal(size=(4, 6)).astype(np.float32) for _ in range(2))
    gamma = r.normal(size=6).astype(np.float32)
    backwards = [getattr(F, n) for n in F.__all__ if n.endswith("_backward")]
    assert len(backwards) >= 3
    for fn in backwards:
        # Arguments from the signature, not from guessed names: after (dout, x), an int is the
        # group count (2 divides the 6 channels), a float (eps) keeps its default, a float
        # without one is a learned scalar (DyT's alpha), and the array left is the scale.
        kwargs = {}
        for p in list(inspect.signature(fn, eval_str=True).parameters.values())[2:]:
            if p.annotation is int:
                kwargs[p.name] = 2
            elif p.annotation is float and p.default is p.empty:
                kwargs[p.name] = np.float32(0.7)
            elif p.annotation is not float:
                kwargs[p.name] = gamma
        grads = fn(dy, x, **kwargs)
        assert [g.dtype for g in grads] == [np.float32] * len(grads), fn.__name__
    rm, rv = np.zeros(6, np.float32), np.ones(6, np.float16)
    for training in (True, False):
        _, new_rm, new_rv = F.batch_norm(
            x.astype(np.float64), running_mean=rm, running_var=rv, training=training
        )
        assert (new_rm.dtype, new_rv.dtype) == (np.float32, np.float16)


def test_integer_input_is_promoted():
    np.testing.assert_allclose(
        F.layer_norm([[2, 4, -1, 3]], eps=0.0)[0], np.array([0, 2, -3, 1]) / np.sqrt(3.5)
    )


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (
            lambda: F.layer_norm(np.ones((2, 4)), np.ones(3)),
            ValueError,
            ["gamma", "(3,)", "(4,)", "(2, 4)"],
        ),
        (
            lambda: F.layer_norm(np.ones((2, 4)), None, np.ones((4, 1))),
            ValueError,
            ["beta", "(4, 1)"],
        ),
        (lambda: F.layer_norm(np.ones((2, 0))), ValueError, ["(2, 0)", "empty"]),
        (lambda: F.rms_norm(np.ones((2, 4)), np.ones(5)), ValueError, ["gamma", "(5,)"]),
        (lambda: F.batch_norm(np.ones(4)), ValueError, ["(4,)", "(N, C)"]),
        (lambda: F.batch_norm(np.ones((1, 4))), ValueError, ["more than 1 value"]),
        (
            lambda: F.batch_norm(np.ones((3, 4)), gamma=np.ones(3)),
            ValueError,
            ["gamma", "(3,)", "channel"],
        ),
        (lambda: F.batch_norm(np.ones((3, 4)), training=False), ValueError, ["running_mean"]),
        (lambda: F.layer_norm(np.array([["a", "b"]])), TypeError, ["numeric", "<U1"]),
        (lambda: F.layer_norm(np.ones((2, 2), dtype=complex)), TypeError, ["complex"]),
        (lambda: F.layer_norm(np.ones((2, 2)), eps=-1.0), ValueError, ["eps"]),
        (
            lambda: F.layer_norm_backward(np.ones((2, 3)), np.ones((2, 4))),
            ValueError,
            ["dout", "(2, 3)"],
        ),
        (lambda: F.layer_norm(np.float64(3.0)), ValueError, ["scalar"]),
    ],
)
def test_bad_input_raises_clear_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in message: {info.value}"
