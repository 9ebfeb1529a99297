"""normedu.experiments.layernorm and the layernorm claims."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normedu import nn
from normedu.experiments import layernorm as L


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("NORMEDU_PRESET", "cpu")
    monkeypatch.setitem(L.SIZES, "cpu", L.GammaSize(depth=2, width=32, epochs=2))
    L.trained_gamma.cache_clear()
    yield
    L.trained_gamma.cache_clear()
    torch.set_num_threads(threads)


def test_walkthrough_matches_the_seed_numbers_and_torch():
    w = L.walkthrough((2.0, 4.0, -1.0, 3.0))
    assert w["mu"] == 2.0 and w["var"] == 3.5
    np.testing.assert_allclose(w["x_hat"], [0, 1.069, -1.604, 0.535], atol=5e-4)
    ref = torch.nn.functional.layer_norm(
        torch.tensor([[2.0, 4.0, -1.0, 3.0]], dtype=torch.float64), (4,)
    )
    np.testing.assert_allclose(w["x_hat"], ref[0].numpy(), rtol=1e-12)
    assert abs(w["x_hat_mean"]) < 1e-15 and w["x_hat_var"] == pytest.approx(3.5 / (3.5 + 1e-5))


def test_walkthrough_affine_and_errors():
    w = L.walkthrough((1.0, 3.0), eps=0.0, gamma=(2.0, 1.0), beta=(0.5, -1.0))
    np.testing.assert_allclose(w["y"], [2 * -1 + 0.5, 1 * 1 - 1.0])
    with pytest.raises(ValueError, match="1-D"):
        L.walkthrough([[1.0, 2.0]])


def test_properties_are_exact():
    pr = L.properties(d=8)
    assert pr == {
        "sample_independent": 0.0,
        "train_eval": 0.0,
        "length_agnostic": 0.0,
        "gradcheck": True,
    }


class BatchStatisticsInTraining(torch.nn.Module):
    """A norm with BatchNorm's habits: in train mode its statistics are those of every element
    of the batch, in eval mode those of each token (LayerNorm's)."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.bias = torch.nn.Parameter(torch.zeros(d))

    def forward(self, x):
        dims = tuple(range(x.dim())) if self.training else (-1,)
        xc = x - x.mean(dim=dims, keepdim=True)
        return (
            xc / torch.sqrt((xc * xc).mean(dim=dims, keepdim=True) + 1e-5) * self.weight + self.bias
        )


def test_properties_would_show_a_norm_that_mixes_samples(monkeypatch):
    # Negative control: LayerNorm has no train/eval switch, so its train_eval of 0 above holds
    # by construction; measured on a norm that has one, the same numbers are far from 0.
    monkeypatch.setattr(L, "LayerNorm", BatchStatisticsInTraining)
    pr = L.properties(d=8)
    assert pr["sample_independent"] > 0.1 and pr["train_eval"] > 0.1, pr
    assert pr["gradcheck"]  # the control is a smooth function too


def test_gpt2_counts_match_hand_count_and_hugging_face():
    c = L.gpt2_small_counts()
    d, v, t, f, n = 768, 50257, 1024, 3072, 12
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    assert c["blocks"] == n * block
    assert c["total"] == v * d + t * d + n * block + 2 * d == L.HF_GPT2_SMALL_PARAMS
    assert c["layernorms"] == 25 and c["per_layernorm"] == 1536 and c["layernorm_total"] == 38_400
    assert all(p.device.type == "meta" for p in L.gpt2_small().parameters())


def test_logit_floor_closed_form_and_bound():
    # n = 2: normalized logits are exactly (+1, -1) -> p = e / (e + 1/e).
    assert L.logit_floor(2) == pytest.approx(-math.log(math.e / (math.e + math.exp(-1))))
    floor = L.logit_floor(10)
    assert floor == pytest.approx(0.2784, abs=1e-4)
    # No layer-normalized logit vector beats the floor (random search as an independent check).
    z = torch.nn.functional.layer_norm(
        torch.randn(20000, 10, dtype=torch.float64) * 5, (10,), eps=0.0
    )
    ce = torch.nn.functional.cross_entropy(z, z.argmax(1), reduction="none")
    assert float(ce.min()) >= floor - 1e-9
    with pytest.raises(ValueError):
        L.logit_floor(1)


def test_affine_demo_respects_the_floor():
    af = L.affine_demo(epochs=3)
    assert af["no_affine"]["final_loss"] >= af["floor"] - 1e-6
    assert af["gamma"].shape == (10,)
    assert len(af["affine"]["loss"]) == 3


def test_trained_gamma_collects_every_layernorm():
    tg = L.trained_gamma()
    assert tg["gamma"].shape == (2 * 32,) and tg["beta"].shape == (64,)
    assert tg["config"]["layernorms"] == 2
    assert 0 <= tg["share_near_1"] <= 1 and tg["quantiles"][0] <= tg["quantiles"][2]
    assert not np.allclose(tg["gamma"], 1.0)  # training moved them


def test_position_stats():
    ps = L.position_stats(batch=8, t=4, d=6)
    assert ps["per_position_mean"].shape == (4, 6) and ps["pooled_mean"].shape == (6,)
    np.testing.assert_allclose(ps["pooled_mean"], ps["per_position_mean"].mean(0), atol=1e-6)
    assert ps["spread"] > 0.5


def test_var_pitfall_matches_the_closed_form_ratio():
    rows = L.var_pitfall(dims=(2, 4, 768), rows=64)
    assert [r["D"] for r in rows] == [2, 4, 768]
    for r in rows:
        d = r["D"]
        assert r["ratio"] == pytest.approx(d / (d - 1))
        # Unbiased variance is D/(D-1) times larger, so the output shrinks by sqrt((D-1)/D).
        assert r["scale"] == pytest.approx(math.sqrt((d - 1) / d), rel=1e-4)
    # At D = 2 the normalized values are ±1 (biased) vs ±1/sqrt(2): the gap is 1 - 1/sqrt(2).
    assert rows[0]["max_diff"] == pytest.approx(1 - 1 / math.sqrt(2), rel=1e-4)
    assert rows[2]["max_diff"] < 1e-2


def test_gpt2_closed_form_matches_the_module_count():
    assert L.gpt2_small_closed_form() == L.gpt2_small_counts()["total"] == 124_439_808


def test_small_width_model_at_one_feature_outputs_beta():
    # D = 1: x_hat = 0, so the LayerNorm outputs beta and the logits are head(relu(beta)).
    model = L.small_width_model(1, "layernorm", seed=0)
    ln, head = model[1], model[-1]
    assert isinstance(ln, nn.LayerNorm) and ln.weight.shape == (1,)  # the course's own
    with torch.no_grad():
        ln.weight.fill_(2.5)
        ln.bias.fill_(0.7)
        logits = model(torch.randn(20, 64, generator=torch.Generator().manual_seed(1)))
        expected = head.weight[:, 0] * 0.7 + head.bias  # relu(0.7) = 0.7
    torch.testing.assert_close(logits, expected.expand(20, 10), rtol=0, atol=1e-6)


def test_small_width_and_works_from(monkeypatch):
    res = L.small_width(widths=(1, 16), seeds=(0,), epochs=1)
    assert res["acc"]["layernorm"][0][0] <= res["largest_class"] + 1e-9  # one output
    assert res["largest_class"] < res["two_largest"] < 0.25
    fake = {
        "widths": [1, 2, 4, 8],
        "acc": {"layernorm": [[0.1], [0.2], [0.9], [0.95]], "none": [[0.3], [0.5], [0.91], [0.94]]},
    }
    assert L.works_from(fake) == 4
    fake["acc"]["layernorm"][-1] = [0.5]  # failing at the largest width: never works
    assert L.works_from(fake) is None
