"""normedu.stats: hook-based per-layer statistics, checked against a manual forward/backward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normedu.stats import StatsRecorder, histogram, saturation


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(6, 20), nn.Tanh(), nn.Linear(20, 20), nn.ReLU(), nn.Linear(20, 3)
    )


def _manual(model, x, y):
    """Activations and dLoss/dactivation by an explicit forward with retain_grad (no hooks)."""
    h1 = torch.tanh(model[0](x))
    h2 = torch.relu(model[2](h1))
    h1.retain_grad()
    h2.retain_grad()
    F.cross_entropy(model[4](h2), y).backward()
    return [h1, h2]


def test_activation_and_gradient_stats_match_manual_computation():
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 6, generator=gen) * 3, torch.randint(0, 3, (32,), generator=gen)
    model = _model()
    with StatsRecorder(model) as rec:
        F.cross_entropy(model(x), y).backward()
    recs = rec.records
    ref = _manual(_model(), x, y)
    assert [r.kind for r in recs] == ["Tanh", "ReLU"] and [r.index for r in recs] == [0, 1]
    assert [r.name for r in recs] == ["1", "3"]
    for r, h in zip(recs, ref, strict=False):
        assert r.shape == (32, 20)
        assert r.act_mean == pytest.approx(float(h.detach().mean()), rel=1e-5, abs=1e-7)
        assert r.act_std == pytest.approx(float(h.detach().std(unbiased=False)), rel=1e-5)
        assert r.grad_norm == pytest.approx(float(h.grad.norm()), rel=1e-5)
        assert r.grad_std == pytest.approx(float(h.grad.std(unbiased=False)), rel=1e-5)
        assert r.grad_mean == pytest.approx(float(h.grad.mean()), rel=1e-4, abs=1e-9)
    assert recs[0].saturation == pytest.approx(100 * float((ref[0].abs() > 0.97).float().mean()))
    assert recs[1].saturation == pytest.approx(100 * float((ref[1] == 0).float().mean()))


def test_hooks_are_removed_and_model_output_unchanged():
    model = _model()
    x = torch.randn(4, 6)
    before = model(x).detach()
    with StatsRecorder(model):
        during = model(x).detach()
    assert all(not m._forward_hooks for m in model.modules())
    assert torch.equal(before, during)
    rec = StatsRecorder(model).attach()
    with pytest.raises(RuntimeError, match="already attached"):
        rec.attach()
    rec.close()
    rec.close()  # idempotent
    assert all(not m._forward_hooks for m in model.modules())


def test_no_backward_means_nan_gradient_stats():
    model = _model()
    with torch.no_grad(), StatsRecorder(model) as rec:
        model(torch.randn(4, 6))
    assert all(np.isnan(r.grad_norm) and r.grad_hist is None for r in rec.records)


def test_any_model_with_a_predicate_and_nested_modules():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(nn.Linear(3, 5), nn.GELU())
            self.head = nn.Linear(5, 2)

        def forward(self, x):
            return self.head(self.enc(x))

    net = Net()
    with StatsRecorder(net, select=lambda n, m: isinstance(m, nn.Linear)) as rec:
        out = net(torch.randn(7, 3))
    assert [r.name for r in rec.records] == ["enc.0", "head"]
    assert rec.records[1].act_std == pytest.approx(
        float(out.detach().std(unbiased=False)), rel=1e-5
    )
    assert np.isnan(rec.records[0].saturation)  # not defined for Linear
    assert {"index", "name", "act_std", "grad_norm"} <= set(rec.table()[0])


def test_saturation_definitions():
    t = torch.tensor([0.0, 0.5, 0.98, -0.99])
    assert saturation(nn.Tanh(), t) == pytest.approx(50.0)
    assert saturation(nn.ReLU(), torch.tensor([0.0, 0.0, 1.0, 2.0])) == pytest.approx(50.0)
    assert saturation(nn.Sigmoid(), torch.tensor([0.01, 0.5, 0.99, 0.6])) == pytest.approx(50.0)


def test_histogram_is_a_density_on_a_symmetric_range():
    v = torch.tensor([-1.0, 0.0, 0.5, 2.0, float("nan")])
    counts, edges = histogram(v, bins=8)
    assert edges[0] == -2.0 and edges[-1] == 2.0
    assert np.sum(counts * np.diff(edges)) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "bad, exc",
    [
        (dict(model="not a model"), TypeError),
        (dict(bins=0), ValueError),
        (dict(select=3), TypeError),
    ],
)
def test_bad_arguments(bad, exc):
    kw = dict(model=_model())
    kw.update(bad)
    with pytest.raises(exc):
        StatsRecorder(**kw)


def test_no_matching_module():
    with pytest.raises(ValueError, match="no module"):
        StatsRecorder(nn.Sequential(nn.Linear(2, 2))).attach()
