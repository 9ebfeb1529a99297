"""normedu.experiments.batchnorm (small sizes) and the batchnorm claims."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normedu.experiments import batchnorm as B

TINY = B.SweepSize(batch_sizes=(2, 32), epochs=1, seeds=(0,), depth=2, width=32)


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    # One thread: these are tiny models, and the machine is shared.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("NORMEDU_PRESET", "cpu")
    monkeypatch.setitem(B.SIZES, "cpu", TINY)
    fns = (B.train_mlp, B.batch_size_sweep, B.distribution_shift, B.syncbn_simulation)
    for fn in fns:
        fn.cache_clear()
    yield
    torch.set_num_threads(threads)
    for fn in fns:
        fn.cache_clear()


def test_sweep_for_store_structure_and_small_batch_failure():
    import json

    from normedu.experiments import registered

    assert registered()[B.STORED_SWEEP] is B.sweep_for_store
    # One sweep for both concerns: what the store writes, and what the chapter shows.
    sw = B.sweep_for_store("cpu")
    assert sw["preset"] == "cpu" and sw["batch_sizes"] == [2, 32] and sw["epochs"] == 1
    json.dumps(sw)
    for norm in ("batchnorm", "groupnorm", "layernorm"):
        assert len(sw[norm]) == 2 and all(0 <= e <= 1 for e in sw[norm])
    # BN trained at batch 2 is far worse than LN at batch 2 (the failure the chapter shows).
    assert sw["batchnorm"][0] > sw["layernorm"][0] + 0.1
    with pytest.raises(ValueError, match="preset"):
        B.sweep_for_store("tpu")


def test_train_mlp_error_matches_independent_evaluation():
    from normedu.data import digits

    model, err = B.train_mlp("layernorm", 32, 1, 0, 2, 32)
    d = digits()
    with torch.no_grad():
        wrong = (model(d.x_test).argmax(1) != d.y_test).float().mean()
    assert err == pytest.approx(float(wrong))
    assert not model.training


def test_eval_mode_demo():
    ev = B.eval_mode_demo()
    assert ev["eval_full"] == ev["eval_batch1"]  # eval mode does not depend on the batch
    assert ev["max_logit_diff_eval"] < 1e-4
    assert ev["train_sorted8"] < ev["eval_full"]


def test_distribution_shift_and_recalibration():
    sh = B.distribution_shift(contrast=0.5, brightness=1.0)
    assert sh["bn_shift"] < sh["bn_clean"]
    assert sh["bn_recalibrated"] > sh["bn_shift"]
    # The cached model itself was not modified by the recalibration (it works on a copy).
    m, _ = B.train_mlp("batchnorm", 32, 1, 0, 2, 32)
    assert not m.training


def test_padding_demo():
    pad = B.padding_demo()
    assert (
        pad["ln_max_diff"] == 0.0 and pad["bn_max_diff"] > 1e-3 and pad["masked_bn_max_diff"] > 1e-3
    )
    # 4 sequences padded to 6: (6+5+4+6)/24 real -> 3/24 padding.
    assert pad["pad_share_a"] == pytest.approx(3 / 24)
    with pytest.raises(ValueError, match="same length"):
        B.padding_demo(lengths_a=(3, 4), lengths_b=(5, 4))


def test_syncbn_matches_theory():
    sim = B.syncbn_simulation(per_device=(2, 8), devices=4, channels=16, trials=400)
    assert sim["sync_max_diff"] < 1e-9
    for m, lv, sv, le in zip(
        (2, 8), sim["local_var_ratio"], sim["sync_var_ratio"], sim["local_mean_err"], strict=False
    ):
        assert lv == pytest.approx(B.expected_local_var_ratio(m), abs=0.03)
        assert sv == pytest.approx(B.expected_local_var_ratio(4 * m), abs=0.02)
        assert le == pytest.approx(B.rms_mean_error(m), rel=0.05)
    assert sim["allreduce_floats"] == 33


def test_closed_forms():
    assert B.expected_local_var_ratio(2) == 0.5 and B.rms_mean_error(4) == 0.5
    # Independently: the biased variance is x^T C x / m with the centering matrix
    # C = I - 1 1^T / m, so for iid draws of variance 1 its expectation is trace(C) / m.
    for m in range(1, 12):
        centering = np.eye(m) - np.full((m, m), 1.0 / m)
        assert B.expected_local_var_ratio(m) == pytest.approx(np.trace(centering) / m, abs=1e-15)
    with pytest.raises(ValueError):
        B.expected_local_var_ratio(0)
    assert math.isclose(B.rms_mean_error(16), 0.25)


def test_causal_leak_and_online():
    leak = B.causal_leak_demo()
    assert leak["ln_change"] == 0.0 and leak["bn_change"] > 1e-3
    tr = B.running_average_trace(steps=10)
    assert tr["torch_max_diff"] < 1e-5 and len(tr["running_mean"]) == 10
    # Closed form of the first update: running = 0.9 * 0 + 0.1 * batch mean.
    assert tr["running_mean"][0] == pytest.approx(0.1 * tr["batch_mean"][0], rel=1e-5)


def test_online_demo_messages():
    on = B.online_demo()
    assert "more than 1 value per channel" in on["bn_error"]["torch"]
    assert "more than 1 value per channel" in on["bn_error"]["normedu"]
    assert on["ln_online_acc"] > 0.5


def test_small_cnn_shapes():
    m = B.small_cnn()
    assert m(torch.randn(3, 1, 8, 8)).shape == (3, 10)
    assert np.sum([isinstance(x, torch.nn.BatchNorm2d) for x in m]) == 3


def test_recalibrate_sets_running_stats_to_the_data_and_leaves_the_model():
    from normedu.nn import BatchNorm1d

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), BatchNorm1d(3, momentum=0.1))
    x = torch.randn(64, 5) * 2 + 1
    before = model[1].running_mean.clone()
    cal = B.recalibrate(model, x)
    assert torch.equal(model[1].running_mean, before) and not cal.training
    with torch.no_grad():
        h = model[0](x)
    torch.testing.assert_close(cal[1].running_mean, h.mean(0))
    torch.testing.assert_close(cal[1].running_var, h.var(0, unbiased=True))


def test_calibration_demo_rows():
    rows = B.calibration_demo(momenta=(0.9,), batch=32)
    assert [r["momentum"] for r in rows] == [0.9]
    assert all(0 <= r[k] <= 1 for r in rows for k in ("error_running", "error_calibrated"))


def test_calibration_demo_at_the_default_momentum_is_the_plain_run():
    # At momentum 0.1 the demo takes the sweep's cached run; it must be the run the demo
    # describes: the MLP trained here from scratch by the plain loop.
    from normedu.data import digits
    from normedu.mlp import deep_mlp
    from normedu.training import accuracy, train_epoch

    data = digits()
    torch.manual_seed(0)
    model = deep_mlp(64, 64, 10, 3, norm="batchnorm", act="relu", seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=B.BASE_LR, momentum=0.9)
    train_epoch(model, opt, data.x_train, data.y_train, 32, torch.Generator().manual_seed(1), True)
    with torch.no_grad():
        want = 1 - accuracy(model.eval()(data.x_test), data.y_test)
    (row,) = B.calibration_demo(momenta=(0.1,), batch=32)
    assert row["error_running"] == pytest.approx(want, abs=1e-9)
