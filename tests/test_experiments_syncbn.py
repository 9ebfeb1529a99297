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
    assert [(r["per_process"], r["variant"]) for r in rows] == [(2, v) for v in S.VARIANTS]
    by = {(r["per_process"], r["variant"]): r for r in rows}
    for m in (2,):
        # Same float64 computation split over two processes: identical test predictions.
        assert by[m, "sync"]["error"] == pytest.approx(by[m, "global"]["error"], abs=1e-12)
        for v in ("local", "sync", "group"):
            assert 0 < by[m, v]["allreduce_share"] < 1
            assert by[m, v]["step_ms"] > 0
            assert 0 <= by[m, v]["error"] <= 1
    # Local BN on 2 samples per process is a different computation from global BN.
    assert by[2, "local"]["error"] != by[2, "global"]["error"]
    assert "| 2 | 2 | sync |" in S.format_table(rows)


def test_registered_as_scale_experiment():
    from normedu.experiments import registered

    assert registered()["syncbn_ddp"] is S.ddp_for_store
    with pytest.raises(ValueError, match="preset"):
        S.ddp_for_store("tpu")
