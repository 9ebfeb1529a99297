"""normedu.bench bookkeeping, the CLI and the figures. No timing asserts: only the arithmetic
that turns timings into rows (checked against the closed forms) and the files a run writes.

Tiny shapes and 1 or 2 repetitions; the Inductor-compiled variants (seconds of compiling per
kernel) once each, in the ``inductor`` group.
"""

from __future__ import annotations

import csv
import json
import runpy
import sys

import pytest
import torch

from normedu import bench, results
from normedu.bench import (
    PRESETS,
    BenchResult,
    Selection,
    floor_seconds,
    ideal_bytes,
    run_benchmark,
)
from normedu.plots.bench import bench_figure, headline_shape, time_figure

SHAPES = [(16, 32), (8, 64)]


@pytest.fixture(scope="module")
def res() -> BenchResult:
    return run_benchmark(
        PRESETS["quick"].override(shapes=SHAPES, reps=2, warmup=0),
        Selection(
            impls=("eager", "textbook", "numpy"),
            passes=("fwd", "fwdbwd"),
            dtypes=("float32", "bfloat16"),
        ),
        progress=False,
        command="pytest",
    )


def test_roofline_arithmetic_closed_form():
    # The chapter's headline: 8192 x 4096 float32 forward on an H200 (4.8 TB/s).
    assert ideal_bytes(8192, 4096, "fwd", 4) == 2 * 8192 * 4096 * 4 == 268_435_456
    assert ideal_bytes(8192, 4096, "fwdbwd", 4) == 5 * 8192 * 4096 * 4
    assert floor_seconds(8192, 4096, 4.8e12) == pytest.approx(55.92e-6, rel=1e-3)
    with pytest.raises(ValueError, match="pass_"):
        ideal_bytes(1, 1, "bwd", 4)
    with pytest.raises(ValueError, match="bandwidth"):
        floor_seconds(1, 1, 0.0)


def test_rows_have_the_contract_keys_and_one_row_per_variant(res):
    rows = res.rows()
    for r in rows:
        assert tuple(r) == bench.ROW_KEYS
    # 2 ops x 3 impls x 2 passes x 2 shapes in float32; numpy has no bfloat16 rows.
    f32 = [r for r in rows if r["dtype"] == "float32"]
    bf16 = [r for r in rows if r["dtype"] == "bfloat16"]
    assert len(f32) == 2 * 3 * 2 * 2
    assert len(bf16) == 2 * 2 * 2 * 2 and not any(r["impl"] == "numpy" for r in bf16)
    assert "layernorm/numpy/fwd/bfloat16" in res.meta["skipped"]
    assert {r["impl"] for r in res.copies} == {"copy", "clone"}


def test_rows_of_a_real_run_are_ordered_samples(res):
    for r in res.rows() + res.copies:
        assert r["reps"] == 2
        assert r["min_s"] <= r["median_s"] <= r["max_s"]
        assert r["median_s"] == pytest.approx((r["min_s"] + r["max_s"]) / 2)  # median of two
        assert r["compile_s"] == 0.0  # none of these variants compiles


def test_rows_from_known_timings_are_the_hand_computed_numbers(monkeypatch):
    # The timings are replaced by chosen samples, in the order run_benchmark times its variants
    # (copy, clone, then op x impl x pass); every expected number is worked out by hand below
    # for one 16 x 32 float32 shape: a forward moves 2 * 16 * 32 * 4 = 4096 bytes, forward and
    # backward 5 * 16 * 32 * 4 = 10240.
    from normedu import timing

    samples = {
        "copy": [1e-6, 3e-6],  # median 2 us: 4096 B / 2 us = 2.048 GB/s; fastest 1 us
        "clone": [2e-6, 2e-6],
        "layernorm/fwd": [2e-6, 6e-6],  # median 4 us: 1.024 GB/s
        "layernorm/fwdbwd": [4e-6, 6e-6],  # median 5 us: 10240 B / 5 us = 2.048 GB/s
        "rmsnorm/fwd": [1e-6, 1e-6],
        "rmsnorm/fwdbwd": [8e-6, 12e-6],  # median 10 us: 1.024 GB/s
    }
    monkeypatch.setattr(
        timing, "interleaved", lambda fns, rounds, **kw: [list(v) for v in samples.values()]
    )
    res = run_benchmark(
        PRESETS["quick"].override(shapes=[(16, 32)], reps=2, warmup=0),
        Selection(impls=("eager",), passes=("fwd", "fwdbwd")),
        progress=False, command="pytest",
    )  # fmt: skip
    expected = {  # gbps, frac_of_copy (medians), frac_best (fastest, scaled to copy's bytes)
        "layernorm/fwd": (1.024, 0.5, 0.5),  # frac_best: 1 us / 2 us
        "layernorm/fwdbwd": (2.048, 1.0, 0.625),  # 1 us / 4 us * 10240 / 4096
        "rmsnorm/fwd": (4.096, 2.0, 1.0),
        "rmsnorm/fwdbwd": (1.024, 0.5, 0.3125),  # 1 us / 8 us * 10240 / 4096
    }
    for key, (gbps, frac, best) in expected.items():
        op, pass_ = key.split("/")
        r = res.find(op, "eager", 16, 32, pass_)
        assert (r["median_s"], r["min_s"], r["max_s"]) == pytest.approx(
            (sum(samples[key]) / 2, min(samples[key]), max(samples[key]))
        )
        assert (r["gbps"], r["frac_of_copy"], r["frac_best"]) == pytest.approx((gbps, frac, best))
    copy = res.copy_row(16, 32)
    assert (copy["gbps"], copy["frac_of_copy"]) == pytest.approx((2.048, 1.0))
    assert res.copy_row(16, 32, impl="clone")["gbps"] == pytest.approx(2.048)
    assert res.ratio("eager", 16, 32, pass_="fwdbwd") == pytest.approx(2.0)  # 10 us / 5 us


def test_ratio_is_rms_over_layernorm_median(res):
    rms = res.find("rmsnorm", "eager", 8, 64, "fwdbwd")["median_s"]
    ln = res.find("layernorm", "eager", 8, 64, "fwdbwd")["median_s"]
    assert res.ratio("eager", 8, 64, pass_="fwdbwd") == pytest.approx(rms / ln)
    with pytest.raises(KeyError, match="no row"):
        res.ratio("fast", 8, 64)


def test_copy_gbps_is_that_of_the_largest_tensor(res):
    # Both shapes hold 512 elements: the tie goes to the faster copy, in float32 (4 bytes).
    f32 = [c for c in res.copies if c["impl"] == "copy" and c["dtype"] == "float32"]
    assert res.copy_gbps == max(c["gbps"] for c in f32)


def test_a_presets_time_budget_gives_slow_variants_fewer_reps(monkeypatch):
    # Every call outlasts a budget of 1 ns: each variant gets the preset's min_reps, where
    # reps given explicitly (the other tests) are what every variant gets.
    tiny = bench.Preset(warmup=0, reps=4, shapes=((8, 16),), budget_s=1e-9, min_reps=2)
    res = run_benchmark(tiny, Selection(impls=("eager", "numpy")), progress=False)
    assert {r["reps"] for r in res.rows() + res.copies} == {2}
    assert (res.meta["reps"], res.meta["budget_s"]) == (4, 1e-9)
    # reps given to override are exact: no budget left to cut them
    assert tiny.override(reps=3).budget_s is None and tiny.override(warmup=1).budget_s == 1e-9
    rows = [{**r, "reps": 4} for r in res.rows()]
    rows[-1]["reps"] = 2
    note = bench.repetitions_note(BenchResult(rows, res.copies, res.provenance, res.meta))
    last = rows[-1]
    assert note == (
        f"4 timed repetitions per variant; 2 for the slowest ({last['impl']} {last['op']} "
        f"{last['pass_']}), whose samples stop after about 1e-09 s"
    )
    assert bench.repetitions_note(res) == "2 timed repetitions per variant"


def test_provenance_and_meta(res):
    for key in ("device", "torch", "threads", "date", "command"):
        assert key in res.provenance
    assert res.provenance["command"] == "pytest"
    assert res.provenance["torch"] == torch.__version__
    assert res.meta["reps"] == 2 and "mmap" in res.meta["allocator_note"]


def test_save_load_round_trip_and_csv(res, tmp_path):
    path = res.save(tmp_path / "b.json")
    back = BenchResult.load(path)
    assert back.rows() == res.rows() and back.copies == res.copies
    assert back.provenance == res.provenance
    with open(tmp_path / "b.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(res.rows()) + len(res.copies)
    assert tuple(table[0]) == bench.ROW_KEYS


def test_table_markdown_lists_each_family(res):
    md = res.table_markdown()
    for impl in ("eager", "textbook", "numpy", "copy (preallocated"):
        assert impl in md
    assert md.count("\n") == 1 + 2 * (3 + 2)  # header rule + (3 impls + copy + clone) x 2 shapes


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="impls"):
        Selection(impls=("cudnn",))
    with pytest.raises(ValueError, match="preset"):
        run_benchmark("thorough", progress=False)
    with pytest.raises(ValueError, match="shape"):
        PRESETS["quick"].override(shapes=[(4, 0)])
    with pytest.raises(ValueError, match="reps"):
        PRESETS["quick"].override(shapes=[(4, 4)], reps=0)


def test_load_stored_is_none_until_a_gpu_run_is_stored(monkeypatch, tmp_path, res):
    monkeypatch.setenv("NORMEDU_ROOT", str(tmp_path))
    assert BenchResult.load_stored() is None
    # A fake stored run, clearly test data, written only under tmp_path.
    fake = res.to_dict()
    results.save_stored(bench.STORED_NAME, fake, command="test data")
    stored = BenchResult.load_stored()
    assert stored is not None and stored.rows() == res.rows()
    assert (tmp_path / "results" / "gpu" / "bench.json").exists()


def test_figure_with_and_without_a_stored_gpu_run(res):
    left_only = bench_figure(res)
    texts = [t.get_text() for ax in left_only.axes for t in ax.texts]
    assert len(left_only.axes) == 1
    # No command in the figure: the page says in one quiet line that no GPU run is stored.
    assert not any("--store" in t for t in texts)
    assert headline_shape(res) == (8, 64)
    both = bench_figure(res, stored=res)
    assert len(both.axes) == 2
    assert not any("no GPU run" in t.get_text() for ax in both.axes for t in ax.texts)
    # 3 impls x 2 ops bars in each of the two panels, heights = the fractions of copy
    for ax in both.axes:
        heights = sorted(p.get_height() for p in ax.patches)
        want = sorted(
            r["frac_of_copy"]
            for r in res.rows()
            if (r["n"], r["d"]) == (8, 64) and (r["pass_"], r["dtype"]) == ("fwd", "float32")
        )
        assert heights == pytest.approx(want)
        assert ax.get_title() and ax.get_ylabel()
    fig = time_figure(res)
    assert len(fig.axes) == 2 and all(ax.get_yscale() == "log" for ax in fig.axes)


@pytest.mark.xdist_group("inductor")
def test_compiled_variants_are_timed_with_their_compile_time():
    # The Inductor-compiled variants of both norms at the smallest shape: the fast appendix
    # reads a stored run (make timings), so no book build times them any more. Forward only:
    # the forward + backward wrapper is the one every implementation shares (tested above
    # with the C kernels), and a backward compile costs several CPU-seconds more.
    r = run_benchmark(
        PRESETS["quick"].override(shapes=[(8, 32)], reps=1, warmup=0),
        Selection(ops=("layernorm", "rmsnorm"), impls=("compiled",), passes=("fwd",)),
        device="cpu",
        progress=False,
    )
    rows = {row["op"]: row for row in r.rows()}
    assert set(rows) == {"layernorm", "rmsnorm"}
    # The first call compiles: compile_s (first call less the median, recorded only for the
    # variants that compile) is seconds against a tiny tensor's microseconds.
    assert all(0 < 10 * row["median_s"] < row["compile_s"] for row in rows.values())


def test_cli_writes_json_csv_png_with_provenance(tmp_path, capsys):
    rc = bench.main(
        [
            "--quick",
            "--shape",
            "16x32",
            "--impl",
            "eager",
            "numpy",
            "--reps",
            "2",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 0
    record = json.loads((tmp_path / "bench.json").read_text())
    assert record["provenance"]["command"].startswith("python -m normedu.bench --quick")
    assert record["data"]["meta"]["preset"] == "quick"
    # ops x impls x passes, less the NumPy backward that --quick leaves out
    assert len(record["data"]["rows"]) == 2 * 2 * 2 - 2
    assert "layernorm/numpy/fwdbwd/float32" in record["data"]["meta"]["skipped"]
    assert (tmp_path / "bench.csv").read_text().startswith("op,impl,pass_")
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert "copy bandwidth" in capsys.readouterr().out


def test_cli_store_refuses_a_cpu():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(SystemExit):
        bench.main(["--store", "--shape", "4x4", "--device", "cpu"])


def test_module_entry_point_runs(tmp_path, monkeypatch, capsys):
    # `python -m normedu.bench`, run in this process (a new interpreter would import torch again)
    argv = ["--quick", "--shape", "8x16", "--impl", "eager", "--pass", "fwd", "--reps", "1"]
    argv += ["--out", str(tmp_path), "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", ["python -m normedu.bench", *argv])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("normedu.bench", run_name="__main__", alter_sys=True)
    assert exit_.value.code == 0
    assert (tmp_path / "bench.json").exists()
    assert "normedu.bench" in capsys.readouterr().err  # the progress bar goes to stderr


def test_fast_variants_report_their_kernel():
    # The C kernels' variants (the Inductor-compiled ones have their own test).
    r = run_benchmark(
        PRESETS["quick"].override(shapes=[(16, 64)], reps=2, warmup=0),
        Selection(
            ops=("layernorm",), impls=("eager", "fast", "fast_out"), passes=("fwd", "fwdbwd")
        ),
        progress=False,
    )
    rows = r.rows()
    # fast_out has no backward: 2 + 2 + 1
    assert len(rows) == 5
    # only variants that build something on first use report a compile time
    assert all(row["compile_s"] == 0.0 for row in rows if row["impl"] == "eager")
    assert r.find("layernorm", "fast", 16, 64, "fwdbwd")["median_s"] > 0
    # every fast row says which kernel ran; the others do not claim one
    assert {row["backend"] for row in rows if row["impl"].startswith("fast")} == {"c"}
    assert not any("backend" in row for row in rows if row["impl"] == "eager")


def test_stored_gpu_run_is_consistent_and_from_the_triton_kernel():
    """The committed H200 run (results/gpu/bench.json) has the contract the chapter reads."""
    stored = bench.BenchResult.load_stored()
    if stored is None:
        pytest.skip("no stored GPU run")
    assert stored.device_type == "cuda"
    rows = [r for r in stored.rows() if r["impl"] in ("fast", "fast_out")]
    assert rows and {r["backend"] for r in rows} == {"triton"}
    for op in ("layernorm", "rmsnorm"):
        row = stored.find(op, "fast_out", 8192, 4096)
        # the fraction is recomputed from the raw times, not read back from the file
        copy = stored.copy_row(8192, 4096)
        assert row["median_s"] > 0 and copy["median_s"] > 0
        assert copy["median_s"] / row["median_s"] == pytest.approx(row["frac_of_copy"], rel=1e-9)
    assert "µs" in stored.table_markdown("fwd")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_benchmark_rows():
    preset = PRESETS["quick"].override(shapes=[(256, 1024)], reps=3)
    r = run_benchmark(preset, Selection(impls=("eager", "fast")), progress=False)
    assert r.meta["device_type"] == "cuda"
    assert {row["impl"] for row in r.rows()} == {"eager", "fast"}


def test_aten_traffic_counts_the_bytes_of_each_op():
    import torch.nn.functional as F

    n, d = 32, 64
    x, w, b = torch.randn(n, d), torch.randn(d), torch.randn(d)
    ln = bench.aten_traffic(lambda: F.layer_norm(x, (d,), w, b, 1e-5))
    # one native kernel: reads x, w, b; writes y and the (n, 1) mean and rstd it saves
    assert [t.op for t in ln] == ["native_layer_norm"]
    assert ln[0].bytes_in == 4 * (n * d + 2 * d)
    assert ln[0].bytes_out == 4 * (n * d + 2 * n)
    two = bench.aten_traffic(lambda: (x * 2.0).sum())
    assert [t.op for t in two] == ["mul", "sum"]
    assert two[0].bytes == 8 * n * d and two[1].bytes == 4 * n * d + 4


def test_traffic_and_ratio_tables(res):
    md = bench.traffic_markdown(8, 64, res)
    assert md.count("\n") == 5 and "native_layer_norm" in md
    ratios = bench.ratios_markdown(res, 8, 64)
    assert f"| eager | {res.ratio('eager', 8, 64):.2f} |" in ratios
    assert "compile (s)" in bench.compile_markdown(res)


def _synthetic(
    fracs: dict[tuple[str, str], float], ratio: dict[str, float], shape=(64, 4096)
) -> BenchResult:
    """A result whose LayerNorm rows take 1 s and RMSNorm rows ``ratio[impl]`` s (test data),
    at ``shape`` (N, D)."""
    n, d = shape
    rows = []
    for impl in ("eager", "textbook", "compiled", "numpy", "fast", "fast_out"):
        for op in ("layernorm", "rmsnorm"):
            for pass_ in ("fwd", "fwdbwd"):
                t = 1.0 if op == "layernorm" else ratio[impl]
                frac = fracs.get((op, impl), 0.5)
                rows.append(
                    dict(
                        op=op,
                        impl=impl,
                        pass_=pass_,
                        dtype="float32",
                        n=n,
                        d=d,
                        median_s=t,
                        min_s=t,
                        max_s=t,
                        reps=1,
                        gbps=frac,
                        frac_of_copy=frac,
                        compile_s=0.0,
                    )
                )
    copies = [
        dict(
            op="copy",
            impl=k,
            pass_="fwd",
            dtype="float32",
            n=n,
            d=d,
            median_s=1.0,
            min_s=1.0,
            max_s=1.0,
            reps=1,
            gbps=1.0,
            frac_of_copy=1.0,
            compile_s=0.0,
        )
        for k in ("copy", "clone")
    ]
    return BenchResult(rows, copies, {"device": "test data"}, {"device_type": "cpu"})


def test_claim_verdicts_follow_the_measurements(monkeypatch, tmp_path):
    from normedu import ledger
    from normedu.claims import fast as fast_claims

    monkeypatch.setenv("NORMEDU_LEDGER_DIR", str(tmp_path))
    mixed = {
        "eager": 2.5,
        "textbook": 0.5,
        "compiled": 0.88,
        "numpy": 0.4,
        "fast": 1.0,
        "fast_out": 1.0,
    }
    good = {("layernorm", "fast_out"): 0.8, ("rmsnorm", "fast_out"): 0.65}
    monkeypatch.setattr(bench, "book_run", lambda: _synthetic(good, mixed))
    # The forward ratio is the speed record's (normedu.experiments.rmsnorm_speed), not the
    # page's run: FAKE TEST DATA for it too, at the record's headline shape.
    from normedu.experiments import rmsnorm as R

    record = _synthetic(good, dict.fromkeys(mixed, 0.9), shape=R.SPEED_HEADLINE)
    monkeypatch.setattr(R, "speed_run", lambda progress=False: record)
    by_id = {c.id: c for c in ledger.check("fast")}
    assert by_id["fast.h200_floor"].verdict == "confirmed"
    assert "55.9 µs" in by_id["fast.h200_floor"].measured
    # The kernels' own targets are not claims (normedu.fast_targets, tests/test_fast_targets.py).
    assert not any(i.endswith(("_fraction", "_not_slower_than_eager")) for i in by_id)
    # The forward "10–15%" and "25%" claims are the RMSNorm chapter's, on the same record.
    assert not {"fast.rms_10_15.fwd", "fast.rms_25_cheaper"} & set(by_id)
    assert by_id["fast.rms_10_15.fwdbwd"].verdict == "depends"
    assert by_id["fast.eager_rms_slower_cpu"].verdict == "depends"
    assert "0.90" in by_id["fast.eager_rms_slower_cpu"].measured
    assert (tmp_path / "fast.json").exists()
    all_in_range = dict.fromkeys(mixed, 0.87)
    monkeypatch.setattr(bench, "book_run", lambda: _synthetic(good, all_in_range))
    by_id = {c.id: c for c in fast_claims.check()}
    assert by_id["fast.rms_10_15.fwdbwd"].verdict == "confirmed"
    slower = dict.fromkeys(mixed, 1.3)
    monkeypatch.setattr(bench, "book_run", lambda: _synthetic(good, slower))
    by_id = {c.id: c for c in fast_claims.check()}
    assert by_id["fast.rms_10_15.fwdbwd"].verdict == "not reproduced"
    monkeypatch.setattr(
        R, "speed_run", lambda progress=False: _synthetic(good, slower, R.SPEED_HEADLINE)
    )
    assert {c.id: c for c in fast_claims.check()}[
        "fast.eager_rms_slower_cpu"
    ].verdict == "confirmed"
