"""The answer policy (:mod:`normedu.course.policy`) on text alone, no kernel: every solution's
answer cells and every independently written correct answer pass it; each shortcut of
``tests/data/shortcuts.py`` is refused, with the construct named."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from data.correct import VARIANTS as CORRECT_VARIANTS
from data.shortcuts import SHORTCUTS

from normedu.course import policy
from normedu.grading import mistakes

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())


def _solution(assignment: str) -> Path:
    return REPO / "solutions" / assignment / f"{assignment}.ipynb"


@functools.cache
def _allowed(assignment: str) -> frozenset[str]:
    return policy.allowed_modules(_solution(assignment))


def _course_names(assignment: str, allowed) -> frozenset[str]:
    nb = json.loads(_solution(assignment).read_text())
    sources = [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and not c["metadata"].get("nbgrader", {}).get("solution")
    ]
    return policy.course_module_names(sources, allowed)


@pytest.mark.parametrize("assignment", SOLUTIONS)
def test_the_solution_and_every_correct_answer_pass_the_policy(assignment):
    allowed = policy.allowed_modules(_solution(assignment))
    names = _course_names(assignment, allowed)
    nb = json.loads(_solution(assignment).read_text())
    answers = {("solution", i): "".join(s) for i, s in enumerate(policy._answer_sources(nb))}
    for variant, cells in CORRECT_VARIANTS.get(assignment, {}).items():
        answers |= {(variant, cell): source for cell, source in cells.items()}
    assert answers
    refused = {k: policy.violations(s, allowed, names) for k, s in answers.items()}
    assert {k: v for k, v in refused.items() if v} == {}


def test_every_catalogued_edit_of_a_solution_passes_the_policy():
    # Wrong but honest answers are graded on their maths, not refused (the catalog's
    # SHORTCUTS, the few mistakes that replace the whole cell, and an edit that imports a
    # library, such as qknorm's scipy softmax, call libraries: the policy refuses those).
    found = {}
    for m in mistakes.CATALOG:
        if m.replacement is not None or any("import " in new for _, new in m.edits):
            continue
        nb = json.loads(_solution(m.assignment).read_text())
        (cell,) = [
            "".join(c["source"])
            for c in nb["cells"]
            if c["metadata"].get("nbgrader", {}).get("grade_id") == m.cell
        ]
        found[m.assignment, m.name] = policy.violations(m.source(cell), _allowed(m.assignment))
    assert found and {k: v for k, v in found.items() if v} == {}


def test_the_allow_list_is_the_solution_s_imports_and_the_math_modules():
    allowed = policy.allowed_modules(_solution("dyt"))
    assert allowed == {"numpy", *policy.SAFE_STDLIB, *policy.SAFE_EXTRA}
    # A student's own plot of an answer is no shortcut; the library's norm still is.
    plot = "import matplotlib.pyplot as plt\nplt.plot([1, 2])"
    assert not policy.violations(plot, allowed, set())
    assert policy.violations("import torch", allowed, set())
    assert "torch" in policy.allowed_modules(_solution("prepost"))
    assert "grade" in _course_names("layernorm", policy.allowed_modules(_solution("layernorm")))


@pytest.mark.parametrize("name", SHORTCUTS)
def test_each_shortcut_is_refused_naming_its_construct(name):
    construct, by_assignment = SHORTCUTS[name]
    for assignment, cells in by_assignment.items():
        allowed = policy.allowed_modules(_solution(assignment))
        names = _course_names(assignment, allowed)
        for source in cells.values():
            found = policy.violations(source, allowed, names)
            assert found and found[0].construct == construct, (assignment, found)


@pytest.mark.parametrize(
    "source,construct",
    [
        ("import torch", "torch"),
        ("from scipy.special import softmax", "scipy.special"),
        ("import importlib", "importlib"),
        ("f = getattr(np, 'me' + 'an')", "getattr"),
        ("g = (lambda: 0).__globals__", "__globals__"),
        ("get_ipython().run_cell('x = 1')", "get_ipython"),
        ("%time import normedu.functional as nf", "get_ipython"),
        ("y = Out[3]", "Out"),
        ("from operator import attrgetter", "attrgetter"),
        ("x = np.load('f.npy', allow_pickle=True)", "load"),
        ("import numpy.ctypeslib", "ctypeslib"),
        ("g = (x for x in [1]).gi_frame.f_back", "gi_frame"),
    ],
)
def test_the_constructs_no_answer_needs_are_refused(source, construct):
    allowed = policy.allowed_modules(_solution("layernorm"))
    found = policy.violations("import numpy as np\n" + source, allowed)
    assert [v.construct for v in found][:1] == [construct] and found[0].line == 2


def test_a_cell_that_does_not_parse_is_left_to_fail_in_the_kernel():
    assert policy.violations("def f(:\n    import torch", frozenset({"numpy"})) == []


def test_the_stub_defines_the_cell_s_functions_as_raising_the_sentence():
    source = "import torch\n\n\ndef f(x):\n    return x\n\n\ng = f\n"
    namespace: dict = {}
    with pytest.raises(Exception, match="line 1"):
        exec(policy.stub(source, "cell `f`, line 1: `torch`"), namespace)  # noqa: S102
    for name in ("f", "g"):
        with pytest.raises(Exception, match="line 1: `torch`"):
            namespace[name](1)
