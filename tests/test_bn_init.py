"""normedu.experiments.bn_init: the gradient-norm ratio at initialization, against a forward
and backward pass written out with torch's functional ops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normedu.data import digits
from normedu.experiments import bn_init as I
from normedu.mlp import deep_mlp, hidden_linears


def test_ratio_matches_a_functional_forward_and_backward():
    depth, seed = 6, 3
    ratio, sigma = I.init_gradient_ratio(depth, "batchnorm", seed, width=16, batch=32)
    # Same weights and batch, the network written out by hand: linear, batch statistics, relu.
    model = deep_mlp(64, 16, 10, depth, norm="batchnorm", act="relu", seed=seed, bias=False)
    ws = [lin.weight.detach().clone().requires_grad_() for lin in hidden_linears(model)]
    head = model[-1]
    d = digits()
    idx = torch.randperm(len(d.x_train), generator=torch.Generator().manual_seed(seed))[:32]
    h, stds = d.x_train[idx], []
    for w in ws:
        z = h @ w.T
        mu, var = z.mean(0), z.var(0, correction=0)
        stds.append(var.detach().sqrt())
        h = torch.relu((z - mu) / torch.sqrt(var + 1e-5))
    loss = F.cross_entropy(h @ head.weight.detach().T + head.bias.detach(), d.y_train[idx])
    grads = torch.autograd.grad(loss, ws)
    assert ratio == pytest.approx(float(grads[0].norm() / grads[-1].norm()), rel=1e-4)
    # The first BN input is W_1 x, not W relu(x_hat): it is left out of the mean.
    assert sigma == pytest.approx(float(torch.cat(stds[1:]).mean()), rel=1e-5)


def test_fit_rate_recovers_a_geometric_growth():
    depths = (2, 5, 9)
    ratios = [[3.0 * 1.3 ** (d - 1)] * 2 for d in depths]
    assert I.fit_rate(depths, ratios) == pytest.approx(1.3, rel=1e-12)
    assert pytest.approx(math.sqrt(math.pi / (math.pi - 1))) == I.RELU_BN_RATE


def test_growth_with_depth_separates_batchnorm_from_no_norm():
    g = I.growth_with_depth(depths=(2, 12), seeds=(0, 1), width=32, batch=32)
    assert g["rate"]["batchnorm"] > 1.1 > g["rate"]["none"]
    assert np.isnan(I.init_gradient_ratio(2, "none", 0, width=8, batch=8)[1])
