"""Named records (normedu/records.py) and the build's timing phase (book/_ext/timing_phase.py):
a record is computed once and read back equal, every page that states the RMSNorm/LayerNorm
speed ratio reads the one record, and the timing phase runs before the pages execute."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from normedu import records
from normedu.bench import BenchResult

REPO = Path(__file__).resolve().parent.parent
SPEED = "rmsnorm_layernorm_speed"
#: The pages that state the ratio.
SPEED_PAGES = ("rmsnorm", "fast", "summary", "questions")


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """A registered record ``fake`` whose compute counts its calls, under a fresh course root."""
    calls = []

    def compute(n):
        calls.append(n)
        return {"values": list(range(n)), "call": len(calls)}, {"device": "test"}

    mod = types.ModuleType("fake_records_module")
    mod.compute = compute
    monkeypatch.setitem(sys.modules, "fake_records_module", mod)
    spec = records.Record("a test record", "fake_records_module:compute", {"n": 3})
    monkeypatch.setitem(records.RECORDS, "fake", spec)
    monkeypatch.setattr(records, "_MEMORY", {})
    monkeypatch.setenv("NORMEDU_ROOT", str(tmp_path))
    return calls


def test_a_record_is_computed_once_and_read_back_equal(counted, monkeypatch, tmp_path):
    first = records.read("fake")
    assert records.read("fake") is first
    # A new process (no memory) reads the stored file: the same record, not computed again.
    monkeypatch.setattr(records, "_MEMORY", {})
    again = records.read("fake")
    assert counted == [3]
    assert again == first
    assert first["data"] == {"values": [0, 1, 2], "call": 1}
    assert (tmp_path / "results" / "cpu" / "timings" / "fake.json").exists()
    # A page made it, not the timing phase: the timing phase must measure it again, alone.
    assert "fake" in records.stale()
    records.compute("fake", alone=True)
    assert "fake" not in records.stale()
    # Other parameters: the stored record no longer answers, and is measured again.
    other = records.Record("a test record", "fake_records_module:compute", {"n": 2})
    monkeypatch.setitem(records.RECORDS, "fake", other)
    monkeypatch.setattr(records, "_MEMORY", {})
    assert records.read("fake")["data"]["values"] == [0, 1]
    assert counted == [3, 3, 2]


def test_concurrent_readers_keep_the_first_stored(counted):
    stored = records.compute("fake")  # another page stored it while this one measured
    late = records.compute("fake", replace=False)
    assert late["data"] == stored["data"] and counted == [3, 3]


def _speed_record(eager: float, compiled: float) -> BenchResult:
    """FAKE TEST DATA: a speed record where RMSNorm takes ``eager`` / ``compiled`` times
    LayerNorm's time at every measured shape."""
    from normedu.experiments.rmsnorm import SPEED_SHAPES

    rows, copies = [], []
    for n, d in SPEED_SHAPES:
        base = dict(pass_="fwd", dtype="float32", n=n, d=d, reps=3, gbps=1.0, compile_s=0.0)
        for impl, r in (("eager", eager), ("textbook", 0.5), ("compiled", compiled), ("fast", 1)):
            for op, t in (("layernorm", 2e-3), ("rmsnorm", 2e-3 * r)):
                rows.append(
                    {
                        **base,
                        "op": op,
                        "impl": impl,
                        "median_s": t,
                        "min_s": t,
                        "max_s": t,
                        "frac_of_copy": 1e-3 / t,
                        "frac_best": 1e-3 / t,
                    }
                )
        for impl in ("copy", "clone"):
            copies.append(
                {
                    **base,
                    "op": "copy",
                    "impl": impl,
                    "median_s": 1e-3,
                    "min_s": 1e-3,
                    "max_s": 1e-3,
                    "frac_of_copy": 1.0,
                    "frac_best": 1.0,
                }
            )
    return BenchResult(rows, copies, {"device": "CPU (test data)"}, {"device_type": "cpu"})


def test_the_pages_claims_state_the_one_speed_record(monkeypatch, tmp_path):
    """The RMSNorm chapter's claims, the fast appendix's claim and the summary's sentence all
    quote the stored record: none measures its own."""
    from normedu import results
    from normedu.claims import fast as fast_claims
    from normedu.claims import rmsnorm as rms_claims
    from normedu.experiments import rmsnorm as R

    monkeypatch.setenv("NORMEDU_ROOT", str(tmp_path))
    monkeypatch.setattr(records, "_MEMORY", {})
    fake = _speed_record(eager=2.5, compiled=0.8)
    prov = {
        **fake.provenance,
        "record": {"name": SPEED, "alone": True, "params": records.RECORDS[SPEED].params},
    }
    results.write_record(records.path(SPEED), fake.to_dict(), prov)
    assert SPEED not in records.stale()
    savings, shape, _ = rms_claims.speed_savings()
    assert shape == R.SPEED_HEADLINE
    assert savings["eager"] == pytest.approx(-1.5) and savings["compiled"] == pytest.approx(0.2)
    claim = fast_claims.eager_rms_slower_cpu(R.speed_run())
    assert claim.verdict == "confirmed" and "2.50" in claim.measured
    words = R.speed_words(R.speed_run())
    assert "2.50× the time of eager `F.layer_norm`" in words
    assert "20% less time than the compiled LayerNorm" in words


def test_the_stored_timings_are_current_and_were_measured_alone():
    """The committed records (results/cpu/timings) are what the code measures now: a change of
    params, preset or skips without ``make timings`` fails here, not in a reader's build."""
    from normedu.bench import PRESETS, QUICK_SKIP

    assert records.FOLDER == Path("results/cpu/timings")
    assert records.stale() == []  # every record present, with today's params, measured alone
    for name in records.RECORDS:
        assert records.path(name).parent == REPO / "results" / "cpu" / "timings"
    bench = records.read("cpu_kernel_bench")
    quick = PRESETS[bench["provenance"]["record"]["params"]["preset"]]
    meta = bench["data"]["meta"]
    assert (meta["preset"], meta["reps"], meta["warmup"]) == (quick.name, quick.reps, quick.warmup)
    assert {(r["n"], r["d"]) for r in bench["data"]["rows"]} == set(quick.shapes)
    skipped = {"/".join(s.split("/")[1:3]) for s in meta["skipped"]}  # op/impl/pass/dtype
    assert set(QUICK_SKIP) <= skipped
    runs = records.read("cpu_kernel_ablation")["data"]["runs"]
    params = records.RECORDS["cpu_kernel_ablation"].params["runs"]
    assert [[r["n"], r["d"], r["reps"]] for r in runs] == params


def test_the_speed_record_names_the_pages_that_state_it():
    # The timing phase executes these again when it measures the record again.
    assert records.RECORDS[SPEED].pages == tuple(f"book/{p}" for p in SPEED_PAGES)
    for spec in records.RECORDS.values():
        assert all((REPO / f"{page}.md").exists() for page in spec.pages)


@pytest.mark.parametrize("page", SPEED_PAGES)
def test_every_page_that_states_the_ratio_reads_the_record(page):
    src = (REPO / "book" / f"{page}.md").read_text()
    assert f'records.read("{SPEED}")' in src
    # No timing of its own of the same quantity.
    for own in ("speed_run(", "run_benchmark(", "interleaved(", "ratios_markdown("):
        assert own not in src, f"{page}.md times the ratio itself: {own}"
    # The fast appendix shows its own stored run for bandwidth: its forward table leaves the
    # ratio out, and the only ratios it takes from that run are forward + backward.
    assert all("fwdbwd" in args for args in re.findall(r"\.ratio\(([^)]*)\)", src))
    if page == "fast":
        assert 'table_markdown("fwd", ratio=False)' in src


def _load_ext(name):
    sys.path.insert(0, str(REPO / "book" / "_ext"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


class _App:
    def __init__(self):
        self.connected = []

    def connect(self, event, fn, priority=500):
        self.connected.append((event, priority, fn.__name__))


def test_the_timing_phase_runs_alone_before_the_pages_execute(monkeypatch):
    app = _App()
    for ext in ("ledger_last", "parallel_execute", "timing_phase"):
        _load_ext(ext).setup(app)
    before_read = sorted(c for c in app.connected if c[0] == "env-before-read-docs")
    # Sphinx calls a lower priority first: pages ordered, then timings measured, then executed.
    assert [c[2] for c in before_read] == ["_read_last", "measure_timings", "execute_outdated"]
    assert "timing_phase: book/_ext" in (REPO / "_config.yml").read_text()

    phase = _load_ext("timing_phase")
    runs, reexecuted = [], []
    monkeypatch.setattr(
        phase.subprocess,
        "run",
        lambda cmd, **kw: runs.append(cmd) or types.SimpleNamespace(returncode=0),
    )
    monkeypatch.setattr(
        phase, "_reexecute_readers", lambda env, docs, names: reexecuted.append(names)
    )
    env = types.SimpleNamespace(mystnb_config=types.SimpleNamespace(execution_mode="cache"))
    monkeypatch.setattr(records, "stale", lambda: [SPEED])
    phase.measure_timings(None, env, ["book/rmsnorm"])
    assert runs == [[sys.executable, "-m", "normedu.records", "--alone", SPEED]]
    assert reexecuted == [[SPEED]]
    monkeypatch.setattr(records, "stale", lambda: [])
    phase.measure_timings(None, env, ["book/rmsnorm"])
    assert len(runs) == 1  # nothing stale: nothing measured


def test_the_pages_started_first_are_pages_of_the_book():
    # A renamed chapter would silently fall back to the end of the queue.
    from site_helpers import toc_pages

    first = _load_ext("parallel_execute").LONGEST_FIRST
    assert first and set(first) <= set(toc_pages())


def test_prms_timings_are_the_record_at_the_chapters_fractions(monkeypatch, tmp_path):
    from normedu import results
    from normedu.experiments import rmsnorm as R

    monkeypatch.setenv("NORMEDU_ROOT", str(tmp_path))
    monkeypatch.setattr(records, "_MEMORY", {})
    spec = records.RECORDS[R.PRMS_RECORD]
    fake = [0.5, 0.6, 0.7, 0.8, 1.0]  # FAKE TEST DATA, one ratio per fraction
    prov = {"record": {"name": R.PRMS_RECORD, "alone": True, "params": spec.params}}
    results.write_record(records.path(R.PRMS_RECORD), {"time_ratio": fake}, prov)
    R.prms_check.cache_clear()
    try:
        assert R.prms_check(n=1024).time_ratio.tolist() == fake
    finally:
        R.prms_check.cache_clear()


def test_a_remeasured_record_sends_its_pages_back_to_execution(tmp_path):
    """A page cached with the previous measurement leaves the execution cache and is read
    again (the real jupyter-cache and MyST-NB reader the build uses)."""
    from jupyter_cache import get_cache
    from jupyter_cache.cache.main import CacheBundleIn
    from myst_nb.core.config import NbParserConfig
    from myst_nb.core.read import create_nb_reader
    from myst_parser.config.main import MdParserConfig

    (tmp_path / "book").mkdir()
    page = tmp_path / "book" / "questions.md"
    page.write_text((REPO / "book" / "questions.md").read_text())
    nb_config = NbParserConfig(execution_mode="cache", execution_cache_path=str(tmp_path / "jc"))
    md_config = MdParserConfig()
    cache = get_cache(str(tmp_path / "jc"))
    reader = create_nb_reader(str(page), md_config, nb_config, page.read_text())
    nb = reader.read(page.read_text())
    stage = cache.add_nb_to_project(str(page), read_data=reader.read_fmt)
    cache.cache_notebook_bundle(CacheBundleIn(nb, stage.uri), check_validity=False, overwrite=True)
    env = types.SimpleNamespace(
        mystnb_config=nb_config,
        myst_config=md_config,
        found_docs={"book/questions", "book/intro"},
        doc2path=lambda d: str(tmp_path / f"{d}.md"),
    )
    docnames = ["book/claims_ledger"]
    _load_ext("timing_phase")._reexecute_readers(env, docnames, [SPEED])
    assert docnames == ["book/questions", "book/claims_ledger"]
    with pytest.raises(KeyError):
        cache.match_cache_notebook(nb)


def test_a_seeded_record_is_kept_in_memory_under_another_seed_offset(counted, monkeypatch):
    """A record of random experiments depends on the seed offset: the stored file is offset
    0's, so under offset 1 it is measured again, not written, and not the build's to measure."""
    spec = records.Record("a seeded record", "fake_records_module:compute", {"n": 3}, seeded=True)
    monkeypatch.setitem(records.RECORDS, "fake", spec)
    stored = records.compute("fake", alone=True)
    monkeypatch.setattr(records, "_offset", lambda: 1)
    monkeypatch.setattr(records, "_MEMORY", {})
    assert records.path("fake") is None and "fake" not in records.stale()
    assert records.read("fake")["data"]["call"] == 2  # measured again under offset 1
    monkeypatch.setattr(records, "_offset", lambda: 0)
    monkeypatch.setattr(records, "_MEMORY", {})
    assert records.read("fake")["data"] == stored["data"]  # the stored file is untouched
