"""``normedu gradescope``: the autograder zip, run in an emulation of Gradescope's harness.

Once per module (fixture ``harness``): the zip of the ``jacobian`` assignment (a NumPy one,
with the smallest mistake catalog) is built by the CLI, unpacked where Gradescope unpacks it
(``<root>/source``, ``<root>`` standing in for ``/autograder`` through
``NORMEDU_GRADESCOPE_ROOT``), and its ``setup.sh`` runs with a fresh virtual environment as
its Python. That environment sees the project environment's packages (as
``tests/test_course_wheel.py`` does) and pip may not use an index (``PIP_NO_INDEX``), so
setup.sh's installs must all be met offline: it installs the wheel of the zip, and every
pinned requirement is already there. Then each hand-in is put alone in
``<root>/submission`` and ``run_autograder`` runs, as Gradescope runs it, in ``<root>``.

The cohort: the solution, the untouched release, each catalogued mistake once, an attack on
the checks, a notebook under another name, one whose kernel dies, one of another assignment,
invalid JSON. The same hand-ins are graded by ``normedu autograde`` in a course of their own:
the scores must be equal, test cell by test cell. Every ``results.json`` must validate
against ``tests/data/gradescope_results.schema.json``, written from Gradescope's
documentation, not from this code.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from envs import fresh_env

from normedu.course.gradescope import Options
from normedu.course.gradescope_run import locate, results

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((Path(__file__).parent / "data" / "gradescope_results.schema.json").read_text())
ASSIGNMENT = "jacobian"

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the grading sandbox needs Linux"
    ),
]


def _valid(data: dict) -> None:
    import jsonschema

    jsonschema.validate(data, SCHEMA)


# -- the harness -------------------------------------------------------------------------------
def _unzip(archive: Path, into: Path) -> None:
    """Unpack as Gradescope does, keeping the executable bits the zip records."""
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            path = Path(zf.extract(info, into))
            mode = info.external_attr >> 16
            if mode:
                path.chmod(mode & 0o777)


#: NumPy only, so that the answer policy lets it run (``os._exit`` would be refused first): a
#: read 1 TiB past a one-element array, which kills the kernel with SIGSEGV.
CRASH = "\nnp.lib.stride_tricks.as_strided(np.zeros(1), shape=(2,), strides=(2**40,))[1]\n"


def _crashing(nb):
    (first, *_) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    first.source += CRASH
    return nb


def _hand_ins(src, rel) -> dict[str, dict[str, bytes]]:
    """``{student: {file name: bytes}}``: what each student uploads to Gradescope."""
    from normedu.course.cohort import attack, submission
    from normedu.grading import mistakes

    def nb_bytes(nb) -> bytes:
        return nbformat.writes(nb).encode() if not isinstance(nb, bytes) else nb

    name = f"{ASSIGNMENT}.ipynb"
    out = {
        "correct": {name: nb_bytes(submission(src, rel, "correct"))},
        "stub": {name: nb_bytes(submission(src, rel, "stub"))},
        "attack": {name: nb_bytes(attack(src, rel, "monkeypatch"))},
        "renamed": {"my_jacobian (1).ipynb": nb_bytes(submission(src, rel, "correct"))},
        "dies": {name: nb_bytes(_crashing(submission(src, rel, "correct")))},
        "badjson": {name: submission(src, rel, "corrupt")},
        "otherassign": {name: (REPO / "exercises" / "layernorm" / "layernorm.ipynb").read_bytes()},
    }
    solved = submission(src, rel, "correct")
    answers = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in solved.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    for i, m in enumerate(mistakes.for_assignment(ASSIGNMENT)):
        nb = copy.deepcopy(solved)
        (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == m.cell]
        cell.source = m.source(answers[m.cell])
        out[f"mistake{i:02d}"] = {name: nb_bytes(nb)}
    return out


#: What a grading kernel says of what it cannot reach (normedu.course.reach).
UNAVAILABLE = "not available while this assignment is graded"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    from normedu.cli import main
    from normedu.course.autograde import autograde
    from normedu.course.config import Course
    from normedu.course.gradebook import scores

    base = tmp_path_factory.mktemp("gradescope")
    course = Course(root=base / "course")
    shutil.copytree(REPO / "solutions" / ASSIGNMENT, course.source_dir(ASSIGNMENT))
    archive = base / "autograder.zip"
    assert main(["--root", str(course.root), "gradescope", ASSIGNMENT, "-o", str(archive)]) == 0

    root = base / "autograder"
    _unzip(archive, root / "source")
    python = fresh_env(base / "venv")
    env = dict(
        os.environ,
        NORMEDU_GRADESCOPE_ROOT=str(root),
        NORMEDU_GRADESCOPE_PYTHON=str(python),
        PIP_NO_INDEX="1",
        PYTHONPATH="",
    )
    setup = subprocess.run(
        ["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]

    src = nbformat.read(REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    rel = nbformat.read(REPO / "exercises" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    hand_ins = _hand_ins(src, rel)
    hand_ins["two"] = {
        "jacobian_v1.ipynb": hand_ins["correct"][f"{ASSIGNMENT}.ipynb"],
        "jacobian_v2.ipynb": hand_ins["stub"][f"{ASSIGNMENT}.ipynb"],
    }

    def run(files: dict[str, bytes]) -> dict:
        """One submission through the harness: the files in <root>/submission, then
        run_autograder from <root>, as Gradescope runs it."""
        for folder in ("submission", "results"):
            shutil.rmtree(root / folder, ignore_errors=True)
            (root / folder).mkdir()
        for name, data in files.items():
            (root / "submission" / name).write_bytes(data)
        shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
        out = subprocess.run(
            [str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return json.loads((root / "results" / "results.json").read_text())

    graded = {student: run(files) for student, files in hand_ins.items()}

    # The same hand-ins, graded by the instructor's `normedu autograde` (one notebook each,
    # under the assignment's name, as `normedu collect` places them).
    ref = Course(root=base / "reference")
    shutil.copytree(REPO / "solutions" / ASSIGNMENT, ref.source_dir(ASSIGNMENT))
    for student, files in hand_ins.items():
        if student != "two":
            (data,) = files.values()
            folder = ref.submitted_dir(student, ASSIGNMENT)
            folder.mkdir(parents=True)
            (folder / f"{ASSIGNMENT}.ipynb").write_bytes(data)
    report = autograde(ref, ASSIGNMENT, jobs=1)
    reference = {
        s: {g: score for g, score, _ in scores(ref, ASSIGNMENT, s) or []} for s in report.verdicts
    }
    return SimpleNamespace(
        root=root, env=env, graded=graded, reference=reference, report=report, hand_ins=hand_ins
    )


def _by_cell(result: dict) -> dict[str, float]:
    """``{grade_id: score}`` of a results.json (each test is named ``grade_id: what``)."""
    return {t["name"].split(":")[0]: t["score"] for t in result["tests"]}


# -- the tests ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group("course")
def test_every_results_json_validates_against_gradescopes_format(harness):
    assert len(harness.graded) == 20  # 10 catalogued mistakes + 2 shortcuts + 8 others
    for student, result in harness.graded.items():
        _valid(result)
        tests = result["tests"]
        assert len(tests) == 4, student  # the jacobian assignment's four test cells
        for entry in tests:
            assert {"name", "score", "max_score", "output", "visibility"} <= set(entry), student
        assert result["score"] == sum(t["score"] for t in tests), student


@pytest.mark.slow
@pytest.mark.xdist_group("course")
def test_scores_equal_normedu_autograde_cell_by_cell(harness):
    assert not harness.report.errors, harness.report.errors
    mismatched = {
        s: (_by_cell(r), harness.reference.get(s, {}))
        for s, r in harness.graded.items()
        if s != "two" and _by_cell(r) != {g: harness.reference.get(s, {}).get(g, 0.0)
                                          for g in _by_cell(r)}
    }  # fmt: skip
    assert not mismatched, mismatched
    # The scores are the ones these hand-ins must get, not just equal: 6 of 6 and 0.
    total = {s: r["score"] for s, r in harness.graded.items()}
    assert total["correct"] == total["renamed"] == 6.0
    for student in ("stub", "attack", "dies", "badjson", "otherassign", "two"):
        assert total[student] == 0.0, (student, harness.graded[student])
    mistakes = [s for s in total if s.startswith("mistake")]
    assert mistakes and all(total[s] < 6.0 for s in mistakes), total


@pytest.mark.slow
@pytest.mark.xdist_group("course")
def test_students_read_the_causes_and_never_the_hidden_tests(harness):
    from normedu.grading import mistakes

    for i, m in enumerate(mistakes.for_assignment(ASSIGNMENT)):
        result = harness.graded[f"mistake{i:02d}"]
        text = "\n".join(t["output"] for t in result["tests"] if t["status"] == "failed")
        # A shortcut to a reference meets what the grading kernel cannot reach (its own
        # notebook's guard says the catalogue's phrase; the grader says what was unavailable).
        said = UNAVAILABLE if m in mistakes.SHORTCUTS else m.phrase
        assert said in text + result["output"], (m.name, result)
    hidden_source = [
        c.source
        for c in nbformat.read(
            REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4
        ).cells
        if "### BEGIN HIDDEN TESTS" in c.source
    ]
    released = (REPO / "exercises" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()
    # Secret: a hidden test's line that the released notebook does not hold anywhere.
    secrets = ["BEGIN HIDDEN TESTS", str(REPO), "site-packages"]
    secrets += [ln.strip() for src in hidden_source for ln in src.splitlines()[1:]]
    secrets = [s for s in secrets if len(s) > 12 and not s.startswith("#") and s not in released]
    assert any("default_rng(32)" in s for s in secrets)  # the hidden inputs are among them
    for student, result in harness.graded.items():
        shown = json.dumps(result)
        leaked = [s for s in secrets if s in shown]
        assert not leaked, (student, leaked)
        for entry in result["tests"]:
            hidden = entry["name"].startswith("test_hidden")
            assert entry["visibility"] == ("after_published" if hidden else "visible")


@pytest.mark.slow
@pytest.mark.xdist_group("course")
def test_hand_ins_that_cannot_be_graded_say_why(harness):
    g = harness.graded
    assert (
        "handed in as 'my_jacobian (1).ipynb', expected 'jacobian.ipynb'"
        in (g["renamed"]["output"])
    )
    assert "2 notebooks were handed in" in g["two"]["output"]
    assert "jacobian_v1.ipynb" in g["two"]["output"]
    assert all(t["output"].startswith("not run") for t in g["two"]["tests"])
    assert "not valid JSON" in g["badjson"]["output"]
    assert "Status: wrong assignment" in g["otherassign"]["output"]
    assert "another assignment" in g["otherassign"]["output"]
    assert "Status: failed tests" in g["dies"]["output"], g["dies"]
    assert "the kernel died while running cell" in g["dies"]["output"], g["dies"]
    assert "Status: not attempted" in g["stub"]["output"]
    assert "interfere" in g["attack"]["output"], g["attack"]


@pytest.mark.slow
@pytest.mark.xdist_group("course")
def test_a_failing_grader_still_writes_a_result(harness, tmp_path):
    """No Python at all (the bash fallback), and a grader that raises (no options file)."""
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    shutil.copy(harness.root / "source" / "run_autograder", root / "run_autograder")
    (root / "source" / "python.txt").write_text(str(tmp_path / "no-such-python"))
    env = dict(harness.env, NORMEDU_GRADESCOPE_ROOT=str(root))
    subprocess.run([str(root / "run_autograder")], cwd=root, env=env, check=True, timeout=60)
    fallback = json.loads((root / "results" / "results.json").read_text())
    _valid(fallback)
    assert fallback["score"] == 0 and "could not start" in fallback["output"]

    (root / "results" / "results.json").unlink()
    python = (harness.root / "source" / "python.txt").read_text().strip()
    (root / "source" / "python.txt").write_text(python)
    out = subprocess.run(
        [str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    failed = json.loads((root / "results" / "results.json").read_text())
    _valid(failed)
    assert failed["score"] == 0 and "no fault of your submission" in failed["output"]
    assert "FileNotFoundError" in out.stdout  # the traceback, for the instructor's log


@pytest.mark.slow
@pytest.mark.xdist_group("course")
def test_student_code_may_read_the_installed_packages_but_not_the_zip(harness):
    """What a kernel may read (the sandbox's list, computed by the autograder's own Python):
    the environment setup.sh installed into, never <root>/source (solution, gradebook)."""
    python = (harness.root / "source" / "python.txt").read_text().strip()
    code = "import json, normedu.course.sandbox as s; print(json.dumps(s.read_only_paths()))"
    out = subprocess.run(
        [python, "-c", code], env=harness.env, capture_output=True, text=True, check=True
    )
    readable = [Path(p) for p in json.loads(out.stdout)]
    source = harness.root / "source"
    assert Path(python).parent.parent in readable  # the environment itself
    assert not [p for p in readable if p == source or p in source.parents], readable


# -- without the harness -----------------------------------------------------------------------
def test_the_submission_is_found_whatever_it_is_called(tmp_path):
    def hand_in(*names):
        folder = tmp_path / "_".join(names).replace("/", "-")
        for name in names:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text("{}")
        return folder

    path, notes, problem = locate(hand_in("hw/a.ipynb", "hw/other.ipynb", ".DS_Store"), "a")
    assert path.name == "a.ipynb" and notes == ["other notebooks not graded: other.ipynb"]
    assert problem is None
    path, notes, problem = locate(hand_in("a.txt"), "a")
    assert path.name == "a.txt" and "expected 'a.ipynb'" in notes[0]
    path, _, problem = locate(hand_in("b.py", "c.txt"), "a")
    assert path is None and "no notebook among the files" in problem
    path, _, problem = locate(hand_in("x/a.ipynb", "y/a.ipynb"), "a")
    assert path is None and "2 files are named a.ipynb" in problem
    path, _, problem = locate(tmp_path / "nothing", "a")
    assert path is None and problem.startswith("nothing was handed in")
    assert locate(hand_in("__MACOSX/a.ipynb", "a.ipynb"), "a")[1] == []


def test_hidden_tests_take_the_visibility_the_instructor_chose():
    from normedu.course.checks import SourceCell

    cells = [
        SourceCell("visible", "code", "check()", True, False, True, 1.0),
        SourceCell("hidden", "code", "x\n### BEGIN HIDDEN TESTS\ny\n### END HIDDEN TESTS", True,
                   False, True, 2.0),
    ]  # fmt: skip
    assert Options("a", "a").hidden_visibility == "after_published"
    for visibility in ("hidden", "after_due_date", "visible"):
        data = results(
            Options("a", "a", hidden_visibility=visibility),
            cells,
            {"visible": 1.0, "hidden": 0.0},
            {"visible": "", "hidden": "AssertionError: wrong"},
            {},
            status="failed tests",
            notes=["failed: hidden"],
        )
        _valid(data)
        assert [t["visibility"] for t in data["tests"]] == ["visible", visibility]
        assert [t["status"] for t in data["tests"]] == ["passed", "failed"]
        assert data["score"] == 1.0
    with pytest.raises(ValueError, match="hidden visibility"):
        Options("a", "a", hidden_visibility="later")


def test_setup_installs_torch_only_for_the_assignments_that_load_it():
    from normedu.course.gradescope import TORCH_INDEX, requirements, setup_script

    for assignment, loads in (("jacobian", False), ("rmsnorm", True)):
        needs, torch = requirements(REPO / "solutions" / assignment / f"{assignment}.ipynb")
        assert torch is loads, assignment
        assert "torch" not in needs and {"numpy", "nbgrader==0.9.6"} <= set(needs)
        script = setup_script(assignment, "normedu-0.1.0-py3-none-any.whl", torch)
        assert (f"--index-url {TORCH_INDEX}" in script) is loads
        assert "--no-deps --no-index" in script  # the wheel alone: its torch dependency unmet


def test_the_schema_refuses_what_gradescope_does_not_document():
    _valid({"score": 1.0})
    _valid({"tests": [{"score": 1.0, "max_score": 1.0, "name": "t", "visibility": "visible"}]})
    for bad in (
        {},  # neither a score nor tests
        {"tests": [{"name": "no score"}]},
        {"score": 1, "tests": [{"score": 1, "visiblity": "visible"}]},
        {"score": 1, "tests": [{"score": 1, "visibility": "after_grading"}]},
        {"score": "1"},
    ):
        with pytest.raises(Exception, match=r"(?s).") as info:
            _valid(bad)
        assert re.search("ValidationError", type(info.value).__name__), bad
