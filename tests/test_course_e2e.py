"""End to end: a temporary course, a cohort of good, bad and hostile submissions, real nbgrader.

One cohort is collected and graded once (module fixture ``graded``, 2 workers); the tests read
its results. Grades are checked against what each submission must score by construction (the
demo assignment's tests: test_center 1 point, test_center_hidden 2, test_scale 1), not against
a previous run of this code.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from normedu.course import status as st
from normedu.course.autograde import autograde
from normedu.course.cohort import submission, write_demo_assignment, write_submission
from normedu.course.collect import collect
from normedu.course.config import Course
from normedu.course.export import to_csv
from normedu.course.release import release
from normedu.course.sandbox import landlock_abi

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("course"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the grading sandbox needs Linux"
    ),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

SLEEPER = str(40000 + os.getpid() % 10000)
# Per-cell time limit: long enough for a cell to import numpy on a busy 2-core machine.
CELL_S = 6
#: These tests test the sandbox: they grade with the answer policy (normedu.course.policy,
#: which rewrites magics and notes constructs for review) off, the layers beneath it on.
SANDBOX = {"answer_policy": False}
KINDS = {
    "ok": "correct",
    "partial": "partial",
    "stub": "stub",
    "loop": "loop",
    "exit": "exit",
    "sysexit": "sysexit",
    "memory": "memory",
    "tamper_edit": "tamper_edit",
    "tamper_delete": "tamper_delete",
    "corrupt": "corrupt",
    "empty": "empty",
    "hostile": "hostile",
    "hostile_rel": "hostile",
}


def _tree_hash(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _table(text: str) -> dict[str, dict[str, str]]:
    return {row["student"]: row for row in csv.DictReader(io.StringIO(text))}


def _leftovers(*markers: str) -> list[str]:
    """Command lines of live processes that contain one of ``markers`` and are ours: this
    process's descendants, or orphans (a process that escaped is re-parented to init). Another
    test worker's grading runs, descendants of another pytest process, are not ours."""
    import psutil

    ours = {p.pid for p in psutil.Process().children(recursive=True)}
    found = []
    for proc in psutil.process_iter(["pid", "ppid", "cmdline", "status"]):
        info = proc.info
        if info["pid"] == os.getpid() or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if info["pid"] not in ours and info["ppid"] != 1:
            continue
        cmd = " ".join(info["cmdline"] or [])
        if any(m in cmd for m in markers):
            found.append(cmd)
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("course")
    course = Course(root=base / "course")
    write_demo_assignment(course.root, "demo")
    write_demo_assignment(course.root, "other", prefix="other_")
    release(course)
    shutil.copy(course.db_path, base / "pristine.db")
    (course.root / "canary.txt").write_text("instructor file")
    src = nbformat.read(course.source_dir("demo") / "demo.ipynb", as_version=4)
    rel = nbformat.read(course.release_dir("demo") / "demo.ipynb", as_version=4)
    inbox = base / "inbox"
    for student, kind in KINDS.items():
        targets = [str(course.root), str(inbox)] if student == "hostile" else []
        write_submission(
            inbox / f"{student}.ipynb", submission(src, rel, kind, targets=targets, sleeper=SLEEPER)
        )
    other_src = nbformat.read(course.source_dir("other") / "other.ipynb", as_version=4)
    other_rel = nbformat.read(course.release_dir("other") / "other.ipynb", as_version=4)
    write_submission(inbox / "otherassign.ipynb", submission(other_src, other_rel, "correct"))
    write_submission(inbox / "wrongname.txt", submission(src, rel, "correct"))
    collected, unplaced = collect(course, "demo", inbox)
    protected = [
        course.root / "solutions",
        course.root / "exercises",
        course.root / "submitted",
        inbox,
    ]
    before = _tree_hash(*protected)
    # A temporary folder of the run's own: what grading leaves there is checked below.
    tmp = base / "tmp"
    tmp.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(tmp))
        mp.setattr(tempfile, "tempdir", str(tmp))
        report = autograde(course, "demo", jobs=2, cell_timeout=CELL_S, wall_timeout=60, **SANDBOX)
    leftover = sorted(p.name for p in tmp.iterdir())
    text = to_csv(course, "demo")
    return SimpleNamespace(
        course=course,
        base=base,
        inbox=inbox,
        report=report,
        csv=text,
        table=_table(text),
        before=before,
        protected=protected,
        collected=collected,
        unplaced=unplaced,
        leftover=leftover,
    )


def test_collect_places_every_file_and_flags_the_wrong_name(graded):
    assert graded.unplaced == []
    by_student = {c.student: c for c in graded.collected}
    assert set(by_student) == set(KINDS) | {"otherassign", "wrongname"}
    assert by_student["wrongname"].notes == [
        "handed in as 'wrongname.txt', expected '<student>.ipynb'"
    ]
    assert all(c.action == "new" for c in graded.collected)
    # Byte-for-byte copies: a corrupt file is kept, not lost.
    assert (graded.course.submitted_dir("corrupt", "demo") / "demo.ipynb").read_bytes() == (
        graded.inbox / "corrupt.ipynb"
    ).read_bytes()


EXPECTED = {
    # student: (status, score, tampered)
    "ok": (st.PASSED, "4", "no"),
    "wrongname": (st.PASSED, "4", "no"),
    "partial": (st.FAILED, "3", "no"),
    "stub": (st.NOT_ATTEMPTED, "0", "no"),
    "exit": (st.FAILED, "0", "no"),
    "sysexit": (st.PASSED, "4", "no"),
    # Out of address space, the kernel either raises MemoryError or cannot answer in time.
    "memory": ((st.FAILED, st.TIMED_OUT), "0", "no"),
    "loop": (st.TIMED_OUT, None, "no"),
    # Stubs with a test cell edited or deleted: no answer written, and the flag says why.
    "tamper_edit": (st.NOT_ATTEMPTED, "0", "yes"),
    "tamper_delete": (st.NOT_ATTEMPTED, "0", "yes"),
    # Nothing could be checked in a file that never ran: tampered is empty, not "no".
    "corrupt": (st.UNGRADABLE, "0", ""),
    "empty": (st.UNGRADABLE, "0", ""),
    "otherassign": ("wrong assignment (other)", "0", ""),
    "hostile": (st.PASSED, "4", "no"),
    "hostile_rel": (st.PASSED, "4", "no"),
}


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_status_score_and_flag(graded, student):
    status, score, tampered = EXPECTED[student]
    row = graded.table[student]
    assert row["status"] in (status if isinstance(status, tuple) else (status,)), row
    assert row["tampered"] == tampered, row
    assert row["max_score"] == "4"
    if score is not None:
        assert row["score"] == score, row


def test_per_test_cell_columns(graded):
    table = graded.table
    assert list(table["ok"])[:8] == [
        "student",
        "status",
        "tampered",
        "score",
        "max_score",
        "test_center",
        "test_center_hidden",
        "test_scale",
    ]
    assert [table["ok"][c] for c in ("test_center", "test_center_hidden", "test_scale")] == [
        "1",
        "2",
        "1",
    ]
    assert [table["partial"][c] for c in ("test_center", "test_center_hidden", "test_scale")] == [
        "1",
        "2",
        "0",
    ]
    assert [table["corrupt"][c] for c in ("test_center", "test_center_hidden", "test_scale")] == [
        "",
        "",
        "",
    ]


def test_csv_keeps_the_file_name_and_collection_time_and_sorts_ignoring_case(graded):
    rows = list(csv.DictReader(io.StringIO(graded.csv)))
    by_student = {r["student"]: r for r in rows}
    assert by_student["wrongname"]["file"] == "wrongname.txt"
    assert by_student["ok"]["file"] == "ok.ipynb"
    assert all(r["collected"].endswith("+00:00") for r in rows)
    students = [r["student"] for r in rows]
    assert students == sorted(students, key=str.casefold)


def test_notes_say_why(graded):
    notes = {s: r["notes"] for s, r in graded.table.items()}
    assert "not valid JSON" in notes["corrupt"]
    assert "the file is empty" in notes["empty"]
    assert "notebook of assignment 'other'" in notes["otherassign"]
    assert "kernel died" in notes["exit"]
    assert "time limit" in notes["loop"]
    assert "'test_center' was edited" in notes["tamper_edit"]
    assert "'test_center' was deleted" in notes["tamper_delete"]
    assert "handed in as 'wrongname.txt'" in notes["wrongname"]
    assert graded.report.errors == []


#: Hand-ins whose every test cell ran on the trusted side (no dead kernel, no time limit).
RAN_TO_THE_END = ("ok", "partial", "stub", "tamper_edit", "tamper_delete", "hostile")


def test_report_numbers_equal_the_gradebook(graded, tmp_path):
    """``normedu report`` on the graded cohort: its scores, pass counts and flags are the
    gradebook's (read here through nbgrader's own API), and the failures it groups are the
    test cells the gradebook scored below their points."""
    from nbgrader.api import Gradebook

    from normedu.cli import main
    from normedu.course.failures import failures_in_notebook
    from normedu.course.report_html import write_report

    course = graded.course
    report = write_report(course, "demo", tmp_path / "report.html")
    assert (
        main(["--root", str(course.root), "report", "demo", "-o", str(tmp_path / "cli.html")]) == 0
    )
    assert (tmp_path / "cli.html").read_text() == (tmp_path / "report.html").read_text()
    table = graded.table
    ran = {
        s
        for s, r in table.items()
        if st.kind(r["status"]) not in st.NOT_RUN and r["status"] != st.GRADING_FAILED
    }
    assert set(report.graded) == ran
    with Gradebook(course.db_url) as gb:
        cells = {
            s: {g.name: (g.score, g.max_score) for nb in gb.find_submission("demo", s).notebooks
                for g in nb.grades}
            for s in ran
        }  # fmt: skip
        totals = {s: gb.find_submission("demo", s).score for s in ran}
    assert dict(zip(report.graded, report.scores, strict=True)) == totals
    for cell in report.cells:
        full = sum(cells[s][cell.grade_id][0] == cells[s][cell.grade_id][1] for s in ran)
        assert (cell.passed, cell.of) == (full, len(ran)), cell.grade_id
    assert report.flags["tampered"] == sorted(s for s, r in table.items() if r["tampered"] == "yes")
    assert report.flags["timed out"] == sorted(s for s in ran if table[s]["status"] == st.TIMED_OUT)
    verdicts = st.load_all(course, "demo")
    for s in RAN_TO_THE_END:
        failed = {g for g, (score, top) in cells[s].items() if score < top}
        assert set(verdicts[s].failures) == failed, s
        # The same record, read back from the autograded notebook (hand-ins graded before
        # verdicts kept it).
        path = course.autograded_dir(s, "demo") / "demo.ipynb"
        assert failures_in_notebook(path, set(cells[s])) == verdicts[s].failures, s
    stubs = next(c for c in report.causes if c.text.startswith("NotImplementedError"))
    assert {"partial", "stub", "tamper_edit", "tamper_delete"} <= set(stubs.students)
    assert stubs.cells == ["test_center", "test_center_hidden", "test_scale"]


def test_timed_out_cell_is_interrupted_and_later_cells_still_run(graded):
    # The loop ends the first answer cell, after center() is defined: that cell is interrupted
    # at the cell time limit, and the later cells (scale() and all tests) still run and pass.
    row = graded.table["loop"]
    assert [row[c] for c in ("test_center", "test_center_hidden", "test_scale")] == ["1", "2", "1"]
    assert f"cell(s) [1] ran past the {CELL_S} s cell time limit" in row["notes"]


def test_hostile_code_changed_nothing_outside_its_working_copy(graded):
    assert _tree_hash(*graded.protected) == graded.before
    assert (graded.course.root / "canary.txt").read_text() == "instructor file"
    assert graded.course.db_path.exists()
    # Every other student's grade is still in the gradebook.
    assert graded.table["ok"]["score"] == "4" and graded.table["partial"]["score"] == "3"


def test_no_kernel_or_child_process_is_left(graded):
    assert (
        _leftovers(f"sleep {SLEEPER}", "normedu-grade-", "normedu.course.worker", "normedu-kernel-")
        == []
    )


@pytest.mark.skipif(landlock_abi() < 1, reason="the Linux kernel has no Landlock")
def test_sandbox_reported(graded):
    assert "Landlock" in graded.report.sandbox and "no Landlock" not in graded.report.sandbox


def test_feedback_hides_hidden_tests(graded):
    from normedu.course.feedback import feedback

    repo = Path(__file__).resolve().parent.parent
    shutil.copytree(repo / "assets" / "mathjax", graded.course.root / "assets" / "mathjax")
    pages = feedback(graded.course, "demo")
    assert set(pages) == set(graded.table)
    machine = (str(graded.course.root), str(repo), "site-packages", "/tmp/")
    for student, page in pages.items():
        text = page.read_text()
        assert "HIDDEN-CHECK" not in text, student
        assert "Status:" in text
        if not student.startswith("hostile"):  # (their own code prints the paths it attacks)
            assert not [p for p in machine if p in text], student  # no path of this machine
        if "could not be graded" in text:
            continue
        # Math renders offline (the course's MathJax, no CDN) and the contents name each test.
        assert "cdnjs" not in text and "../../_mathjax/tex-mml-chtml.js" in text, student
        assert ">Test cell<" not in text, student
        assert text.count("white-space: pre-wrap !important") == 1, student  # messages wrap, once
        assert '<a href="#test_center_hidden">test_center_hidden' in text, student
    page = pages["stub"]
    assert (page.parent / "../../_mathjax/tex-mml-chtml.js").resolve().is_file()
    stub = pages["stub"].read_text()
    assert "center(x) must keep the shape" in stub and "NotImplementedError" in stub
    assert "could not be graded" in pages["corrupt"].read_text()
    assert "not valid JSON" in pages["corrupt"].read_text()
    # The autograded notebook did run the hidden test (the page hides it, grading does not).
    autograded = (graded.course.autograded_dir("stub", "demo") / "demo.ipynb").read_text()
    assert "HIDDEN-CHECK" in autograded


@pytest.mark.browser
def test_feedback_output_lines_wrap_at_the_page_width(graded, tmp_path):
    """A student reads the feedback page in a browser: at a narrow window no output line runs
    past its box (nbgrader's template kept each line whole, so "Likely cause: ..." sat
    off-screen). The negative control removes the course's style and finds the overflow."""
    from playwright.sync_api import sync_playwright
    from site_helpers import dead_port, launch_context, require_chromium

    from normedu.course.feedback import feedback

    require_chromium()
    pages = feedback(graded.course, "demo", ["stub"])
    overflow = """() => [...document.querySelectorAll('div.output_area pre')]
        .filter(p => p.offsetParent !== null).map(p => p.scrollWidth - p.clientWidth)"""
    with sync_playwright() as pw, dead_port() as port:
        context = launch_context(pw, tmp_path / "profile", dead_proxy=port)
        try:
            page = context.new_page()
            page.set_viewport_size({"width": 480, "height": 900})
            page.goto(pages["stub"].as_uri())
            wrapped = page.evaluate(overflow)
            page.evaluate(
                "() => document.querySelectorAll('style').forEach(s => "
                "s.textContent.includes('pre-wrap !important') && s.remove())"
            )
            unwrapped = page.evaluate(overflow)
        finally:
            context.close()
    assert wrapped and max(wrapped) <= 1, wrapped
    assert max(unwrapped) > 50, unwrapped  # without the style the lines do run past the box


def test_grading_leaves_nothing_in_the_temporary_folder(graded):
    # Workers are killed, not asked to tidy up, and some submissions time out or kill their
    # kernel: the kernels' working copies, sockets and connection files must still go.
    assert graded.leftover == []


def test_parallel_grades_equal_sequential_grades(graded, tmp_path):
    course = Course(root=tmp_path / "seq")
    for folder in ("solutions", "exercises"):
        shutil.copytree(graded.course.root / folder, course.root / folder)
    shutil.copy(graded.base / "pristine.db", course.db_path)
    collect(course, "demo", graded.inbox)
    report = autograde(course, "demo", jobs=1, cell_timeout=CELL_S, wall_timeout=60, **SANDBOX)
    assert report.jobs == 1

    def grades(text):  # the collection time is when collect ran, not a grade
        return [{k: v for k, v in row.items() if k != "collected"} for row in csv.DictReader(
            io.StringIO(text)
        )]  # fmt: skip

    assert grades(to_csv(course, "demo")) == grades(graded.csv)


def test_landlock_off_relative_paths_still_miss_the_course(graded):
    report = autograde(
        graded.course,
        "demo",
        students=["hostile_rel"],
        force=True,
        landlock="off",
        cell_timeout=CELL_S,
        wall_timeout=60,
        **SANDBOX,
    )
    assert report.graded == ["hostile_rel"] and "no Landlock" in report.sandbox
    assert _tree_hash(*graded.protected) == graded.before
    assert to_csv(graded.course, "demo") == graded.csv


def test_cli_export_and_release_check(graded, tmp_path):
    out = tmp_path / "grades.csv"
    exe = Path(sys.executable).parent / "normedu"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "normedu"]
    run = subprocess.run(
        [*cmd, "--root", str(graded.course.root), "export", "demo", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert out.read_text() == graded.csv
    run = subprocess.run(
        [*cmd, "--root", str(graded.course.root), "release", "--check", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and "demo: in sync" in run.stdout, run.stdout + run.stderr


def test_rerun_is_idempotent_and_late_submissions_are_added_alone(graded):
    # Keep this test last in the file: it adds a student to the shared course.
    again = autograde(
        graded.course, "demo", jobs=2, cell_timeout=CELL_S, wall_timeout=60, **SANDBOX
    )
    assert again.graded == [] and sorted(again.skipped) == sorted(graded.table)
    assert to_csv(graded.course, "demo") == graded.csv
    src = nbformat.read(graded.course.source_dir("demo") / "demo.ipynb", as_version=4)
    rel = nbformat.read(graded.course.release_dir("demo") / "demo.ipynb", as_version=4)
    write_submission(graded.inbox / "late.ipynb", submission(src, rel, "partial"))
    collected, _ = collect(graded.course, "demo", graded.inbox)
    actions = {c.student: c.action for c in collected}
    assert actions.pop("late") == "new" and set(actions.values()) == {"unchanged"}
    late = autograde(graded.course, "demo", jobs=2, cell_timeout=CELL_S, wall_timeout=60, **SANDBOX)
    assert late.graded == ["late"]
    table = _table(to_csv(graded.course, "demo"))
    assert table.pop("late")["score"] == "3"
    assert table == graded.table


def test_wall_clock_stops_code_that_swallows_interrupts(tmp_path):
    # Runs the worker alone (no gradebook): the cell timeout's interrupt is caught by the
    # student's code, so only the per-submission wall clock can end it.
    import json

    from normedu.course.checks import released

    src = write_demo_assignment(tmp_path / "c")
    source = nbformat.read(src, as_version=4)
    student = nbformat.reads(nbformat.writes(source), as_version=4)
    for cell in student.cells:
        cell.source = released(cell.source)
    nb = submission(source, student, "stubborn")
    nbformat.write(nb, tmp_path / "demo.ipynb")
    job = {
        "notebook": str(tmp_path / "demo.ipynb"),
        "executed": str(tmp_path / "executed.ipynb"),
        "result": str(tmp_path / "result.json"),
        "workdir": str(tmp_path / "work"),
        "cell_timeout": 2,
        "wall_timeout": 8,
        "memory_mb": 4096,
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    run = subprocess.run(
        [sys.executable, "-m", "normedu.course.worker", str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["timed_out"] and "8 s time limit" in result["reason"]
    assert 8 <= result["wall_s"] < 60
    executed = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    errors = [[o.get("ename") for o in c.outputs] for c in executed.cells if c.cell_type == "code"]
    # Each cell waits for the busy kernel until the cell time limit, until the wall clock ends
    # the submission: no code cell is left without an error (none can score).
    assert "CellTimeoutError" in errors[0]
    assert all(e for e in errors) and errors[-1] == ["NotExecuted"], errors
    assert _leftovers(str(tmp_path / "runtime"), str(tmp_path / "work")) == []


def test_release_check_reports_an_out_of_sync_exercise(graded, tmp_path):
    from normedu.course.release import check_release

    course = Course(root=tmp_path / "c")
    for folder in ("solutions", "exercises"):
        shutil.copytree(graded.course.root / folder, course.root / folder)
    shutil.copy(graded.base / "pristine.db", course.db_path)
    path = course.release_dir("demo") / "demo.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].source += "\n# edited by hand"
    nbformat.write(nb, path)
    diffs = check_release(course, ["demo", "other"])
    assert diffs == {"demo": ["demo.ipynb: cell 2 source differs"], "other": []}


def test_adjust_overrides_a_score_with_a_reason_like_formgrader(graded, tmp_path):
    """``normedu adjust`` writes nbgrader's manual score (what Formgrader's manual grading
    writes) and keeps the reason; the CSV shows both. Formgrader's own manual score on
    another cell, written straight into the gradebook, shows too."""
    from nbgrader.api import Gradebook

    from normedu.cli import main

    copy = Course(root=tmp_path / "course")
    shutil.copytree(graded.course.root, copy.root)
    with pytest.raises(ValueError, match="needs a reason"):
        from normedu.course.adjust import adjust

        adjust(copy, "demo", "partial", "test_scale", 1, " ")
    code = main(
        ["--root", str(copy.root), "adjust", "demo", "partial", "test_scale", "1",
         "--reason", "regrade request: scale() was right up to rounding"]
    )  # fmt: skip
    assert code == 0
    assert main(["--root", str(copy.root), "adjust", "demo", "partial", "nope", "1",
                 "--reason", "x"]) == 2  # fmt: skip
    with Gradebook(copy.db_url) as gb:  # Formgrader's manual grading, as it stores it
        gb.find_grade("test_center", "demo", "demo", "stub").manual_score = 1.0
        gb.db.commit()
    table = _table(to_csv(copy, "demo"))
    assert table["partial"]["score"] == "4" and table["partial"]["test_scale"] == "1"
    assert "adjusted test_scale from 0 to 1" in table["partial"]["notes"]
    assert "regrade request" in table["partial"]["notes"]
    assert table["stub"]["score"] == "1" and table["stub"]["test_center"] == "1"
    # The original course is untouched.
    assert graded.table["partial"]["score"] == "3"


def test_a_resubmission_drops_manual_scores_and_flags_what_needs_review(graded, tmp_path):
    """Issue 36: a Formgrader score set on the old file must not stick to a resubmission.
    Graders gave ``partial`` 1/2 on the hidden test (autograde: 2) and 1/1 on test_scale
    (autograde: 0, scale() is a stub). The same answers handed in again (a new file): both
    manual scores go; the hidden test shows its automatic 2, and test_scale, whose automatic
    score is below the dropped manual one, is flagged for review until a grader decides.
    Feedback then rewrites only that student's page."""
    from nbgrader.api import Gradebook

    from normedu.course.adjust import adjust
    from normedu.course.export import review_summary, rows
    from normedu.course.feedback import write_feedback

    copy = Course(root=tmp_path / "course")
    shutil.copytree(graded.course.root, copy.root)
    write_feedback(copy, "demo")
    assert write_feedback(copy, "demo").written == []  # nothing changed: nothing written
    with Gradebook(copy.db_url) as gb:  # Formgrader's manual grading, as it stores it
        for test in ("test_center_hidden", "test_scale"):
            gb.find_grade(test, "demo", "demo", "partial").manual_score = 1.0
        comment = gb.find_submission("demo", "partial").notebooks[0].comments[0]
        comment.manual_comment, cell = "see me about scale()", comment.name
        gb.db.commit()
    row = _table(to_csv(copy, "demo"))["partial"]
    assert f"grader's comment on {cell}: see me about scale()" in row["notes"]
    assert (row["test_center_hidden"], row["test_scale"], row["needs_review"]) == ("1", "1", "no")
    assert "manual score 1/2 on test_center_hidden (set in Formgrader)" in row["notes"]
    # The answer's own error heads the notes (scale() is a stub); it is in the status box too.
    assert row["notes"].startswith("NotImplementedError in `scale`"), row["notes"]
    assert (
        "NotImplementedError in <code>scale</code>"
        in (copy.feedback_dir("partial", "demo") / "demo.html").read_text()
    )
    assert "failed:" not in graded.table["stub"]["notes"]  # not attempted: no list

    nb = nbformat.read(graded.inbox / "partial.ipynb", as_version=4)
    nb.metadata["resubmitted"] = True
    (tmp_path / "late").mkdir()
    # Handed in late on Canvas, uploaded twice (Canvas's -1 suffix), at 2026-03-02 11:30 UTC.
    late = tmp_path / "late" / "partial_LATE_34567_90999_demo-1.ipynb"
    write_submission(late, nb)
    os.utime(late, (1772451000, 1772451000))
    (item,), _ = collect(copy, "demo", tmp_path / "late", lms="canvas")
    assert item.action == "updated" and item.late and item.lms_user_id == "34567"
    report = autograde(copy, "demo", jobs=1, cell_timeout=CELL_S, wall_timeout=60)
    assert report.graded == ["partial"] and report.errors == []
    table = rows(copy, "demo")[1]
    row = next(r for r in table if r["student"] == "partial")
    assert (row["test_center_hidden"], row["test_scale"], row["score"]) == ("2", "0", "3")
    assert row["needs_review"] == "yes", row
    assert (row["late"], row["handed_in"]) == ("yes", "2026-03-02T11:30:00+00:00")
    with pytest.raises(ValueError, match="no Canvas user ID for") as info:
        to_csv(copy, "demo", lms="canvas")  # only partial came through Canvas
    assert "'ok'" in str(info.value) and "'partial'" not in str(info.value)
    assert (
        "1/2 on test_center_hidden, given to the earlier hand-in, no longer applies "
        in (row["notes"])
    )
    assert "(autograded 0/1; flagged for the instructor's review)" in row["notes"]
    assert "needs review: test_scale" in row["notes"]
    assert f"the grader's comment on {cell} about the earlier hand-in was removed" in row["notes"]
    assert review_summary(table).startswith(f"NEEDS REVIEW: 1 of {len(table)} students (partial)")
    assert all(r["needs_review"] in ("no", "") for r in table if r["student"] != "partial")
    assert write_feedback(copy, "demo").written == ["partial"]
    # Formgrader's "Generate Feedback" button (nbgrader's API) makes the same page.
    page = copy.feedback_dir("partial", "demo") / "demo.html"
    ours = page.read_text()
    assert "Status:</b> failed tests" in ours and "white-space: pre-wrap" in ours
    shutil.rmtree(page.parent)
    result = copy.api().generate_feedback("demo", "partial")
    assert result["success"], result.get("log")
    assert page.read_text() == ours
    adjust(copy, "demo", "partial", "test_scale", 0, "reviewed: scale() is still a stub")
    row = _table(to_csv(copy, "demo"))["partial"]
    assert row["needs_review"] == "no" and row["score"] == "3"
    assert "NEEDS REVIEW" not in review_summary(rows(copy, "demo")[1])
