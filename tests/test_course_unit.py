"""Fast tests of the course machinery's parts: no nbgrader run, no book build.

The end-to-end runs with real nbgrader grading are in tests/test_course_e2e.py (slow).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from normedu.course import checks, cohort, status
from normedu.course.collect import _raw_identity, student_id
from normedu.course.config import Course
from normedu.course.sandbox import landlock_abi
from normedu.course.worker import descendants, kill_descendants

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


# -- checks --------------------------------------------------------------------------------
def test_read_notebook_names_each_problem(tmp_path):
    cases = {
        "empty.ipynb": (b"", "empty"),
        "blank.ipynb": (b"  \n", "empty"),
        "half.ipynb": (b'{"cells": [', "not valid JSON"),
        "list.ipynb": (b"[1, 2]", "not a Jupyter notebook"),
        "bin.ipynb": (b"\xff\xfe\x00\x01", "not text"),
        "bad.ipynb": (
            json.dumps({"cells": "x", "nbformat": 4, "nbformat_minor": 5, "metadata": {}}).encode(),
            "malformed",
        ),
    }
    for name, (raw, expected) in cases.items():
        (tmp_path / name).write_bytes(raw)
        nb, problem = checks.read_notebook(tmp_path / name)
        assert nb is None and expected in problem, (name, problem)
    nbformat.write(cohort.demo_notebook(), tmp_path / "ok.ipynb")
    nb, problem = checks.read_notebook(tmp_path / "ok.ipynb")
    assert problem is None and len(nb.cells) == 6


def test_released_strips_only_hidden_region():
    src = "a = 1\n### BEGIN HIDDEN TESTS\nassert secret\n### END HIDDEN TESTS\nb = 2\n"
    assert checks.released(src) == "a = 1\nb = 2\n"
    assert checks.released("no hidden\n") == "no hidden\n"


def _expected_from(nb) -> list[checks.SourceCell]:
    out = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if meta:
            out.append(
                checks.SourceCell(
                    meta["grade_id"],
                    cell.cell_type,
                    cell.source,
                    bool(meta["grade"]) and not meta["solution"],
                    bool(meta["solution"]),
                    bool(meta["locked"]),
                    float(meta.get("points", 0)),
                )
            )
    return out


def test_tampering_detects_edit_and_delete_but_not_answers():
    source = cohort.demo_notebook()
    expected = _expected_from(source)
    released = nbformat.reads(nbformat.writes(source), as_version=4)
    for cell in released.cells:  # what students get: hidden tests removed
        cell.source = checks.released(cell.source)
    assert checks.tampering(released, expected) == []
    answered = cohort.submission(source, released, "correct")
    assert checks.tampering(answered, expected) == []
    edited = cohort.submission(source, released, "tamper_edit")
    assert checks.tampering(edited, expected) == [
        "test cell 'test_center' was edited (original restored for grading)"
    ]
    deleted = cohort.submission(source, released, "tamper_delete")
    assert checks.tampering(deleted, expected) == [
        "test cell 'test_center' was deleted (restored for grading)"
    ]
    # Trailing whitespace is not tampering.
    released.cells[2].source += "   \n\n"
    assert checks.tampering(released, expected) == []


def test_assignment_mismatch_names_the_other_assignment():
    demo, other = cohort.demo_notebook(), cohort.demo_notebook("other", prefix="other_")
    expected = _expected_from(demo)
    others = {"other": {"other_center", "other_scale"}}  # its answer cells
    assert checks.assignment_mismatch(demo, expected, others) is None
    assert "assignment 'other'" in checks.assignment_mismatch(other, expected, others)
    # A cell id that assignments share by convention (a test's) does not make it this one's.
    other.cells[2].metadata["nbgrader"]["grade_id"] = "test_center"
    assert "assignment 'other'" in checks.assignment_mismatch(other, expected, others)
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    assert "none of this assignment's answer cells" in checks.assignment_mismatch(
        plain, expected, others
    )
    # ... and the status names it
    assert checks.belongs_to(other, others) == "other"
    assert checks.belongs_to(plain, others) is None
    assert status.wrong_assignment("other") == "wrong assignment (other)"
    assert status.Verdict("s", "demo", status.wrong_assignment("other")).status.endswith("(other)")


def test_untouched_answers_mean_not_attempted():
    source = cohort.demo_notebook()
    released = nbformat.reads(nbformat.writes(source), as_version=4)
    for cell in released.cells:
        cell.source = checks.released(cell.source)
    # The gradebook holds the answer cells as handed out (the stubs).
    stubbed = cohort.submission(source, released, "stub")
    expected = _expected_from(stubbed)
    assert checks.untouched(stubbed, expected)
    assert checks.untouched(cohort.submission(source, released, "tamper_edit"), expected)
    assert not checks.untouched(cohort.submission(source, released, "partial"), expected)
    assert not checks.untouched(cohort.submission(source, released, "correct"), expected)


def test_students_sort_case_insensitively():
    from normedu.course.config import student_sort_key

    names = ["Frank_Miller", "alice", "Bob", "bob"]
    assert sorted(names, key=student_sort_key) == ["alice", "Bob", "bob", "Frank_Miller"]


# -- collect -------------------------------------------------------------------------------
def test_student_id_is_safe_for_nbgrader():
    assert student_id("Doe, Jane (2)") == "Doe_Jane_2"
    assert student_id("jane.doe@uni.edu") == "jane.doe@uni.edu"
    with pytest.raises(ValueError, match="cannot make a student id"):
        student_id(" ,, ")


def test_raw_identity_layouts_and_wrong_names():
    # What collect reads from a file's place in the inbox, before student_id makes it safe.
    assert _raw_identity("jane.ipynb", "demo", "flat", None) == ("jane", [])
    raw, notes = _raw_identity("jane.txt", "demo", "flat", None)
    assert raw == "jane" and "handed in as 'jane.txt'" in notes[0]
    assert _raw_identity("Jane Doe/demo.ipynb", "demo", "folders", None) == ("Jane Doe", [])
    raw, notes = _raw_identity("jane/Untitled.ipynb", "demo", "folders", None)
    assert raw == "jane" and "expected 'demo.ipynb'" in notes[0]
    canvas = r"^(?P<student>[a-z]+)_\d+_"
    assert _raw_identity("doejane_123_456_demo.ipynb", "demo", "flat", canvas) == ("doejane", [])
    with pytest.raises(ValueError, match="does not match --pattern"):
        _raw_identity("README", "demo", "flat", canvas)
    with pytest.raises(ValueError, match="subfolder"):
        _raw_identity("a/b.ipynb", "demo", "flat", None)
    with pytest.raises(ValueError, match="layout must be one of"):
        _raw_identity("a.ipynb", "demo", "zip", None)


def test_two_hand_ins_of_one_id_are_refused_until_mapped(tmp_path):
    from normedu.course.collect import collect, load_collect_record, read_mapping

    (tmp_path / "course").mkdir()
    course = Course.at(tmp_path / "course")
    cohort.write_demo_assignment(course.root)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name, body in (("Jane Doe.ipynb", "1"), ("Jane_Doe.ipynb", "2"), ("bob.ipynb", "3")):
        (inbox / name).write_text(body)
    with pytest.raises(ValueError) as info:
        collect(course, "demo", inbox)
    assert "'Jane Doe.ipynb' and 'Jane_Doe.ipynb'" in str(info.value)
    assert "Jane_Doe" in str(info.value) and "--map" in str(info.value)
    assert not (course.root / "submitted").exists()  # nothing was placed
    mapfile = tmp_path / "map.csv"
    mapfile.write_text("file,student\nJane Doe.ipynb,jane_doe_2\n")
    items, unplaced = collect(course, "demo", inbox, mapping=read_mapping(mapfile))
    assert unplaced == []
    assert {i.student: i.source for i in items} == {
        "jane_doe_2": "Jane Doe.ipynb", "Jane_Doe": "Jane_Doe.ipynb", "bob": "bob.ipynb"
    }  # fmt: skip
    placed = course.submitted_dir("jane_doe_2", "demo") / "demo.ipynb"
    assert placed.read_text() == "1"
    record = load_collect_record(course, "demo")
    assert record["jane_doe_2"]["source"] == "Jane Doe.ipynb"
    assert record["jane_doe_2"]["collected"].endswith("+00:00")


def test_course_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="is not a directory"):
        Course.at(tmp_path / "nope")
    course = Course.at(tmp_path)
    with pytest.raises(ValueError, match="no assignment 'x'"):
        course.notebooks("x")
    cohort.write_demo_assignment(tmp_path)
    assert course.assignments() == ["demo"] and course.notebooks("demo") == ["demo"]


def test_course_root_is_found_above_the_current_folder(tmp_path, monkeypatch):
    """`normedu autograde` run from exercises/ finds the course root above it; without any
    nbgrader_config.py the current folder is the root and the error says where it looked."""
    (tmp_path / "nbgrader_config.py").write_text("")
    inner = tmp_path / "exercises" / "demo"
    inner.mkdir(parents=True)
    monkeypatch.delenv("NORMEDU_COURSE_ROOT", raising=False)
    monkeypatch.chdir(inner)
    assert Course.at().root == tmp_path.resolve()
    (tmp_path / "nbgrader_config.py").unlink()
    course = Course.at()
    assert course.root == inner.resolve()
    with pytest.raises(ValueError, match=r"is .*demo the course root\? Run from it or pass --root"):
        course.notebooks("demo")


def test_a_new_gradebook_records_the_migration_alembic_names_without_running_it(
    tmp_path, monkeypatch
):
    import re
    import sqlite3

    import nbgrader.api
    from nbgrader.dbutil import ALEMBIC_DIR

    from normedu.course.config import ensure_alembic

    ensure_alembic()
    # The reference, read from nbgrader's migration scripts without alembic: the head is the
    # one revision that no other script names as its down_revision.
    scripts = [p.read_text() for p in Path(ALEMBIC_DIR, "versions").glob("*.py")]
    revisions = {re.search(r"^revision = '(\w+)'", s, re.M)[1] for s in scripts}
    downs = {m[1] for s in scripts if (m := re.search(r"^down_revision = '(\w+)'", s, re.M))}
    (head,) = revisions - downs

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a gradebook ran {args}")

    monkeypatch.setattr(nbgrader.api.sp, "check_output", no_subprocess)
    db = tmp_path / "gradebook.db"
    with nbgrader.api.Gradebook(f"sqlite:///{db}"):
        pass
    with sqlite3.connect(db) as con:
        (recorded,) = con.execute("SELECT version_num FROM alembic_version").fetchone()
    assert recorded == head


def test_verdict_rejects_unknown_status():
    with pytest.raises(ValueError, match="status must be one of"):
        status.Verdict("s", "a", "passed")


# -- cohort --------------------------------------------------------------------------------
def test_submission_kinds():
    source = cohort.demo_notebook()
    released = nbformat.reads(nbformat.writes(source), as_version=4)
    for cell in released.cells:
        cell.source = checks.released(cell.source).replace(
            "return x - x.mean(axis=1, keepdims=True)", "raise NotImplementedError()"
        )
    correct = cohort.submission(source, released, "correct")
    assert (
        "x.mean(axis=1" in correct.cells[1].source
        and "BEGIN SOLUTION" not in correct.cells[1].source
    )
    assert "NotImplementedError" in cohort.submission(source, released, "stub").cells[1].source
    assert "os._exit(0)" in cohort.submission(source, released, "exit").cells[1].source
    assert cohort.submission(source, released, "empty") == b""
    with pytest.raises(json.JSONDecodeError):
        json.loads(cohort.submission(source, released, "corrupt"))
    with pytest.raises(ValueError, match="unknown submission kind"):
        cohort.submission(source, released, "lazy")


def test_default_mix_is_forty_students():
    assert sum(cohort.DEFAULT_MIX.values()) == 40


# -- sandbox and worker -------------------------------------------------------------------
def _sandboxed(tmp_path, code: str, via: str, **limits) -> str:
    """Run ``code`` confined as a grading kernel is, and return what it printed.

    via "exec": the wrapper ``python -m normedu.course.sandbox ... -- python -c code``; via
    "zygote": a real kernel forked by :class:`normedu.course.zygote.Zygote` (the grading
    workers' path), started and driven through ``SandboxKernelManager``.
    """
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    if via == "exec":
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in limits.items()]
        cmd = [sys.executable, "-m", "normedu.course.sandbox", f"--workdir={work}", *flags]
        out = subprocess.run(
            [*cmd, "--", sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert not out.returncode, out.stderr
        return out.stdout
    return asyncio.run(_in_forked_kernel(work, code, limits))


async def _in_forked_kernel(work, code: str, limits: dict) -> str:
    from normedu.course.kernel_manager import SandboxKernelManager
    from normedu.course.zygote import Zygote

    zygote = Zygote(threads=1)
    km = SandboxKernelManager(
        kernel_name="python3",
        sandbox_workdir=str(work),
        sandbox_memory_mb=int(limits.get("memory_mb", 0)),
        sandbox_landlock=limits.get("landlock", "auto"),
        sandbox_zygote=zygote,
        transport="ipc",
        ip=str(work / "kernel"),
    )
    printed: list[str] = []
    try:
        await km.start_kernel()
        # It is the zygote's child, not a process started from scratch.
        assert psutil.Process(km.provisioner.pid).ppid() == zygote.pid
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)

        def hook(msg):
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                printed.append("\n".join(msg["content"]["traceback"]))

        await kc.execute_interactive(code, output_hook=hook, timeout=60)
        kc.stop_channels()
    finally:
        await km.shutdown_kernel(now=True)
        zygote.close()
    return "".join(printed)


VIAS = pytest.mark.parametrize("via", ["exec", "zygote"])


@needs_linux
@VIAS
def test_sandbox_memory_cap_raises_memory_error(tmp_path, via):
    code = "import numpy as np\ntry:\n    np.ones(2**31)\nexcept MemoryError:\n    print('capped')"
    out = _sandboxed(tmp_path, code, via, memory_mb=1024, landlock="off")
    assert out.strip() == "capped", out


@needs_linux
@VIAS
def test_sandbox_environment_is_scrubbed(tmp_path, via, monkeypatch):
    monkeypatch.setenv("NORMEDU_SECRET_TEST", "leak")
    code = (
        "import os, tempfile; print(os.getcwd()); print(os.environ['HOME']); "
        "print(tempfile.gettempdir()); print('NORMEDU_SECRET_TEST' in os.environ)"
    )
    cwd, home, tmp, leaked = _sandboxed(tmp_path, code, via, landlock="off").split()
    work = str((tmp_path / "work").resolve())
    assert cwd == home == work and tmp == f"{work}/.tmp" and leaked == "False"


@pytest.mark.skipif(landlock_abi() < 1, reason="the Linux kernel has no Landlock")
@VIAS
def test_landlock_blocks_writes_and_reads_outside_the_working_copy(tmp_path, via):
    # Landlock refuses (PermissionError); in the kernel's own root the file is not even there.
    victim = tmp_path / "gradebook.db"
    victim.write_text("grades")
    code = (
        "import os\n"
        "open('mine.txt', 'w').write('ok')\n"
        f"for p in ['../gradebook.db', {str(victim)!r}]:\n"
        "    try:\n        open(p, 'a').write('x'); print('wrote')\n"
        "    except (PermissionError, FileNotFoundError):\n        print('denied')\n"
        f"try:\n    open({str(victim)!r}).read(); print('read')\n"
        "except (PermissionError, FileNotFoundError):\n    print('denied')\n"
        f"try:\n    os.remove({str(victim)!r}); print('removed')\n"
        "except (PermissionError, FileNotFoundError):\n    print('denied')\n"
    )
    out = _sandboxed(tmp_path, code, via, landlock="on")
    assert out.split() == ["denied"] * 4, out
    assert victim.read_text() == "grades"
    assert (tmp_path / "work" / "mine.txt").read_text() == "ok"


def test_only_an_ipython_kernel_of_this_interpreter_is_forked():
    from normedu.course.zygote import kernel_arguments

    wrapper = [sys.executable, "-m", "normedu.course.sandbox", "--workdir", "w", "--"]
    kernel = [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "c.json"]
    assert kernel_arguments(wrapper + kernel) == ["-f", "c.json"]
    assert kernel_arguments(kernel) == ["-f", "c.json"]
    assert kernel_arguments(["/usr/bin/other-python", *kernel[1:]]) is None
    assert kernel_arguments([sys.executable, "-m", "other_kernel", "-f", "c.json"]) is None


def test_may_run_long_spots_loops_and_blocking_calls(tmp_path):
    from normedu.course.checks import imported_modules, may_run_long

    def nb(source):
        path = tmp_path / f"{abs(hash(source))}.ipynb"
        path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": source}]}))
        return path

    assert may_run_long(nb("while True:\n    pass"))
    assert may_run_long(nb("import time\ntime.sleep(100)"))
    assert not may_run_long(nb("x = ', '.join(['a'])\nfor i in range(3):\n    x += 'b'"))
    assert not may_run_long(nb("def f(:"))  # not Python: nothing to tell
    (tmp_path / "broken.ipynb").write_text("{")
    assert not may_run_long(tmp_path / "broken.ipynb")
    # The same parse of the code cells names what a notebook imports, magics and all.
    magics_and_all = nb("%matplotlib inline\nimport torch.nn as nn\nfrom numpy import e")
    assert imported_modules(magics_and_all) == {"torch", "numpy"}
    assert imported_modules(nb("from . import sibling\nx = 'import torch'")) == set()


def test_loads_module_follows_imports_without_paying_for_the_module(tmp_path):
    """torch through normedu.distributed counts (the syncbn assignment's case), an import of
    numpy alone does not; the fresh interpreter stops before torch's import (the tripwire
    prints instead of importing), and a failing import still fails."""
    import subprocess

    from normedu.course.checks import loads_module

    def nb(source):
        path = tmp_path / f"{abs(hash(source))}.ipynb"
        path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": source}]}))
        return path

    assert loads_module(
        nb("import numpy as np\nfrom normedu.distributed import run_ranks"), "torch"
    )
    assert not loads_module(nb("import numpy as np\nx = 'import torch'"), "torch")
    assert loads_module(nb("%matplotlib inline\nfrom torch import nn"), "torch")  # no interpreter
    with pytest.raises(subprocess.CalledProcessError):
        loads_module(nb("import no_such_module_in_normedu_tests"), "torch")


@needs_linux
def test_kill_descendants_reaps_a_process_tree():
    # A child that starts a grandchild in its own session, as a student's escape attempt would.
    code = (
        "import subprocess, time; "
        "subprocess.Popen(['sleep', '4321'], start_new_session=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while len(descendants(child.pid)) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    tree = [child.pid, *descendants(child.pid)]
    assert len(tree) == 2
    assert kill_descendants(child.pid) >= 1
    child.kill()
    child.wait()
    for pid in tree:
        try:
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass


# -- CLI -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    ["release", "collect", "autograde", "feedback", "export", "adjust", "students", "grade-bench"],
)
def test_cli_help(command, capsys):
    from normedu.cli import main

    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert command.split("-")[0] in capsys.readouterr().out


def test_cli_reports_bad_arguments(tmp_path, capsys):
    from normedu.cli import main

    assert main(["--root", str(tmp_path), "export", "nope"]) == 2
    assert "no assignment 'nope'" in capsys.readouterr().err


def test_a_second_grading_run_on_the_same_course_is_refused(tmp_path):
    from normedu.course.gradebook import lock as _lock

    course = Course.at(tmp_path)
    held = _lock(course)
    try:
        with pytest.raises(ValueError, match="another normedu autograde is running"):
            _lock(course)
    finally:
        held.close()
    _lock(course).close()  # free again once the first run ends


def test_stored_benchmark_table(tmp_path, monkeypatch):
    from normedu.course.grading_bench import stored_markdown

    monkeypatch.setenv("NORMEDU_ROOT", str(tmp_path))
    assert "Not measured yet" in stored_markdown()
    record = {
        "provenance": {
            "cpu_count": 2, "device": "CPU (x)", "date": "2026-11-29T19:00:00Z", "command": "c",
        },
        "data": {
            "assignment": "layernorm", "submissions": 40, "executed": 38, "jobs": 2,
            "sequential_s": 100.0, "parallel_s": 50.0, "sequential_per_submission_s": 2.5,
            "parallel_per_submission_s": 1.25, "speedup": 2.0, "identical": True,
            "cell_timeout_s": 10, "sandbox": "s", "import_numpy_s": 0.2, "import_torch_s": 1.5,
        },
    }  # fmt: skip
    (tmp_path / "results" / "cpu").mkdir(parents=True)
    (tmp_path / "results" / "cpu" / "grade_bench.json").write_text(json.dumps(record))
    table = stored_markdown()
    assert "| speed-up | 2.00x |" in table and "2.50 s per submission" in table
    assert "numpy and torch 1.50 s" in table and "2026-11-29T19:00:00Z" in table
    assert "does not exceed the number of workers" in table and "| not measured |" in table
    # A speed-up above the worker count can only come from a changing load: the page says so.
    record["data"].update(speedup=3.0, stock_nbgrader_s=200.0)
    (tmp_path / "results" / "cpu" / "grade_bench.json").write_text(json.dumps(record))
    table = stored_markdown()
    assert "exceeds the number of workers (2)" in table
    assert "200.0 s, 5.00 s per submission" in table and "took 0.50x the time of stock" in table


def test_feedback_tracebacks_keep_the_cell_and_drop_the_grading_machine():
    from normedu.course.nbgrader_bridge import student_traceback

    output = {
        "ename": "GradingError",
        "evalue": "out is wrong. Likely cause: eps outside",
        "traceback": [
            "\x1b[0;31m----------\x1b[0m",
            "\x1b[0;31mGradingError\x1b[0m  Traceback (most recent call last)",
            "Cell \x1b[0;32mIn[7], line 3\x1b[0m\n----> 3 grade.check_forward_values(f)",
            "File \x1b[0;32m/home/prof/course/normedu/grading/layernorm.py:120\x1b[0m, in check",
            "File /usr/lib/python3/site-packages/numpy/core.py:5, in f",
            "\x1b[0;31mGradingError\x1b[0m: out is wrong. Likely cause: eps outside",
        ],
    }
    shown = "\n".join(student_traceback(output, hidden=False))
    assert "In[7]" in shown and "check_forward_values" in shown and "Likely cause" in shown
    assert "/home/prof" not in shown and "site-packages" not in shown
    assert student_traceback(output, hidden=True) == [
        "GradingError: out is wrong. Likely cause: eps outside"
    ]


def test_nbgrader_metadata_check_accepts_and_rejects_what_jsonschema_does():
    """nbgrader's cell-metadata validator, with the compiled validator installed by the
    bridge, against ``jsonschema.validate`` on nbgrader's own schema."""
    import jsonschema
    from nbgrader.nbgraderformat.v3 import MetadataValidatorV3

    import normedu.course.nbgrader_bridge  # noqa: F401 - installs the compiled validator

    validator = MetadataValidatorV3()
    good = {"grade": True, "grade_id": "t1", "locked": True, "points": 1, "schema_version": 3,
            "solution": False, "task": False}  # fmt: skip
    bad = {**good, "points": "one"}
    for meta in (good, bad):
        cell = nbformat.v4.new_code_cell("pass", metadata={"nbgrader": dict(meta)})
        try:
            jsonschema.validate(meta, validator.schema)
            expected = None
        except jsonschema.ValidationError as exc:
            expected = exc.message
        try:
            validator.validate_cell(cell)
            got = None
        except jsonschema.ValidationError as exc:
            got = exc.message
        assert got == expected
    assert expected is not None  # the bad cell was rejected, by both


def test_root_nbgrader_config_is_the_course_configuration():
    """One nbgrader configuration: the root nbgrader_config.py loads Course.nbgrader_config,
    which hides hidden tests in feedback, keeps the exchange in the course, and uses ipc."""
    from traitlets.config import Config

    repo = Path(__file__).resolve().parent.parent
    loaded = Config()
    path = repo / "nbgrader_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: loaded,
                                                         "__file__": str(path)})  # fmt: skip
    truth = Course(root=repo).nbgrader_config()
    assert loaded == truth
    assert "nbgrader.preprocessors.ClearHiddenTests" in truth.GenerateFeedback.preprocessors
    assert Path(truth.Exchange.root).is_relative_to(repo) and Path(truth.Exchange.root).is_dir()
    assert truth.KernelManager.transport == "ipc"
    assert truth.OverwriteCells.add_missing_cells is True


def test_only_assignments_that_import_torch_get_it_preloaded():
    from normedu.course.autograde import preloads

    course = Course(root=Path(__file__).resolve().parent.parent)
    torch_ = ("torch", "torch.fx.experimental.symbolic_shapes")  # with its lazily imported part
    assert preloads(course, "rmsnorm", "rmsnorm") == torch_
    assert preloads(course, "layernorm", "layernorm") == ()


def test_zygote_imports_what_a_kernel_imports_as_it_starts(tmp_path):
    """After the zygote's imports, initializing a kernel (what every fork does) imports no
    more of ipykernel, IPython or debugpy: each of those is CPU that every submission pays."""
    code = f"""
import importlib, sys
import ipykernel.kernelapp
from jupyter_client.connect import write_connection_file
from normedu.course.zygote import KERNEL_IMPORTS
for name in KERNEL_IMPORTS:
    importlib.import_module(name)
before = set(sys.modules)
from ipykernel.kernelapp import IPKernelApp
connection, _ = write_connection_file({str(tmp_path / "kernel.json")!r}, ip="127.0.0.1")
IPKernelApp.instance().initialize(["-f", connection])
new = sorted(set(sys.modules) - before)
sys.__stdout__.write(" ".join(new))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    late = [m for m in out.stdout.split() if m.split(".")[0] in ("ipykernel", "IPython", "debugpy")]
    assert not late, f"a forked kernel still imports {late}: add them to KERNEL_IMPORTS"


@needs_linux
def test_book_kernels_are_forked_in_the_page_folder_with_the_page_environment(
    tmp_path, monkeypatch
):
    """The book build's kernels (book/_ext/parallel_execute.py): forked, unconfined, from a
    zygote that preloaded a module; each runs in its page's folder with the environment
    jupyter_client built for it, not the zygote's."""
    from nbclient import NotebookClient

    from normedu.course.zygote import Zygote, warm_kernel_manager

    page = tmp_path / "book"
    page.mkdir()
    monkeypatch.setenv("NORMEDU_PAGE_TEST", "page")
    zygote = Zygote(threads=None, preload=("colorsys",), grading=False, env={"ZYGOTE_ONLY": "1"})
    code = (
        "import os, sys; print(os.getcwd(), os.getppid(), 'colorsys' in sys.modules, "
        "os.environ.get('NORMEDU_PAGE_TEST'), os.environ.get('ZYGOTE_ONLY'))"
    )
    manager = warm_kernel_manager(zygote)

    def run() -> list[str]:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        NotebookClient(
            nb,
            timeout=60,
            kernel_name="python3",
            kernel_manager_class=manager,
            resources={"metadata": {"path": str(page)}},
        ).execute()
        return nb.cells[0].outputs[0]["text"].split()

    try:
        cwd, parent, preloaded, variable, zygote_only = run()
        assert (cwd, int(parent)) == (str(page), zygote.pid)
        assert (preloaded, variable, zygote_only) == ("True", "page", "None")
        # A zygote that died: the next page's kernel starts from scratch instead.
        zygote.process.kill()
        zygote.process.wait()
        cwd, parent, preloaded, _, _ = run()
        assert (cwd, preloaded) == (str(page), "False") and int(parent) != zygote.pid
    finally:
        zygote.close()


def test_student_environment_holds_what_every_assignment_imports():
    """`make student-lab` installs requirements-student.in (plus torch when asked): every
    module an assignment imports is there, from the standard library, or torch; and every name
    is pinned in the lock file, which the student environment uses as constraints."""
    repo = Path(__file__).resolve().parent.parent
    lines = (repo / "requirements-student.in").read_text().splitlines()
    student = {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}
    pinned = {
        ln.split("==")[0].lower()
        for ln in (repo / "requirements-lock.txt").read_text().splitlines()
        if "==" in ln and not ln.startswith("#")
    }
    assert student <= pinned, student - pinned
    course = Course.at(repo)
    for assignment in course.assignments():
        used = checks.imported_modules(course.source_dir(assignment) / f"{assignment}.ipynb")
        outside = used - set(sys.stdlib_module_names) - {"normedu", "torch"} - student
        assert not outside, (assignment, outside)


def test_nbgraders_own_autograde_refuses_and_names_the_sandboxed_command(tmp_path):
    """Formgrader's Autograde button (stock nbgrader autograde, with the course's
    configuration) would run student code unconfined: it refuses before running anything,
    and its log names `normedu autograde`."""
    import shutil as sh

    course = Course(root=tmp_path)
    cohort.write_demo_assignment(tmp_path)
    api = course.api()
    assert api.generate_assignment("demo", force=True)["success"]
    folder = tmp_path / "submitted" / "jane" / "demo"
    folder.mkdir(parents=True)
    sh.copy(tmp_path / "exercises" / "demo" / "demo.ipynb", folder / "demo.ipynb")
    result = api.autograde("demo", "jane", force=True)
    assert not result["success"]
    assert "normedu autograde demo" in result["log"], result["log"][-2000:]
    assert not (tmp_path / "autograded" / "jane" / "demo" / "demo.ipynb").exists()


@pytest.mark.skipif(landlock_abi() < 1, reason="the Linux kernel has no Landlock")
def test_a_sandboxed_process_reaches_no_socket_and_makes_no_device(tmp_path):
    # Issue 31, without nbgrader: the wrapper's namespaces and Landlock, on a TCP listener of
    # this machine, a Unix socket outside the working copy, and a device file (as root, a
    # kernel could otherwise mknod the disk in its working copy).
    import socket

    tcp = socket.create_server(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(tmp_path / "s.sock"))
    unix.listen()
    code = (
        "import os, socket\n"
        f"for family, address in [(socket.AF_INET, ('127.0.0.1', {tcp.getsockname()[1]})), "
        f"(socket.AF_UNIX, {str(tmp_path / 's.sock')!r})]:\n"
        "    try:\n        socket.socket(family).connect(address); print('connected')\n"
        "    except OSError:\n        print('refused')\n"
        "try:\n    os.mknod('disk', 0o600 | 0o060000, os.makedev(8, 0)); print('made')\n"
        "except OSError:\n    print('refused')\n"
    )
    (tmp_path / "work").mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "normedu.course.sandbox", "--workdir", str(tmp_path / "work"),
         "--landlock", "on", "--", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    tcp.close()
    unix.close()
    assert run.stdout.split() == ["refused"] * 3, run.stdout + run.stderr


def test_grading_bench_compares_grades_not_times():
    """Two runs over one cohort differ in when they collected, never in what they graded:
    the benchmark's CSV comparison drops the time columns and keeps every grade."""
    from normedu.course.grading_bench import _grades_only

    head = "student,score,file,collected,handed_in,notes\n"
    first = head + "s1,12,s1.ipynb,2026-12-03T01:37:19,2026-12-03T01:37:19,\n"
    later = head + "s1,12,s1.ipynb,2026-12-03T01:37:43,2026-12-03T01:37:43,\n"
    worse = head + "s1,11,s1.ipynb,2026-12-03T01:37:43,2026-12-03T01:37:43,\n"
    assert _grades_only(first) == _grades_only(later)
    assert _grades_only(first) != _grades_only(worse)


def test_the_sandbox_summary_says_whether_workers_get_a_pid_namespace(monkeypatch):
    """Where `unshare` is refused, the workers run without a PID namespace of their own; the
    summary line of every autograde run (and of the export's notes) says so."""
    from normedu.course import pool
    from normedu.course.sandbox import describe_sandbox

    monkeypatch.setattr(pool, "_PID_NAMESPACE", ["unshare", "--pid"])
    assert "+ a PID namespace per worker" in describe_sandbox()
    monkeypatch.setattr(pool, "_PID_NAMESPACE", [])
    assert "no PID namespace: a kernel can kill its worker" in describe_sandbox()
