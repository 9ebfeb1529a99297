"""Proofs about the nbgrader exercise library, run through nbgrader itself.

For each assignment (discovered from ``solutions/``), in a temporary course directory (never
the repository's gradebook), with the course's one nbgrader configuration
(:meth:`normedu.course.config.Course.nbgrader_config`):

1. ``generate_assignment`` from a copy of ``solutions/`` reproduces ``exercises/`` exactly, and
   the release holds no solution code and no hidden tests;
2. autograding scores the solution notebook full marks and the untouched release 0;
3. ONE catalogued mistake per answer cell (the first of :mod:`normedu.grading.mistakes` for
   that cell) scores strictly less than full marks, and a failing test's output names it,
   as does the class report (``normedu report``) made from what the grader recorded;
4. the correct answers of ``tests/data/correct/`` (written independently of the solution)
   score full marks;
5. a release whose test cells are edited to ``assert True`` (half of them) or deleted (the
   other half) scores 0.

Submissions are graded by ``normedu autograde`` (one worker): nbgrader's own preprocessors
restore the test cells from the gradebook, execute, and score, as in stock
``nbgrader autograde``, plus the course's sandbox. Stock ``nbgrader autograde`` itself, which
Formgrader's button runs, is proven once below with the course configuration.

Where coverage lives: the WHOLE mistake catalog (and the library shortcuts) is proven
in-process by ``tests/test_grading.py``, which executes the same test cells, hidden ones
included; here nbgrader's own machinery is proven on one mistake per cell.

Also: stock ``nbgrader generate_feedback`` (the CLI, run from a course copy with the root
``nbgrader_config.py``) keeps hidden tests and their tracebacks out of the feedback.

One autograde call per assignment grades all its submissions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
from data.correct import VARIANTS as CORRECT_VARIANTS

from normedu.course.config import Course
from normedu.grading import mistakes

REPO = Path(__file__).resolve().parent.parent
#: Discovered from solutions/ (one folder per assignment): the one source of truth.
ASSIGNMENTS = tuple(Course(root=REPO).assignments())

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*:Warning:sqlalchemy.*"),
    pytest.mark.filterwarnings("ignore:.*SAWarning.*"),
]


@pytest.fixture(scope="module")
def shared_course(tmp_path_factory):
    """One temporary course holding every assignment's source, and its nbgrader API.

    Shared by the tests of one worker, each of which uses its own assignment, so they do not
    see each other's submissions."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(REPO / "solutions", root / "solutions")
    return root, Course(root=root).api(ExecutePreprocessor={"timeout": 120})


@pytest.fixture
def course(shared_course, monkeypatch):
    """``course(assignment)`` generates the release of ``assignment`` in the shared course;
    returns (root, api)."""
    root, api = shared_course
    monkeypatch.chdir(root)
    warnings.filterwarnings("ignore")

    def make(assignment: str):
        result = api.generate_assignment(assignment, force=True)
        assert result["success"], result.get("error", "") + result.get("log", "")
        return root, api

    return make


def _grade_cells(nb) -> list:
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def _replace_cell(nb, grade_id: str, source: str):
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    hits = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    assert len(hits) == 1, grade_id
    hits[0].source = source
    return nb


def _failure_text(nb) -> str:
    """Error names, values and tracebacks of every test cell of an autograded notebook."""
    parts = []
    for cell in _grade_cells(nb):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                parts += [out.get("ename", ""), out.get("evalue", ""), *out.get("traceback", [])]
    return "\n".join(parts)


def test_exercise_pages_offer_the_student_notebook_only():
    """Each assignment page downloads exercises/<a>/<a>.ipynb; no page points at solutions/."""
    pages = REPO / "book" / "exercises"
    index = (pages / "index.md").read_text()
    for a in ASSIGNMENTS:
        text = (pages / f"{a}.md").read_text()
        assert f"<../../exercises/{a}/{a}.ipynb>`" in text and "{download}`" in text, a
        assert f"]({a}.md)" in index, a
    for page in pages.glob("*.md"):
        assert "../solutions" not in page.read_text(), page.name


#: The norm assignments whose backward the student derives (graph, staged walk, simplification).
DERIVED_BACKWARDS = ("batchnorm", "layernorm", "groupnorm", "rmsnorm")

#: The compact input gradient that these notebooks used to print: a subtracted x̂ times the mean
#: (or 1/N sum) of the upstream gradient times x̂, in LaTeX, Unicode or NumPy spelling.
COMPACT_DX = re.compile(
    r"-\s*\\hat\s*x(_\{?[\w,]+\}?)?\s*(\\odot|\\cdot)?\s*"
    r"(\\operatorname\{mean\}(_\{[^}]*\})?\s*\(|\\frac\{1\}\{\w\}\s*\\sum_\w+)\s*g"
    r"|[−-]\s*x̂\w*\s*[·⊙*]?\s*(mean|\(1/\w\)\s*Σ)\s*\(?\s*g"
    r"|[−-]\s*x_?hat\s*\*\s*\(\s*\w+\s*\*\s*x_?hat\s*\)\s*\.\s*(mean|sum)"
)
HINT = re.compile(r"<details>\s*<summary>\s*Hint \d+.*?</summary>.*?</details>", re.S)


def _without_latex_spacing(text: str) -> str:
    return re.sub(r"\\[,;:! ]", " ", text)


def test_compact_dx_pattern_finds_the_formula_as_printed():
    """The pattern below can fail: it finds the formula as the notebooks printed it."""
    printed = [
        r"\sum_j g_{jc} - \hat x_{ic}\,\frac{1}{N}\sum_j g_{jc}\hat x_{jc} \Big)",
        r"\operatorname{mean}(g) - \hat x \odot \operatorname{mean}(g \odot \hat x) \Big)",
        r"- \hat x_i \operatorname{mean}_{(n,g)}(g \odot \hat x) \Big)",
        "dx = (γ/σ)·(g − mean(g) − x̂·mean(g·x̂))",
        "dx = rstd * (g - g.mean(axis=0) - x_hat * (g * x_hat).mean(axis=0))",
    ]
    for text in printed:
        assert COMPACT_DX.search(_without_latex_spacing(text)), text
    assert not COMPACT_DX.search(r"d\hat x_i - \hat x_i \sum_j \square")


@pytest.mark.parametrize("assignment", DERIVED_BACKWARDS)
def test_released_norm_exercise_asks_to_derive_the_backward(assignment):
    """The released notebook does not print the compact dx; before the graded backward it has
    at least three hints, each in its own collapsed <details> block; the staged helper and its
    self-check earn no points."""
    nb = nbformat.read(REPO / "exercises" / assignment / f"{assignment}.ipynb", as_version=4)
    for cell in nb.cells:
        found = COMPACT_DX.search(_without_latex_spacing(cell.source))
        assert not found, f"{assignment}: cell {cell.id} prints the compact dx: {found[0]!r}"
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    stub = ids.index(f"{assignment}_backward")
    markdown = [c.source for c in nb.cells[:stub] if c.cell_type == "markdown"]
    hints = [h for src in markdown for h in HINT.findall(src)]
    assert len(hints) >= 3, f"{assignment}: {len(hints)} hints before the backward stub"
    for cell in nb.cells:
        if f"{assignment}_backward_staged" in cell.source:
            assert not cell.metadata.get("nbgrader", {}).get("points"), cell.id


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_assignment_is_graded_correctly(assignment, course):
    from nbgrader.api import Gradebook

    root, api = course(assignment)
    name = f"{assignment}.ipynb"
    generated = root / "exercises" / assignment / name
    committed = REPO / "exercises" / assignment / name

    # 1. exercises/ is exactly what generate_assignment produces, and gives nothing away.
    assert generated.read_text() == committed.read_text(), (
        f"exercises/{assignment} is out of date: run `nbgrader generate_assignment {assignment} "
        "--force` from the repository root"
    )
    assert sorted(p.name for p in (REPO / "exercises" / assignment).iterdir()) == [name]
    release = nbformat.read(generated, as_version=4)
    solution = nbformat.read(root / "solutions" / assignment / name, as_version=4)
    text = generated.read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "_hidden_test"):
        assert marker not in text
    # The explanations may quote a hint; the code cells must not contain solution lines.
    code = "\n".join(c.source for c in release.cells if c.cell_type == "code")
    for cell in solution.cells:
        src = cell.source
        if "### BEGIN SOLUTION" in src:
            body = src.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            for line in body.strip().splitlines():
                if len(line.strip()) > 12:
                    assert line.strip() not in code, f"solution line leaked: {line.strip()!r}"
        if "### BEGIN HIDDEN TESTS" in src:
            # Hidden tests live alone in their own cell: a visible assert can never leak them.
            before = src.split("### BEGIN HIDDEN TESTS")[0]
            assert all(ln.startswith("#") for ln in before.strip().splitlines())
            assert src.rstrip().endswith("### END HIDDEN TESTS")

    # 2.-5. submissions: one notebook per student id
    subs: dict[str, tuple[object, str | None]] = {
        "solution": (solution, None),
        "blank": (release, None),
    }
    # Half of the test cells edited to pass, the other half deleted: nbgrader restores both.
    tests = [c.metadata.nbgrader.grade_id for c in _grade_cells(release)]
    tampered = release
    for gid in tests[::2]:
        tampered = _replace_cell(tampered, gid, "assert True")
    tampered.cells = [
        c
        for c in tampered.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") not in tests[1::2]
    ]
    subs["tampered"] = (tampered, None)
    # One mistake per answer cell; the rest of the catalog is proven by tests/test_grading.py.
    firsts: dict[str, mistakes.Mistake] = {}
    for m in mistakes.for_assignment(assignment):
        firsts.setdefault(m.cell, m)
    catalog = list(firsts.values())
    for i, m in enumerate(catalog):
        cell_src = next(c.source for c in solution.cells
                        if c.metadata.get("nbgrader", {}).get("grade_id") == m.cell)  # fmt: skip
        subs[f"mistake{i:02d}"] = (_replace_cell(solution, m.cell, m.source(cell_src)), m.phrase)
    # Correct answers written independently of the solution: full marks, in the same run.
    correct = [f"correct_{name}" for name in CORRECT_VARIANTS.get(assignment, {})]
    for sid, cells in zip(correct, CORRECT_VARIANTS.get(assignment, {}).values(), strict=True):
        nb = solution
        for gid, src in cells.items():
            nb = _replace_cell(nb, gid, src)
        subs[sid] = (nb, None)
    for sid, (nb, _) in subs.items():
        folder = root / "submitted" / sid / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / name)

    from normedu.course.autograde import autograde

    report = autograde(Course(root=root), assignment, jobs=1, force=True)
    assert not report.errors, report.errors

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        scores = {}
        for sid in subs:
            s = gb.find_submission(assignment, sid)
            scores[sid] = (s.score, s.max_score, s.needs_manual_grade)
    full = scores["solution"][1]
    assert full > 0
    assert scores["solution"][0] == full, scores["solution"]
    assert not any(v[2] for v in scores.values()), "no cell may need manual grading"
    assert {sid: scores[sid][0] for sid in correct} == {sid: full for sid in correct}
    for sid in ("blank", "tampered"):
        assert scores[sid][0] == 0, (sid, scores[sid])
        assert scores[sid][1] == full, (sid, scores[sid])

    from normedu.course.report import records, summarize

    report_ = summarize(assignment, *records(Course(root=root), assignment))
    unnamed = report_.unnamed.examples if report_.unnamed else []
    missed = []
    for i, m in enumerate(catalog):
        sid = f"mistake{i:02d}"
        if not scores[sid][0] < full:
            missed.append(f"{m.name}: full marks")
            continue
        graded = nbformat.read(root / "autograded" / sid / assignment / name, as_version=4)
        if m.phrase not in _failure_text(graded):
            missed.append(f"{m.name}: no failing test says {m.phrase!r}")
        # The class report groups what the grader recorded: the cause is there too.
        said = [c.text for c in report_.causes if sid in c.students]
        said += [text for who, _, text in unnamed if who == sid]
        if not any(m.phrase in text for text in said):
            missed.append(f"{m.name}: the class report does not say {m.phrase!r}")
    assert not missed, missed


@pytest.mark.slow
def test_stock_nbgrader_feedback_hides_hidden_tests(tmp_path, monkeypatch):
    """Stock `nbgrader autograde` and `nbgrader generate_feedback` (the CLI, from a course
    copy with the root nbgrader_config.py, as Formgrader runs them): the hidden tests' source
    and tracebacks stay out of the HTML, and so do the grading machine's paths and the frames
    inside the grading code. Its own course: the root configuration file goes into it."""
    import subprocess

    monkeypatch.chdir(tmp_path)
    warnings.filterwarnings("ignore")
    root = tmp_path
    shutil.copytree(REPO / "solutions" / "jacobian", root / "solutions" / "jacobian")
    from normedu.course.nbgrader_bridge import stock_autograde_steps

    # As an instructor who turned the course's refusal off would: nbgrader's own steps.
    api = Course(root=root).api(Autograde={"autograde_preprocessors": stock_autograde_steps()})
    assert api.generate_assignment("jacobian", force=True)["success"]
    shutil.copy(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
    release = nbformat.read(root / "exercises" / "jacobian" / "jacobian.ipynb", as_version=4)
    folder = root / "submitted" / "blank" / "jacobian"
    folder.mkdir(parents=True)
    nbformat.write(release, folder / "jacobian.ipynb")
    assert api.autograde("jacobian", "blank", force=True)["success"]
    graded = (root / "autograded" / "blank" / "jacobian" / "jacobian.ipynb").read_text()
    assert "check_jacobian_on" in graded  # the hidden traceback is there to be hidden

    env = dict(os.environ, PYTHONPATH=str(REPO))
    bin_dir = Path(sys.executable).parent
    out = subprocess.run(
        [str(bin_dir / "nbgrader"), "generate_feedback", "jacobian", "--force"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    html = (root / "feedback" / "blank" / "jacobian" / "jacobian.html").read_text()
    for secret in ("BEGIN HIDDEN TESTS", "check_jacobian_on", "_hidden_test", "default_rng(32)"):
        assert secret not in html, secret
    for path in (str(REPO), str(root), "site-packages", "normedu/grading"):
        assert path not in html, path
    # The failures are still explained: the visible tests' messages are there.
    assert "not implemented yet" in html
