"""normedu.device, normedu.results, normedu.provenance and normedu.ledger."""

from __future__ import annotations

import json

import pytest

from normedu import device, ledger, results
from normedu.provenance import provenance


def test_choose_picks_preset_from_env_and_device(monkeypatch):
    sizes = {"cpu": 1, "cuda": 2}
    monkeypatch.setenv("NORMEDU_PRESET", "cuda")
    assert device.choose(sizes) == 2
    monkeypatch.setenv("NORMEDU_PRESET", "cpu")
    assert device.choose(sizes) == 1
    monkeypatch.delenv("NORMEDU_PRESET")
    assert device.choose(sizes, device="cpu") == 1
    assert device.choose(sizes, device="cuda:0") == 2
    monkeypatch.setenv("NORMEDU_PRESET", "tpu")
    with pytest.raises(ValueError, match="NORMEDU_PRESET"):
        device.choose(sizes)


def test_choose_requires_both_presets():
    with pytest.raises(ValueError, match="missing"):
        device.choose({"cpu": 1})


def test_provenance_has_the_fields_a_reader_needs():
    p = provenance(["python", "-m", "normedu.bench", "--quick"], device="cpu")
    for key in ("device", "torch", "threads", "date", "command", "python"):
        assert p[key] not in (None, ""), key
    assert p["command"] == "python -m normedu.bench --quick"
    assert p["device"].startswith("CPU")


def test_stored_results_roundtrip_and_absence(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMEDU_ROOT", str(tmp_path))
    assert results.load_stored("nothing") is None
    path = results.save_stored("demo", {"x": [1, 2]}, command="python -m demo", device="cpu")
    assert path == tmp_path / "results" / "gpu" / "demo.json"
    rec = results.load_stored("demo")
    assert rec["data"] == {"x": [1, 2]}
    assert rec["provenance"]["command"] == "python -m demo"
    path.write_text(json.dumps({"data": 1}))
    with pytest.raises(ValueError, match="provenance"):
        results.load_stored("demo")


def test_results_is_the_only_writer_of_provenance_records():
    # One writer: a second hand-rolled {"provenance": ..., "data": ...} dump would drift.
    from pathlib import Path

    import normedu

    root = Path(normedu.__file__).parent
    writers = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if '{"provenance":' in p.read_text()
    ]
    assert writers == ["results.py"], writers


def make_claim(i: str, chapter: str = "ch", verdict: str = "confirmed") -> ledger.Claim:
    return ledger.Claim(
        id=i,
        chapter=chapter,
        claim=f"claim {i}",
        source="Someone (2020)",
        measured="1.0",
        verdict=verdict,
    )


def test_ledger_record_replaces_a_chapters_records_and_renders(tmp_path):
    ledger.record(make_claim("a"), make_claim("b", verdict="depends"), directory=tmp_path)
    ledger.record(make_claim("z", chapter="other"), directory=tmp_path)
    # The chapter's next run no longer checks "b": no ghost of it may survive.
    ledger.record(make_claim("a", verdict="not reproduced"), make_claim("d"), directory=tmp_path)
    claims = ledger.load(tmp_path, order=["other", "ch"])
    assert [c.id for c in claims] == ["z", "a", "d"]
    assert claims[1].verdict == "not reproduced"
    table = ledger.to_markdown(claims)
    assert table.count("\n") == 4 and "| claim a |" in table
    assert ledger.summary(claims) == {"confirmed": 2, "depends": 0, "not reproduced": 1, "cited": 0}


def test_ledger_rejects_bad_claims():
    with pytest.raises(ValueError, match="verdict"):
        make_claim("x", verdict="maybe")
    with pytest.raises(ValueError, match="source"):
        ledger.Claim(id="x", chapter="c", claim="c", source=" ", measured="1", verdict="cited")


def test_ledger_check_and_collect_compute_missing_chapters(tmp_path, monkeypatch):
    calls = []

    @ledger.claims_for("zz_test_chapter")
    def _checks():
        calls.append(1)
        return [make_claim("t1", chapter="zz_test_chapter")]

    try:
        out = ledger.collect(directory=tmp_path, chapters=["zz_test_chapter"])
        assert any(c.id == "t1" for c in out)
        n = len(calls)
        ledger.collect(
            directory=tmp_path, chapters=["zz_test_chapter"]
        )  # stored now: not recomputed
        assert len(calls) == n
    finally:
        ledger._CHECKS.pop("zz_test_chapter")


def test_verdict_within():
    assert ledger.verdict_within(11.47, 11.5, 0.01) == "confirmed"
    assert ledger.verdict_within(10.0, 11.5, 0.01) == "not reproduced"


def test_verdict_helpers():
    assert (ledger.verdict(True), ledger.verdict(False)) == ("confirmed", "not reproduced")
    assert ledger.verdict(False, otherwise="depends") == "depends"
    with pytest.raises(ValueError, match="otherwise"):
        ledger.verdict(False, otherwise="maybe")
    assert ledger.verdict_by_parts([True, True]) == "confirmed"
    assert ledger.verdict_by_parts([True, False]) == "depends"
    assert ledger.verdict_by_parts(iter([False, False])) == "not reproduced"


def test_course_root_is_explicit_or_found_from_the_current_directory(tmp_path, monkeypatch):
    from normedu import ledger, paths

    monkeypatch.delenv("NORMEDU_ROOT", raising=False)
    monkeypatch.delenv("NORMEDU_LEDGER_DIR", raising=False)
    # Outside a checkout there is no root, whatever folder the package is installed in.
    monkeypatch.chdir(tmp_path)
    assert paths.course_root() is None
    assert results.load_stored("prepost") is None
    with pytest.raises(ValueError, match="NORMEDU_ROOT"):
        ledger.ledger_dir()
    # From a folder below a checkout (a chapter's kernel starts in book/).
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    (tmp_path / "book").mkdir()
    monkeypatch.chdir(tmp_path / "book")
    assert paths.course_root() == tmp_path.resolve()
    assert ledger.ledger_dir() == tmp_path.resolve() / "_build" / "ledger"
    # The explicit root wins.
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("NORMEDU_ROOT", str(other))
    assert results.stored_path("x") == other.resolve() / "results" / "gpu" / "x.json"


def test_gpu_script_runs_every_file_with_a_gpu_test():
    # scripts/gpu_results.sh names the files it runs with `pytest -m gpu` (the GPU machine has
    # torch, not every package the other test files import); a gpu-marked test in a file it
    # does not name would never run anywhere.
    import re
    from pathlib import Path

    tests = Path(__file__).parent
    script = (tests.parent / "scripts" / "gpu_results.sh").read_text()
    step = re.search(r"\$PY -m pytest -m gpu (?:.*\\\n)*.*", script)  # with continued lines
    named = set(re.findall(r"tests/(test_\w+\.py)", step.group()))
    marked = {p.name for p in tests.glob("test_*.py") if "pytest.mark." + "gpu" in p.read_text()}
    assert marked and marked <= named, marked - named
    registered = (tests.parent / "pyproject.toml").read_text()
    assert re.search(r'^\s*"gpu: ', registered, re.M)  # --strict-markers rejects unregistered
