"""GroupNorm and InstanceNorm (normedu.functional and normedu.nn) against independent references.

- forwards against torch.nn.functional.group_norm / instance_norm / layer_norm (float64);
- the hand-written backward against torch autograd and central finite differences, always with
  a random upstream gradient (all-ones upstream gives dx = 0 for any normalization);
- the two limits: G = 1 is LayerNorm over (C, *spatial), G = C is InstanceNorm;
- the torch module against torch.nn.GroupNorm, forward and backward;
- dtypes and clear errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from normedu import functional as F
from normedu import nn as nnu

# (shape, G): no spatial axis, one, two and three spatial axes, G = 1 and G = C included.
CASES = [((3, 6), 2), ((2, 4, 5), 4), ((2, 6, 3, 4), 3), ((2, 4, 2, 3, 2), 1), ((1, 8, 3), 8)]


def t(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def sample(shape, seed):
    r = np.random.default_rng(seed)
    c = shape[1]
    x = r.normal(size=shape) * r.uniform(0.5, 3) + r.normal() * 4
    return x, r.normal(size=c), r.normal(size=c), r.normal(size=shape)


@pytest.mark.parametrize("shape, G", CASES)
def test_forward_and_backward_match_torch_autograd(shape, G):
    x, g, b, dy = sample(shape, seed=len(shape) * 10 + G)
    for eps in (1e-5, 0.1):
        want = TF.group_norm(t(x), G, t(g), t(b), eps).numpy()
        np.testing.assert_allclose(F.group_norm(x, G, g, b, eps), want, rtol=1e-10, atol=1e-10)
    xt, gt, bt = t(x, True), t(g, True), t(b, True)
    TF.group_norm(xt, G, gt, bt, 1e-5).backward(t(dy))
    dx, dg, db = F.group_norm_backward(dy, x, G, g)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dg, gt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-8, atol=1e-10)
    # Without gamma/beta: identity affine.
    np.testing.assert_allclose(
        F.group_norm(x, G), TF.group_norm(t(x), G).numpy(), rtol=1e-10, atol=1e-10
    )


def numeric_grad(f, x, h=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        fp = f(x)
        x[i] = old - h
        fm = f(x)
        x[i] = old
        grad[i] = (fp - fm) / (2 * h)
    return grad


def test_backward_matches_finite_differences():
    x, g, b, dy = sample((2, 4, 3), seed=5)
    dx, dg, db = F.group_norm_backward(dy, x, 2, g)
    kw = dict(rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        dx, numeric_grad(lambda z: np.sum(F.group_norm(z, 2, g, b) * dy), x.copy()), **kw
    )
    np.testing.assert_allclose(
        dg, numeric_grad(lambda z: np.sum(F.group_norm(x, 2, z, b) * dy), g.copy()), **kw
    )
    np.testing.assert_allclose(
        db, numeric_grad(lambda z: np.sum(F.group_norm(x, 2, g, z) * dy), b.copy()), **kw
    )


def test_one_group_is_layernorm_and_c_groups_is_instancenorm():
    x, g, b, _ = sample((3, 4, 5, 2), seed=6)
    # G = 1: LayerNorm over (C, H, W) with no affine, then GroupNorm's per-channel gamma/beta.
    ln = TF.layer_norm(t(x), x.shape[1:]).numpy()
    np.testing.assert_allclose(F.group_norm(x, 1), ln, rtol=1e-10, atol=1e-10)
    # G = C: InstanceNorm, torch's instance_norm with per-channel weight and bias.
    want = TF.instance_norm(t(x), weight=t(g), bias=t(b), eps=1e-5).numpy()
    np.testing.assert_allclose(F.group_norm(x, 4, g, b), want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(F.instance_norm(x, g, b), want, rtol=1e-10, atol=1e-10)


def test_a_sample_does_not_depend_on_its_batchmates():
    x, g, b, _ = sample((5, 6, 4), seed=7)
    alone = F.group_norm(x[:1], 3, g, b)
    np.testing.assert_array_equal(F.group_norm(x, 3, g, b)[:1], alone)


def test_dtypes_are_preserved_for_every_output():
    x, g, b, dy = sample((2, 4, 3), seed=8)
    x32, dy32 = x.astype(np.float32), dy.astype(np.float32)
    assert F.group_norm(x32, 2, g, b).dtype == np.float32
    assert F.instance_norm(x32.astype(np.float16)).dtype == np.float16
    outs = F.group_norm_backward(dy32, x32, 2, g.astype(np.float32))
    assert [o.dtype for o in outs] == [np.float32] * 3
    np.testing.assert_allclose(
        F.group_norm(x32, 2, g, b), TF.group_norm(t(x32), 2, t(g), t(b)).numpy(), atol=1e-6
    )


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: F.group_norm(np.ones((2, 6, 3)), 4), ["C = 6", "G = 4", "divisible"]),
        (lambda: F.group_norm_backward(np.ones((2, 6)), np.ones((2, 6)), 5), ["C = 6", "G = 5"]),
        (lambda: F.group_norm(np.ones(6), 2), ["(6,)", "(N, C"]),
        (lambda: F.group_norm(np.ones((2, 4)), 0), ["positive"]),
        (lambda: F.group_norm(np.ones((2, 4)), 2, np.ones(2)), ["gamma", "(2,)", "(4,)"]),
        (lambda: F.group_norm_backward(np.ones((2, 3)), np.ones((2, 4)), 2), ["dout", "(2, 3)"]),
        (lambda: nnu.GroupNorm(4, 6), ["C = 6", "G = 4"]),
        (lambda: nnu.group_norm(torch.ones(2, 6), 4), ["C = 6", "G = 4"]),
    ],
)
def test_bad_input_raises_clear_errors(call, words):
    with pytest.raises(ValueError) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in message: {info.value}"


@pytest.mark.parametrize("shape, G", [((4, 8), 2), ((2, 6, 3, 3), 3)])
def test_module_matches_torch_groupnorm_forward_and_backward(shape, G):
    c = shape[1]
    mine, ref = nnu.GroupNorm(G, c).double(), torch.nn.GroupNorm(G, c).double()
    gen = torch.Generator().manual_seed(G)
    with torch.no_grad():
        w, b = torch.randn(c, generator=gen, dtype=torch.float64), torch.randn(c, generator=gen)
        mine.weight.copy_(w), mine.bias.copy_(b), ref.weight.copy_(w), ref.bias.copy_(b)
    x1 = (torch.randn(*shape, generator=gen, dtype=torch.float64) * 3 + 2).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    up = torch.randn(*shape, generator=gen, dtype=torch.float64)
    y1, y2 = mine(x1), ref(x2)
    torch.testing.assert_close(y1, y2)
    y1.backward(up), y2.backward(up)
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(mine.weight.grad, ref.weight.grad)
    torch.testing.assert_close(mine.bias.grad, ref.bias.grad)


def test_make_norm_builds_groupnorm_with_groups_of_eight():
    m = nnu.make_norm("GroupNorm", 64)
    assert isinstance(m, nnu.GroupNorm) and m.groups == 8
    assert nnu.make_norm("groupnorm", 12).groups == 1
    half = torch.randn(3, 16).to(torch.bfloat16)
    assert nnu.make_norm("groupnorm", 16)(half).dtype == torch.bfloat16
