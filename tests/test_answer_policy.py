"""The answer policy (:mod:`normedu.course.policy`) on text alone, no kernel: magics and shell
lines are skipped on their own line, the rest of the cell runs; constructs worth a look are
noted for review, and the habits of honest students (issue 45) are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from data.correct import VARIANTS as CORRECT_VARIANTS
from data.habits import HABITS

from normedu.course import policy

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())


def _solution(assignment: str) -> Path:
    return REPO / "solutions" / assignment / f"{assignment}.ipynb"


@pytest.mark.parametrize("assignment", SOLUTIONS)
def test_the_solutions_and_correct_answers_run_as_written_and_are_not_noted(assignment):
    nb = json.loads(_solution(assignment).read_text())
    answers = [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("solution")
    ]
    for cells in CORRECT_VARIANTS.get(assignment, {}).values():
        answers += list(cells.values())
    assert answers
    assert [(a[:40], policy.review_notes(a)) for a in answers if policy.review_notes(a)] == []
    assert [a[:40] for a in answers if policy.grading_source(a) is not None] == []


def test_the_habits_of_honest_students_are_not_noted():
    sources = [edit for habit in HABITS.values() for edit in habit.values()]
    assert sources and [s for s in sources if policy.review_notes(s)] == []


@pytest.mark.parametrize(
    "line,expected",
    [
        ("%timeit f(x)", "None  # skipped while grading: %timeit f(x)"),
        ("!python --version", "None  # skipped while grading: !python --version"),
        ("files = !ls", "files = None  # skipped while grading: files = !ls"),
        ("t = %timeit -o f(x)", "t = None  # skipped while grading: t = %timeit -o f(x)"),
        ("%matplotlib inline", "None  # skipped while grading: %matplotlib inline"),
        ("np.mean?", "None  # skipped while grading: np.mean?"),
    ],
)
def test_a_magic_or_shell_line_runs_as_none_on_its_own_line(line, expected):
    source = f"import numpy as np\n\n\ndef f(x):\n    return x\n\n\n{line}\nx = f(2)\n"
    rewritten = policy.grading_source(source)
    lines = rewritten.splitlines()
    assert len(lines) == len(source.splitlines()) and lines[7] == expected
    namespace: dict = {}
    exec(rewritten, namespace)  # noqa: S102 - the rewritten cell still defines f and runs on
    assert namespace["x"] == 2


def test_a_timing_cell_magic_runs_its_body_and_another_is_skipped():
    body = "def f(x):\n    return 2 * x\n\n\ny = f(3)\n"
    namespace: dict = {}
    exec(policy.grading_source("%%time\n" + body), namespace)  # noqa: S102
    assert namespace["y"] == 6
    skipped = policy.grading_source("%%bash\necho hi\nls\n")
    assert skipped.startswith("pass  # skipped while grading: %%bash")
    assert len(skipped.splitlines()) == 3
    assert policy.grading_source("def f(x):\n    return x % 2  # not a magic\n") is None


@pytest.mark.parametrize(
    "source,construct",
    [
        ("import gc\nfs = gc.get_objects()", "gc"),
        ("g = (lambda: 0).__globals__", "__globals__"),
        ("get_ipython().set_custom_exc((Exception,), h)", "set_custom_exc"),
        ("get_ipython().input_transformers_cleanup.append(r)", "input_transformers_cleanup"),
        ("import torch\nf = torch._C._VariableFunctions.layer_norm", "_VariableFunctions"),
        ("import sys\nframe = sys._getframe().f_back", "f_back"),
    ],
)
def test_interference_like_constructs_are_noted_with_their_line(source, construct):
    found = policy.review_notes("import numpy as np\n" + source)
    assert [f.construct for f in found][-1:] == [construct]
    assert found[-1].line == source.count("\n") + 2


def test_police_rewrites_the_student_s_cells_and_notes_without_the_course_s():
    course_cell = {"cell_type": "code", "source": "%timeit 1\n", "metadata": {}}
    answer = {
        "cell_type": "code",
        "source": "import gc\n%timeit f(1)\n",
        "metadata": {"nbgrader": {"solution": True, "grade_id": "f"}},
    }
    replace, notes = policy.police({"cells": [course_cell, answer]}, {"%timeit 1"})
    assert set(replace) == {1} and "None  # skipped while grading" in replace[1]
    assert notes == [
        "needs review: answer cell `f`, line 1: `gc` (reaches every object of the process); "
        "graded on what its functions return, no points taken"
    ]
