"""normedu.experiments.scale_invariance: the weight-decay equilibrium against simulations of
the norm's recursion, and the orthogonality of the gradient against autograd."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normedu.experiments import scale_invariance as V


def test_equilibrium_is_the_fixed_point_of_the_recursion():
    lr, wd, c = 0.3, 0.05, 2.0
    u = 0.01  # start far below the equilibrium; plain Python, not the module's loop
    for _ in range(5000):
        u = (1 - lr * wd) ** 2 * u + lr**2 * c**2 / u
    assert V.equilibrium_norm(lr, wd, c) == pytest.approx(math.sqrt(u), rel=1e-12)
    # the first-order formula misses ‖w‖⁴ by the factor (2 - ηλ)/2, i.e. ‖w‖ by its 4th root
    ratio = V.equilibrium_norm(lr, wd, c, first_order=True) / math.sqrt(u)
    assert ratio == pytest.approx((1 - lr * wd / 2) ** 0.25, rel=1e-12)
    assert ratio != pytest.approx(1, rel=1e-3)  # the two formulas differ at this ηλ
    np.testing.assert_allclose(V.norm_recursion(0.1, lr, wd, c, 5000)[-1], math.sqrt(u))
    with pytest.raises(ValueError):
        V.equilibrium_norm(lr, 0.0, c)


def test_vector_sgd_with_an_orthogonal_gradient_settles_there():
    # The recursion assumes only ⟨w, g⟩ = 0 and ‖g‖ = c/‖w‖: simulate the vectors themselves.
    rng = np.random.default_rng(0)
    lr, wd, c = 0.5, 0.02, 3.0
    w = rng.normal(size=50) * 5
    for _ in range(3000):
        r = rng.normal(size=50)
        r -= (r @ w) / (w @ w) * w  # a random direction orthogonal to w
        g = c / np.linalg.norm(w) * r / np.linalg.norm(r)
        w = (1 - lr * wd) * w - lr * g
    assert np.linalg.norm(w) == pytest.approx(V.equilibrium_norm(lr, wd, c), rel=1e-9)


def test_gradient_is_orthogonal_and_scales_inversely_with_the_weights():
    net = V.model(hidden=8, seed=1)
    net[1].eps = 0.0  # exact scale invariance
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, 64, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 10, (16,), generator=gen)
    w0 = net[0].weight.detach().clone()

    def loss_at(a):
        net[0].weight.data = a * w0
        return F.cross_entropy(net(x), y)

    net.zero_grad()
    loss1 = loss_at(1.0)
    loss1.backward()
    g1 = net[0].weight.grad.clone()
    # dL(aW)/da at a = 1, by autograd through a scalar a, against ⟨W, ∇L(W)⟩
    a = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    da = torch.autograd.grad(F.cross_entropy(net[1:](F.linear(x, a * w0)), y), a)[0]
    assert float(da) == pytest.approx(float((w0 * g1).sum()), abs=1e-12)
    assert abs(float((w0 * g1).sum())) / float(w0.norm() * g1.norm()) < 1e-12
    net.zero_grad()
    loss3 = loss_at(3.0)
    loss3.backward()
    assert loss3.item() == pytest.approx(loss1.item(), rel=1e-12)
    torch.testing.assert_close(net[0].weight.grad, g1 / 3, rtol=1e-10, atol=1e-14)


def test_train_follows_the_norm_identity_and_grows_without_decay():
    plain = V.train(lr=0.5, wd=0.0, steps=6)
    decay = V.train(lr=0.5, wd=0.1, steps=6)
    assert plain["step_residual"] < 1e-5 and decay["step_residual"] < 1e-5
    assert np.all(np.diff(np.append(plain["norm"], plain["final_norm"])) > 0)
    np.testing.assert_allclose(plain["eff_lr"], 0.5 / plain["norm"] ** 2)
    assert np.abs(plain["cos"]).max() < 1e-4
    # With g ⟂ W the step (1 − ηλ)W − ηg turns W by atan(η‖g‖ / ((1 − ηλ)‖W‖)).
    expected = np.arctan(0.5 * decay["grad_norm"] / ((1 - 0.5 * 0.1) * decay["norm"]))
    np.testing.assert_allclose(decay["turn"], expected, rtol=1e-4)


def test_runs_side_by_side_match_one_network_trained_alone():
    # Reference: the nn.Sequential of V.model, its own autograd and a written-out SGD step,
    # on the batches the seed's generator draws (the reshuffle at the end of a pass included).
    from normedu import seeding
    from normedu.data import digits

    lr, steps, batch = 0.5, 4, 600  # 1 347 training digits: two batches, then a reshuffle
    got = V.train_many(lr, (0.0, 0.1), steps, hidden=8, batch=batch, seeds=(2, 1))
    data = digits()
    x, y = data.x_train.double(), data.y_train
    for run, wd, seed in zip(got, (0.0, 0.1), (2, 1), strict=True):
        net = V.model(8, seed)
        gen = seeding.generator(seed)
        perm, pos, norms, losses = torch.randperm(len(x), generator=gen), 0, [], []
        for _ in range(steps):
            if pos + batch > len(x):
                perm, pos = torch.randperm(len(x), generator=gen), 0
            idx = perm[pos : pos + batch]
            pos += batch
            net.zero_grad()
            loss = F.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            norms.append(float(net[0].weight.detach().norm()))
            losses.append(loss.item())
            with torch.no_grad():
                for p in net.parameters():
                    p -= lr * (p.grad + (wd * p if p is net[0].weight else 0))
        np.testing.assert_allclose(run["norm"], norms, rtol=1e-12)
        np.testing.assert_allclose(run["loss"], losses, rtol=1e-12)
        assert run["final_norm"] == pytest.approx(float(net[0].weight.detach().norm()), rel=1e-12)
    with pytest.raises(ValueError, match="one weight decay per seed"):
        V.train_many(lr, (0.0,), 1, seeds=(0, 1))
