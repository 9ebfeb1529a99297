"""Unit tests of normedu.grading: the checks, the diagnosis, the guard and the mistake catalog.

Fast (no nbgrader, no kernels): the solution notebooks' answer and test cells, hidden tests
included (their inputs live only there), are executed in a plain namespace.

Where coverage lives: THIS file proves every catalogued mistake (:mod:`normedu.grading.mistakes`)
fails and is named, the solutions pass and the stubs fail, all in-process. Through stock
nbgrader, ``tests/test_exercises.py`` proves only the solutions, the stubs, tampered and
deleted test cells, and ONE mistake per answer cell.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from data.correct import VARIANTS as CORRECT_VARIANTS
from released import stub_answer

from normedu import norms
from normedu.course.config import Course
from normedu.course.failures import classify
from normedu.grading import answers, compare, diagnose, drift, dx_terms, gradcheck, guard, mistakes
from normedu.grading.normcheck import NormTable

REPO = Path(__file__).resolve().parent.parent
#: Discovered from solutions/ (one folder per assignment): the one source of truth.
ASSIGNMENTS = tuple(Course(root=REPO).assignments())
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


def _cells(assignment: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(answer cells by grade_id, [(grade_id, test source)]) of a solution notebook."""
    nb = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    answers_, tests = {}, []
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        src = "".join(cell["source"])
        if meta.get("solution") and cell["cell_type"] == "code":
            answers_[meta["grade_id"]] = src
        elif meta.get("grade") and cell["cell_type"] == "code":
            for marker in HIDDEN_MARKERS:
                src = src.replace(marker, "")
            tests.append((meta["grade_id"], src))
    return answers_, tests


def _run(answer_cells: dict[str, str], tests: list[tuple[str, str]]) -> dict[str, str | None]:
    """Execute the answer cells, then each test; {test id: failure message or None}."""
    ns: dict = {"__name__": "__main__"}
    for src in answer_cells.values():
        exec(compile(src, "<answer>", "exec"), ns)
    results = {}
    for gid, src in tests:
        try:
            exec(compile(src, f"<{gid}>", "exec"), ns)
            results[gid] = None
        except AssertionError as e:
            results[gid] = str(e)
    return results


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_passes_every_check_silently(assignment, capfd):
    cells, tests = _cells(assignment)
    results = _run(cells, tests)
    assert results and all(v is None for v in results.values()), results
    # nbgrader scores a test cell 0 if anything reaches stderr.
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_stub_fails_every_check(assignment):
    cells, tests = _cells(assignment)
    stubbed = {gid: stub_answer(src) for gid, src in cells.items()}
    ns_cells = {}
    for gid, src in stubbed.items():
        # As in a notebook, a cell that raises leaves what it defined before the raise.
        ns_cells[gid] = f"try:\n    exec({src!r})\nexcept NotImplementedError:\n    pass\n"
    results = _run(ns_cells, tests)
    failed = [gid for gid, msg in results.items() if msg is not None]
    passed = [gid for gid, msg in results.items() if msg is None]
    # The only cells that may pass on a stub are the 0-point format checks, which fail too
    # because the answers are still None.
    assert not passed, f"tests passing on the stub: {passed}"
    assert failed


CATALOG = mistakes.CATALOG + mistakes.SHORTCUTS


@pytest.mark.parametrize(
    "mistake", CATALOG, ids=[f"{m.assignment}:{m.cell}:{m.name}" for m in CATALOG]
)
def test_mistake_fails_and_is_named(mistake):
    cells, tests = _cells(mistake.assignment)
    cells = dict(cells)
    cells[mistake.cell] = mistake.source(cells[mistake.cell])
    results = _run(cells, tests)
    failures = [msg for msg in results.values() if msg is not None]
    assert failures, f"{mistake.name}: every check passed"
    assert any(mistake.phrase in msg for msg in failures), (mistake.phrase, failures)
    # The class report (normedu report) shows the cause as classify() cuts it from the
    # message: the phrase survives the cut.
    shown = [classify("GradingError", msg).text for msg in failures]
    assert any(mistake.phrase in text for text in shown), (mistake.phrase, shown)


#: Correct answers written independently of the solutions (tests/data/correct/).
CORRECT = [(a, name, cells) for a, vs in CORRECT_VARIANTS.items() for name, cells in vs.items()]


@pytest.mark.parametrize(("assignment", "name", "cells"), CORRECT,
                         ids=[f"{a}:{name}" for a, name, _ in CORRECT])  # fmt: skip
def test_correct_variant_gets_full_marks(assignment, name, cells, capfd):
    """A correct answer never loses a point: another variance formula, another order of the
    reshapes, einsum, loops, NumPy's own error for an impossible reshape all pass every cell."""
    answer_cells, tests = _cells(assignment)
    results = _run({**answer_cells, **cells}, tests)
    assert {gid: msg for gid, msg in results.items() if msg is not None} == {}
    assert capfd.readouterr().err == ""


def _tabled(assignment: str) -> bool:
    """The assignment's checks are a NormTable (a norm, or a layer checked like one)."""
    module = importlib.import_module(f"normedu.grading.{assignment}")
    return any(isinstance(v, NormTable) for v in vars(module).values())


def test_every_norm_assignment_has_three_correct_variants():
    """Every assignment whose functions a library computes (a shortcut in the catalog) or whose
    checks are a NormTable: found, not listed, so a new one is held to it without an edit."""
    held = {m.assignment for m in mistakes.SHORTCUTS} | {a for a in ASSIGNMENTS if _tabled(a)}
    assert held >= {"batchnorm", "layernorm", "groupnorm", "rmsnorm", "jacobian", "syncbn"}
    counts = {a: len(CORRECT_VARIANTS.get(a, {})) for a in held}
    assert {a: n for a, n in counts.items() if n < 3} == {}


def _bare_errors(src: str) -> str:
    """An answer cell whose ``raise SomeError(message)`` lines raise the same error with no
    message at all (the answer's maths and contract unchanged)."""
    return re.sub(r"raise (\w+Error)\(.*\)", r"raise \1()", src)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_hidden_cell_fails_a_correct_answer_on_a_message_alone(assignment):
    """A hidden cell checks values, never the wording of an error: the solution with every
    error message removed passes every hidden cell (and any visible validation cell, which
    accepts any message of the right exception type)."""
    answer_cells, tests = _cells(assignment)
    bare = {gid: _bare_errors(src) for gid, src in answer_cells.items()}
    results = _run(bare, tests)
    assert {gid: msg for gid, msg in results.items() if msg is not None} == {}


def test_message_check_only_failure_is_caught():
    """The test above can fail: a hidden cell that checks an error's message fails it."""
    from normedu.grading import groupnorm

    def strict(fn, args, C, G):  # what the groupnorm hidden cells did before issue 30
        try:
            fn(*args)
        except ValueError as e:
            assert str(C) in str(e) and str(G) in str(e), "message does not name C and G"

    answer_cells, tests = _cells("groupnorm")
    hidden = [(gid, src) for gid, src in tests if "hidden" in gid]
    probe = (
        "import numpy as np\n"
        "x = np.ones((2, 6, 2)); g = np.ones(6)\n"
        "strict(groupnorm_forward, (x, g, g, 4), 6, 4)\n"
    )
    bare = {gid: _bare_errors(src) for gid, src in answer_cells.items()}
    ns_tests = [(gid, src) for gid, src in hidden] + [("strict_hidden", probe)]
    ns: dict = {"__name__": "__main__", "strict": strict}
    for src in bare.values():
        exec(compile(src, "<answer>", "exec"), ns)
    failures = []
    for gid, src in ns_tests:
        try:
            exec(compile(src, f"<{gid}>", "exec"), ns)
        except AssertionError:
            failures.append(gid)
    assert failures == ["strict_hidden"]
    assert "check_indivisible" not in "".join(src for _, src in hidden)
    assert callable(groupnorm.check_backward_indivisible)


#: The answer cells of every assignment named after a registered norm or whose checks are a
#: NormTable (a new one is covered without an edit here), and the Jacobian's; not the optional
#: staged backward a student may write on the way to the graded one (``*_staged``: no test
#: cell grades it, its own self-check compares it with finite differences).
NORM_FUNCTIONS = tuple(
    sorted(
        cell
        for cell in (
            {cell for a in ASSIGNMENTS if a in norms.kinds() for cell in _cells(a)[0]}
            | {cell for a in ASSIGNMENTS if _tabled(a) for cell in _cells(a)[0]}
            | set(_cells("jacobian")[0])
        )
        if not cell.endswith("_staged")
    )
)


def test_catalog_has_at_least_six_mistakes_per_norm_function():
    counts = Counter(m.cell for m in mistakes.CATALOG)
    assert {f: counts[f] for f in NORM_FUNCTIONS if counts[f] < 6} == {}
    assert all(counts[c] >= 1 for c in ("activation_stats", "forward_stack", "pre_norm_residual"))
    # Every assignment has mistakes, and every library-backed assignment a shortcut attempt.
    assert {m.assignment for m in mistakes.CATALOG} == set(ASSIGNMENTS)
    assert {m.assignment for m in mistakes.SHORTCUTS} >= {
        "batchnorm", "layernorm", "rmsnorm", "jacobian", "groupnorm"
    }  # fmt: skip


def test_mistake_edit_must_match_exactly_once():
    m = mistakes.Mistake("x", "c", "n", "p", (("a", "b"),))
    assert m.source("xay") == "xby"
    with pytest.raises(ValueError, match="occurs 2 times"):
        m.source("aa")


# --------------------------------------------------------------------------- the guard


def _define(src: str, name: str):
    ns: dict = {"__name__": "__main__"}
    exec(src, ns)
    return ns[name]


@pytest.mark.parametrize(
    "src",
    [
        "import normedu.functional as F\ndef f(x):\n    return F.layer_norm(x)",
        "from normedu.functional import layer_norm as ln\ndef f(x):\n    return ln(x)",
        "def f(x):\n    import torch\n    return x",
        "def f(x):\n    g = lambda t: __import__('numpy').asarray(t)\n    import normedu\n    return g(x)",  # noqa: E501
        "import normedu\ndef h(x):\n    return normedu.functional.rms_norm(x)\ndef f(x):\n    return h(x)",  # noqa: E501
        "import numpy as np\ndef f(x):\n    return np.layer_norm(x)",
    ],
)
def test_guard_finds_shortcuts(src):
    f = _define(src, "f")
    assert guard.find_shortcuts(f)
    with pytest.raises(compare.GradingError, match="earns no points"):
        guard.assert_no_shortcut(f)


def test_guard_accepts_plain_numpy_and_torch_modules():
    f = _define(
        "import numpy as np\ndef helper(x):\n    return x - x.mean(-1, keepdims=True)\n"
        "def f(x):\n    return helper(x) / np.sqrt(np.var(x, -1, keepdims=True) + 1e-5)",
        "f",
    )
    assert guard.find_shortcuts(f) == []
    cells, _ = _cells("rmsnorm")
    cls = _define(cells["rmsnorm_module"], "RMSNorm")
    assert guard.find_shortcuts(cls, guard.TORCH_OK) == []
    # torch is banned in the numpy assignments, allowed in the torch ones
    assert guard.find_shortcuts(cls, guard.NUMPY_ONLY)


def test_library_blocked_raises_inside_and_restores_after():
    import normedu.functional as nf

    original = nf.layer_norm
    with guard.library_blocked():
        with pytest.raises(compare.GradingError, match="yourself"):
            nf.layer_norm(np.ones((2, 3)))
    assert nf.layer_norm is original
    np.testing.assert_allclose(nf.layer_norm(np.array([[1.0, 3.0]])), [[-1.0, 1.0]], atol=1e-4)


def test_numpy_assignments_never_import_torch():
    code = (
        "import sys, json\n"
        "from normedu.grading import batchnorm, layernorm, jacobian, drift, rmsnorm, mistakes\n"
        "from normedu.grading import dyt, qknorm\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# --------------------------------------------------------------------------- helpers


def test_numerical_gradient_matches_closed_form_with_random_upstream():
    rng = np.random.default_rng(0)
    x, dout = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    grad = gradcheck.numerical_gradient(lambda t: np.sin(t) * t, x, dout)
    np.testing.assert_allclose(grad, dout * (np.cos(x) * x + np.sin(x)), rtol=1e-7, atol=1e-9)


def test_normalize_matches_torch_layer_norm_and_its_gradient():
    import torch  # a hard dependency: its absence must fail, not skip

    rng = np.random.default_rng(1)
    x, gamma, beta = rng.standard_normal((3, 5)), rng.uniform(0.5, 2, 5), rng.standard_normal(5)
    dout = rng.standard_normal((3, 5))
    xt = torch.tensor(x, requires_grad=True)
    out = torch.nn.functional.layer_norm(xt, (5,), torch.tensor(gamma), torch.tensor(beta), 0.1)
    np.testing.assert_allclose(
        diagnose.normalize(x, -1, gamma, beta, 0.1), out.detach(), rtol=1e-10
    )
    (gx,) = torch.autograd.grad(out, xt, torch.tensor(dout))
    np.testing.assert_allclose(
        diagnose.normalize_backward(dout, x, -1, gamma, 0.1), gx, rtol=1e-9, atol=1e-12
    )


def test_diagnose_names_the_matching_variant_and_skips_uninformative_ones():
    x = np.random.default_rng(2).standard_normal((4, 6))
    good = diagnose.normalize(x, -1)
    hyps = [("same as good", lambda: good), ("unbiased", lambda: diagnose.normalize(x, -1, ddof=1))]
    assert diagnose.diagnose(diagnose.normalize(x, -1, ddof=1), hyps, good) == "unbiased"
    assert diagnose.diagnose(good * 3, hyps, good) is None
    with pytest.raises(compare.GradingError, match="Likely cause: unbiased"):
        diagnose.check_against(diagnose.normalize(x, -1, ddof=1), good, "out", hyps)


def test_call_silences_warnings_and_explains_exceptions(capfd):
    def noisy(x):
        warnings.warn("loud", stacklevel=1)
        return np.log(x - x)

    compare.call(noisy, np.ones(3))
    assert capfd.readouterr().err == ""

    def no_keepdims(x):
        return x - x.mean(axis=-1)

    with pytest.raises(compare.GradingError, match="keepdims"):
        compare.call(no_keepdims, np.ones((2, 3)))


def test_answer_keys_agree_with_the_measurements():
    import re

    from normedu.grading import prepost

    for name, module in (("drift", drift), ("prepost", prepost)):
        _, tests = _cells(name)
        keys = dict(re.findall(r'check_answer\("(\w+)", answer_q\d, key="(\w+)"\)', "".join(
            src for _, src in tests
        )))  # fmt: skip
        measured = module.measured_answers()
        assert sorted(keys) == sorted(measured)
        for q, a in measured.items():
            assert answers.answer_hash(q, a) == keys[q], (q, a)
    # and the solution notebooks give these answers
    for name, module in (("drift", drift), ("prepost", prepost)):
        cells, _ = _cells(name)
        ns: dict = {}
        exec(cells["answers"].replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), ns)
        measured = module.measured_answers()
        assert [ns[f"answer_q{i}"] for i in (1, 2, 3)] == [
            measured[f"{name}_q{i}"] for i in (1, 2, 3)
        ]


def test_answer_format_messages():
    with pytest.raises(compare.GradingError, match="still None"):
        answers.check_format("answer_q1", None, ("a", "b"))
    with pytest.raises(compare.GradingError, match="not a valid choice"):
        answers.check_format("answer_q1", "z", ("a", "b"))
    answers.check_format("answer_q1", " B ", ("a", "b"))


def test_experiment_plots_have_titles_and_skip_under_nbgrader(monkeypatch):
    from normedu.grading import prepost

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    profiles = {g: np.abs(np.random.default_rng(3).standard_normal((5, 3))) for g in drift.GAINS}
    fig = drift.plot_profiles(profiles)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["Activation std per layer", "Saturated tanh units per layer"]
    assert len(fig.axes[0].get_legend().get_texts()) == len(drift.GAINS)
    fig = prepost.plot_grad_norms([3.0, 2.0, 1.0], [1.0, 1.0, 1.0])
    assert [len(line.get_xdata()) for line in fig.axes[0].get_lines()] == [3, 3]
    assert fig.axes[0].get_xlabel() == "block"
    # nbgrader sets NBGRADER_EXECUTION while grading: no figure, no matplotlib import cost
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert drift.plot_profiles(profiles) is None
    assert prepost.plot_grad_norms([1.0], [1.0]) is None


def test_package_holds_no_hidden_test():
    """Hidden inputs and answer keys live only in the hidden cells of solutions/: the package
    has no ``check_*_hidden`` function and no key table, and every hidden cell calls only
    public (``__all__``) checks of its assignment's grading module."""
    import ast
    import importlib
    import re

    for path in (REPO / "normedu" / "grading").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"def check_\w*hidden", text), path.name
        assert not re.search(r"^_KEYS\s*=", text, re.M), path.name
    for assignment in ASSIGNMENTS:
        nb = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
        for cell in nb["cells"]:
            src = "".join(cell["source"])
            if HIDDEN_MARKERS[0] not in src:
                continue
            body = src.split(HIDDEN_MARKERS[0])[1].split(HIDDEN_MARKERS[1])[0]
            tree = ast.parse(body)
            modules = {
                alias.asname or alias.name: f"{node.module}.{alias.name}"
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "normedu.grading"
                for alias in node.names
            }
            assert modules, f"{assignment}: a hidden cell that does not use normedu.grading"
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in modules
                ):
                    public = importlib.import_module(modules[node.value.id]).__all__
                    assert node.attr in public, (assignment, node.attr)


# --------------------------------------------------------------------------- explaining a miss


@pytest.mark.parametrize(
    ("make", "phrase"),
    [
        (lambda e: e * 2.5, "constant factor 2.5"),
        (lambda e: -e, "sign flipped"),
        (lambda e: e + np.arange(e.shape[0])[:, None], "offset per row"),
        (lambda e: e + np.arange(e.shape[1])[None, :], "offset per column"),
        (lambda e: e * np.arange(1, e.shape[0] + 1)[:, None], "scale per row"),
        (lambda e: e * np.arange(1, e.shape[1] + 1)[None, :], "scale per column"),
        (lambda e: e.T.copy(), "axes swapped"),
        (lambda e: np.where(e > 0.5, np.nan, e), "NaN or inf"),
        (lambda e: e.astype(np.float16), "dtype float16"),
    ],
    ids=["factor", "sign", "row-offset", "col-offset", "row-scale", "col-scale", "transpose",
         "nan", "dtype"],
)  # fmt: skip
def test_describe_difference_names_the_relation(make, phrase):
    rng = np.random.default_rng(7)
    expected = (
        rng.standard_normal((5, 4)) if phrase != "axes swapped" else rng.standard_normal((4, 4))
    )
    actual = make(expected)
    assert phrase in diagnose.describe_difference(actual, expected)
    with pytest.raises(compare.GradingError, match="How it differs"):
        diagnose.check_against(actual, expected, "out")
    # a difference with no simple relation is not described
    noise = expected + rng.standard_normal(expected.shape)
    assert diagnose.describe_difference(noise, expected) is None


def test_generic_hints_only_where_they_apply():
    # a scalar differs from any other by "a constant factor": that says nothing
    assert diagnose.describe_difference(np.float64(2.0), np.float64(3.0)) is None

    # the keepdims hint for a reduction's dropped axis, not for any error that says "broadcast"
    def dropped(x):
        return x - x.mean(axis=1)

    def ellipsis(x):
        return np.einsum("...d->d", x)

    x = np.ones((4, 6))
    with pytest.raises(compare.GradingError, match="without keepdims=True gives \\(4,\\)"):
        compare.call(dropped, x)
    with pytest.raises(compare.GradingError) as err:
        compare.call(ellipsis, x)
    assert "broadcast" in str(err.value) and "keepdims" not in str(err.value)


def test_eps_ignored_only_for_a_result_near_some_eps():
    from normedu.grading import qknorm

    p = qknorm._probe((1, 2, 4, 6), 3)

    # returns v: independent of eps, and far from the reference with any eps
    def returns_v(q, k, v, g_q, g_k, eps=1e-6, causal=False):
        return v.copy()

    with pytest.raises(compare.GradingError) as err:
        qknorm.check_on(returns_v, *p.args.values())
    assert "does not match" in str(err.value) and "eps argument" not in str(err.value)


def _ln(x, axes, gamma=None, beta=None):
    """LayerNorm-style formula written out here (independent of diagnose.normalize)."""
    mu = x.mean(axis=axes, keepdims=True)
    out = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
    return out * (1 if gamma is None else gamma) + (0 if beta is None else beta)


@pytest.mark.parametrize(
    ("make", "phrase"),
    [
        (lambda x, g, b: _ln(x, 0, g, b), "computed over axis 0 instead of axis 2 (the last)"),
        (lambda x, g, b: _ln(x, 1, g, b), "computed over axis 1 instead of axis 2"),
        (lambda x, g, b: _ln(x, (0, 1, 2), g, b), "over every axis (the whole array)"),
        (lambda x, g, b: _ln(x * g + b, -1), "wrong order (scale by γ → shift by β → normalize"),
        (lambda x, g, b: (_ln(x, -1) + b) * g, "wrong order (normalize → shift by β → scale by γ"),
        (lambda x, g, b: _ln(x * g, -1) + b, "wrong order (scale by γ → normalize → shift by β"),
    ],
    ids=["axis0", "axis1", "all-axes", "affine-first", "shift-then-scale", "scale-first"],
)
def test_generic_relations_describe_another_axis_and_another_order(make, phrase):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 5)) + rng.standard_normal((3, 4, 1))
    gamma, beta = rng.uniform(0.5, 2, 5), rng.standard_normal(5)
    expected, actual = _ln(x, -1, gamma, beta), make(x, gamma, beta)
    relations = diagnose.norm_relations(x, -1, gamma, beta)
    with pytest.raises(compare.GradingError, match="How it differs") as err:
        diagnose.check_against(actual, expected, "out", relations=relations)
    assert phrase in str(err.value)
    # An unrelated wrong answer matches none of them.
    noise = expected + 0.1 * rng.standard_normal(x.shape)
    assert diagnose.diagnose(noise, relations, expected) is None


def test_generic_relations_of_rmsnorm_have_no_mean():
    rng = np.random.default_rng(6)
    x, gamma = rng.standard_normal((4, 5)) + 2.0, rng.uniform(0.5, 2, 5)

    def rms(z, axis):  # written out here, independent of diagnose.normalize
        return z / np.sqrt((z * z).mean(axis=axis, keepdims=True) + 1e-5)

    relations = diagnose.norm_relations(x, -1, gamma, None, center=False)
    expected = rms(x, -1) * gamma
    assert "computed over axis 0" in diagnose.diagnose(rms(x, 0) * gamma, relations, expected)
    assert "scale by γ → normalize" in diagnose.diagnose(rms(x * gamma, -1), relations, expected)


def test_a_students_wrong_order_is_described_by_the_layernorm_check():
    from normedu.grading import layernorm

    f = _define(
        "import numpy as np\n"
        "def layernorm_forward(x, gamma, beta, eps=1e-5):\n"
        "    mu = x.mean(-1, keepdims=True)\n"
        "    xhat = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)\n"
        "    return (xhat + beta) * gamma\n",
        "layernorm_forward",
    )
    rng = np.random.default_rng(3)
    x, gamma, beta = rng.standard_normal((4, 5)), rng.uniform(0.5, 2, 5), rng.standard_normal(5)
    with pytest.raises(compare.GradingError, match="normalize → shift by β → scale by γ"):
        layernorm.check_forward_on(f, x, gamma, beta)


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        ("out * gamma[0] + beta", "how you apply γ"),
        ("out * gamma + 2 * beta", "how you add β"),
        ("out * gamma**2 + 3 * beta", "the γ/β step is not"),
    ],
)
def test_rerun_with_unit_gamma_and_zero_beta_locates_the_mistake(wrong, phrase):
    from normedu.grading import layernorm

    src = (
        "import numpy as np\n"
        "def layernorm_forward(x, gamma, beta, eps=1e-5):\n"
        "    mu = x.mean(-1, keepdims=True)\n"
        "    out = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)\n"
        f"    return {wrong}\n"
    )
    f = _define(src, "layernorm_forward")
    rng = np.random.default_rng(3)
    x, gamma, beta = rng.standard_normal((4, 5)), rng.uniform(0.5, 2, 5), rng.standard_normal(5)
    with pytest.raises(compare.GradingError, match=phrase):
        layernorm.check_forward_on(f, x, gamma, beta)


def _ln_dx(dout, x, gamma, eps, var_factor=1.0, mean_term=True, sigma_eps=True):
    """LayerNorm's dx written out here (independent of diagnose), with one change at a time."""
    d = x.shape[-1]
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    xh = (x - mu) / np.sqrt(var + eps)
    g = dout * gamma
    inv = 1 / np.sqrt(var + eps) if sigma_eps else 1 / np.sqrt(var)
    dx = g * inv - var_factor * xh * (g * xh).sum(-1, keepdims=True) / d * inv
    return dx - g.mean(-1, keepdims=True) * inv if mean_term else dx


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"var_factor": 2.0}, "variance term −x̂·mean(g·x̂)/σ is 2 times the right one"),
        ({"mean_term": False}, "without its mean term"),
        ({"sigma_eps": False}, "depends on ε"),
    ],
    ids=["variance-term-factor", "no-mean-term", "sigma-without-eps"],
)
def test_a_wrong_dx_is_described_in_the_terms_of_its_formula(change, phrase):
    rng = np.random.default_rng(11)
    x, dout = rng.standard_normal((5, 6)), rng.standard_normal((5, 6))
    gamma, eps = rng.uniform(0.5, 2, 6), 0.3
    right = _ln_dx(dout, x, gamma, eps)
    wrong = _ln_dx(dout, x, gamma, eps, **change)
    how = dx_terms.describe_dx_difference(wrong, right, x, dout * gamma, -1, eps)
    assert how is not None and phrase in how
    # a per-row constant added to dx, and unrelated noise
    how = dx_terms.describe_dx_difference(
        right + rng.standard_normal((5, 1)), right, x, dout * gamma, -1, eps
    )
    assert "constant of its own" in how
    noise = right + 0.1 * rng.standard_normal(right.shape)
    assert dx_terms.describe_dx_difference(noise, right, x, dout * gamma, -1, eps) is None


def test_an_eps_fixed_inside_is_found_by_behaviour_whatever_its_value():
    from normedu.grading import layernorm

    f = _define(
        "import numpy as np\n"
        "def layernorm_forward(x, gamma, beta, eps=1e-5):\n"
        "    eps = 1e-3  # fixed: no value the eps re-run of the reference tries\n"
        "    mu = x.mean(-1, keepdims=True)\n"
        "    return gamma * (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) + beta\n",
        "layernorm_forward",
    )
    rng = np.random.default_rng(4)
    x, gamma, beta = rng.standard_normal((4, 5)), rng.uniform(0.5, 2, 5), rng.standard_normal(5)
    with pytest.raises(compare.GradingError, match="does not change when eps goes"):
        layernorm.check_forward_on(f, x, gamma, beta, eps=0.1)


def test_a_wrong_jacobian_is_described_in_the_terms_of_its_formula():
    from normedu.grading import jacobian

    x, eps = np.random.default_rng(12).standard_normal(6), 1e-5
    d, sigma = x.size, np.sqrt(x.var() + eps)
    xh = (x - x.mean()) / sigma
    # written out here: the outer-product term divided by D² instead of D
    wrong = (np.eye(d) - np.ones((d, d)) / d - np.outer(xh, xh) / d**2) / sigma
    with pytest.raises(compare.GradingError, match=r"outer-product term .* is 0.166667 times"):
        jacobian.check_jacobian_on(lambda x, eps=1e-5: wrong, x, eps)
    noise = wrong + 0.01 * np.random.default_rng(13).standard_normal((d, d))
    assert jacobian.describe_terms(noise, x, eps) is None


def test_a_wrong_residual_wiring_is_said_as_an_expression():
    pytest.importorskip("torch")
    from normedu.grading import prepost

    f = _define(
        "def pre_norm_residual(x, sublayer, norm):\n    return norm(x) + norm(sublayer(x))\n",
        "pre_norm_residual",
    )
    with pytest.raises(compare.GradingError, match=r"your block computes norm\(x\) \+ norm\("):
        prepost.check_pre_norm(f)
