"""normedu.experiments.syncbn at a tiny size: DDP with our SyncBN trains exactly like one
process with BatchNorm on the global batch, and the table reports what it promises."""

from __future__ import annotations

from dataclasses import replace

import pytest

from normedu.experiments import syncbn as S


def test_ddp_table_tiny(monkeypatch):
    tiny = replace(S.SIZES["cpu"], world_sizes=(2,), per_process=(2,), max_steps=8)
    monkeypatch.setitem(S.SIZES, "cpu", tiny)
    S.ddp_table.cache_clear()
    rows = S.ddp_table("cpu", timeout=120)["rows"]
    S.ddp_table.cache_clear()
    S._replica.cache_clear()
    rep = S.local_bn_replica(2, 2, "cpu")  # the local row, replayed in one process
    S._replica.cache_clear()
    assert [(r["per_process"], r["variant"]) for r in rows] == [(2, v) for v in S.VARIANTS]
    by = {(r["per_process"], r["variant"]): r for r in rows}
    for m in (2,):
        # Same float64 computation split over two processes: identical test predictions.
        assert by[m, "sync"]["error"] == pytest.approx(by[m, "global"]["error"], abs=1e-12)
        for v in ("local", "sync", "group"):
            assert 0 < by[m, v]["allreduce_share"] < 1
            assert by[m, v]["step_ms"] > 0
            assert 0 <= by[m, v]["error"] <= 1
    # The replay is the same float64 computation as DDP with local BN on 2 processes.
    assert rep["error"] == pytest.approx(by[2, "local"]["error"], abs=1e-12)
    assert rep["steps"] == 8 and rep["max_formula_error"] < 1e-12 and rep["max_abs_train"] < 1
    # Local BN on 2 samples per process is a different computation from global BN.
    assert by[2, "local"]["error"] != by[2, "global"]["error"]
    assert "| 2 | 2 | sync |" in S.format_table(rows)


def test_registered_as_scale_experiment():
    from normedu.experiments import registered

    assert registered()["syncbn_ddp"] is S.ddp_for_store
    with pytest.raises(ValueError, match="preset"):
        S.ddp_for_store("tpu")


def test_two_samples_normalize_to_plus_minus_one():
    # m = 2: x_hat = ±d / sqrt(d² + eps), d = (z1 - z2)/2, whatever the inputs.
    import torch

    z = torch.randn(2, 500, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ours = S._normalized(z, 1e-5)
    ref = torch.nn.functional.batch_norm(z, None, None, training=True, eps=1e-5)
    torch.testing.assert_close(ours, ref)
    d = (z[0] - z[1]) / 2
    torch.testing.assert_close(ours[0], d / torch.sqrt(d**2 + 1e-5))
    torch.testing.assert_close(ours[1], -ours[0])
    assert float(((ours.abs() - 1).abs() < 1e-3).double().mean()) > 0.9
