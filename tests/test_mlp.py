"""normedu.mlp: deep MLP builder with a norm switch."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normedu import nn as nnn
from normedu.mlp import deep_mlp, hidden_linears, norm_layers


@pytest.mark.parametrize(
    "norm, kind",
    [
        ("none", None),
        ("batchnorm", nnn.BatchNorm1d),
        ("layernorm", nnn.LayerNorm),
        ("rmsnorm", nnn.RMSNorm),
        ("groupnorm", nnn.GroupNorm),
    ],
)
def test_structure(norm, kind):
    m = deep_mlp(12, 16, 3, depth=4, norm=norm, act="relu")
    assert len([x for x in m if isinstance(x, nn.Linear)]) == 5
    assert len([x for x in m if isinstance(x, nn.ReLU)]) == 4
    norms = norm_layers(m)
    assert len(norms) == (0 if kind is None else 4)
    assert all(isinstance(x, kind) for x in norms)
    assert m(torch.randn(5, 12)).shape == (5, 3)
    assert len(hidden_linears(m)) == 4


@pytest.mark.parametrize("act, gain", [("tanh", 5 / 3), ("relu", math.sqrt(2)), ("identity", 1.0)])
def test_default_gain_sets_weight_std(act, gain):
    m = deep_mlp(400, 400, 2, depth=2, act=act, seed=0)
    w = hidden_linears(m)[1].weight
    # 160,000 draws: the sample std is within 1% of gain / sqrt(fan_in) with near certainty.
    assert abs(float(w.detach().std()) / (gain / 20.0) - 1) < 0.01


def test_explicit_gain_and_seed():
    a = deep_mlp(8, 300, 2, depth=1, gain=3.0, seed=1)
    b = deep_mlp(8, 300, 2, depth=1, gain=3.0, seed=1)
    c = deep_mlp(8, 300, 2, depth=1, gain=3.0, seed=2)
    assert torch.equal(a[0].weight, b[0].weight) and not torch.equal(a[0].weight, c[0].weight)
    assert abs(float(a[0].weight.detach().std()) / (3.0 / math.sqrt(8)) - 1) < 0.05


def test_linear_identity_net_scales_by_gain_per_layer():
    # Independent check of the init: a wide linear net's output std ~ gain**depth.
    m = deep_mlp(1000, 1000, 1000, depth=3, act="identity", gain=1.5, seed=0)
    x = torch.randn(256, 1000, generator=torch.Generator().manual_seed(123))
    with torch.no_grad():
        h = x
        for lin in hidden_linears(m):
            h = lin(h)
    assert abs(float(h.std()) / float(x.std()) / 1.5**3 - 1) < 0.05


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(depth=0), "depth"),
        (dict(norm="weird"), "unknown norm"),
        (dict(act="swish"), "activation"),
        (dict(gain=-1.0), "gain"),
        (dict(width=2.5), "width"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = dict(d_in=4, width=8, d_out=2, depth=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        deep_mlp(**args)
