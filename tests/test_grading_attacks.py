"""Attacks on the grader itself (issue 31): a cohort of the layernorm assignment graded as an
instructor grades it (collect, autograde, export), one worker, so that every attack hand-in
is followed by an honest one in the same worker.

Each attack hand-in leaves its answers as the stubs: its right grade is 0 whatever it does to
the grading machinery. Each honest hand-in is the instructor's solution: 12 of 12, whatever
was graded before it. Grades are checked against those two facts, not a previous run.

These attacks are graded with the answer policy off (:mod:`normedu.course.policy` only
rewrites magics and notes constructs for review): the layers beneath it are what they test.
The shortcuts at the end of the file (answers that delegate to a reference by any means)
fail by capability: the grading kernel cannot reach what they call (:mod:`normedu.course.reach`).
Beside them, honest hand-ins with the habits real students have (:data:`data.habits.HABITS`)
keep their full marks and no flag, in the same autograde run.
"""

from __future__ import annotations

import copy
import csv
import io
import os
import shutil
import socket
import sys
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from data.habits import HABITS
from data.shortcuts import SHORTCUTS

from normedu.course import status as st
from normedu.course.autograde import autograde
from normedu.course.cohort import attack, submission, write_submission
from normedu.course.collect import collect
from normedu.course.config import Course
from normedu.course.export import to_csv
from normedu.course.release import release
from normedu.course.sandbox import landlock_abi

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("attacks"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the grading sandbox needs Linux"
    ),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

REPO = Path(__file__).resolve().parent.parent
FULL = "12"  # the layernorm assignment's points: 4 test cells of 1 and 4 of 2
SLEEPER = str(50000 + os.getpid() % 10000)
#: student: attack (None: the instructor's solution). Sorted by name = graded in this order.
ROSTER = {
    "a1_custom_exc": "custom_exc",
    "a2_honest": None,
    "b1_transformer": "transformer",
    "b2_honest": None,
    "c1_monkeypatch": "monkeypatch",
    "c2_honest": None,
    "d1_network": "network",
    "d2_honest": None,
    "e1_kill_parent": "kill_parent",
    "e2_honest": None,
    "f1_forged_stub": "forged_metadata",
    "f2_forged_correct": "forged_metadata",
    "f3_honest": None,
}


class _Listener:
    """A TCP server on 127.0.0.1 and a Unix socket outside any working copy, recording every
    byte a hand-in manages to send them."""

    def __init__(self, folder: Path):
        self.received: list[bytes] = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.unix_path = str(folder / "leak.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        self.unix.listen()
        os.chmod(self.unix_path, 0o777)
        for server in (self.tcp, self.unix):
            server.settimeout(0.2)
            threading.Thread(target=self._serve, args=(server,), daemon=True).start()
        self.stop = False

    def _serve(self, server):
        while not getattr(self, "stop", False):
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(1024))
                except OSError:
                    self.received.append(b"<connected>")

    def close(self):
        self.stop = True
        self.tcp.close()
        self.unix.close()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("attacks")
    course = Course(root=base / "course")
    shutil.copytree(REPO / "solutions" / "layernorm", course.source_dir("layernorm"))
    release(course, ["layernorm"])
    src = nbformat.read(course.source_dir("layernorm") / "layernorm.ipynb", as_version=4)
    rel = nbformat.read(course.release_dir("layernorm") / "layernorm.ipynb", as_version=4)
    listener = _Listener(base)
    inbox = base / "inbox"
    for student, name in ROSTER.items():
        if name is None:
            nb = submission(src, rel, "correct")
        else:
            answers = "correct" if student == "f2_forged_correct" else "stub"
            nb = attack(
                src,
                rel,
                name,
                answers=answers,
                port=listener.port,
                unix_path=listener.unix_path,
                sleeper=SLEEPER,
            )
        write_submission(inbox / f"{student}.ipynb", nb)
    collect(course, "layernorm", inbox)
    tmp = base / "tmp"
    tmp.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(tmp))
        mp.setattr(tempfile, "tempdir", str(tmp))
        # The answer policy only rewrites magics and notes constructs: off, so that the layers
        # beneath it are what is tested.
        report = autograde(
            course, "layernorm", jobs=1, cell_timeout=20, wall_timeout=120, answer_policy=False
        )
    listener.close()
    text = to_csv(course, "layernorm")
    table = {row["student"]: row for row in csv.DictReader(io.StringIO(text))}
    return SimpleNamespace(course=course, report=report, table=table, listener=listener)


@pytest.mark.parametrize("student", [s for s, a in ROSTER.items() if a is None])
def test_every_honest_hand_in_keeps_its_full_grade(graded, student):
    row = graded.table[student]
    assert (row["status"], row["score"], row["max_score"]) == (st.PASSED, FULL, FULL), row


@pytest.mark.parametrize("student", ["a1_custom_exc", "b1_transformer"])
def test_code_that_changes_how_ipython_runs_test_cells_scores_its_answers(graded, student):
    row = graded.table[student]
    assert row["score"] == "0" and row["max_score"] == FULL, row
    if student == "b1_transformer":  # (the handler's failures still reach the execute reply)
        assert row["tampered"] == "yes" and "interfere" in row["notes"], row


def test_replacing_numpy_and_the_checks_scores_its_answers(graded):
    row = graded.table["c1_monkeypatch"]
    assert row["score"] == "0" and row["max_score"] == FULL, row
    assert row["tampered"] == "yes" and "interfere" in row["notes"], row


@pytest.mark.parametrize("assignment", ["drift", "rmsnorm", "prepost", "syncbn"])
def test_replacing_the_checks_scores_nothing_where_checks_run_harnesses(assignment, tmp_path):
    """The assignments whose checks hand student code what is not a plain value (an
    activation, torch modules read through autograd, simulated processes): that part runs in
    the kernel as a harness, and the grade is still decided outside it. The same attack as
    c1_monkeypatch, on stub answers: 0, flagged."""
    course = Course(root=tmp_path / "course")
    shutil.copytree(REPO / "solutions" / assignment, course.source_dir(assignment))
    release(course, [assignment])
    (src, rel) = (
        nbformat.read(folder / f"{assignment}.ipynb", as_version=4)
        for folder in (course.source_dir(assignment), course.release_dir(assignment))
    )
    write_submission(tmp_path / "inbox" / "x1.ipynb", attack(src, rel, "monkeypatch"))
    collect(course, assignment, tmp_path / "inbox")
    report = autograde(course, assignment, jobs=1, wall_timeout=120, answer_policy=False)
    assert report.errors == []
    (row,) = csv.DictReader(io.StringIO(to_csv(course, assignment)))
    assert row["score"] == "0" and float(row["max_score"]) > 0, row
    assert row["tampered"] == "yes" and "interfere" in row["notes"], row


def test_no_network_from_a_kernel(graded):
    assert graded.listener.received == []
    assert graded.table["d1_network"]["score"] == "0"
    assert "network" in graded.report.sandbox


@pytest.mark.skipif(landlock_abi() < 6, reason="signal scoping needs Landlock ABI 6")
def test_a_kernel_cannot_kill_the_grading_processes(graded):
    row = graded.table["e1_kill_parent"]
    assert row["score"] == "0" and "worker" not in row["notes"], row
    assert graded.table["e2_honest"]["score"] == FULL
    assert graded.report.errors == []


def test_forged_test_cell_metadata_is_graded_with_the_release_cells(graded):
    stub, correct = graded.table["f1_forged_stub"], graded.table["f2_forged_correct"]
    assert stub["status"] != st.UNGRADABLE and stub["score"] == "0", stub
    assert (correct["status"], correct["score"]) == (st.PASSED, FULL), correct
    for row in (stub, correct):
        assert row["max_score"] == FULL and row["tampered"] == "yes", row
        assert "metadata" in row["notes"], row


def test_nothing_outlives_the_run(graded):
    import psutil

    left = [
        " ".join(p.info["cmdline"] or [])
        for p in psutil.process_iter(["cmdline", "status"])
        if p.info["status"] != psutil.STATUS_ZOMBIE
        and any(SLEEPER in part for part in p.info["cmdline"] or [])
    ]
    assert left == []


def test_a_worker_that_dies_anyway_has_its_submissions_graded_again(graded):
    # A kernel can no longer kill its worker; a worker may still die (the OOM killer, an
    # operator). Here the test kills it from outside while it runs a slow, correct hand-in
    # with an honest one queued behind it: both are graded again, in a fresh worker, and get
    # their full grade; neither is reported as failed tests, and nothing of the dead worker
    # is left. (Keep this test last: it re-grades two students of the shared course.)
    import time

    import psutil

    course = graded.course
    src = nbformat.read(course.source_dir("layernorm") / "layernorm.ipynb", as_version=4)
    rel = nbformat.read(course.release_dir("layernorm") / "layernorm.ipynb", as_version=4)
    slow = submission(src, rel, "correct")
    slow.cells[3].source += f"\nimport subprocess, time\nsubprocess.Popen(['sleep', '{SLEEPER}'])"
    slow.cells[3].source += "\ntime.sleep(4)"
    inbox = course.root.parent / "inbox2"
    write_submission(inbox / "e2_honest.ipynb", submission(src, rel, "correct"))
    write_submission(inbox / "e1_kill_parent.ipynb", slow)
    collect(course, "layernorm", inbox)
    killed = []

    def kill_the_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for proc in psutil.Process().children(recursive=True):
                try:
                    cmd = " ".join(proc.cmdline())
                    if "normedu.course.worker" in cmd and "unshare" not in cmd:
                        time.sleep(3)  # the slow hand-in is running
                        proc.kill()
                        killed.append(proc.pid)
                        return
                except psutil.Error:
                    continue
            time.sleep(0.05)

    thread = threading.Thread(target=kill_the_worker)
    thread.start()
    report = autograde(
        course,
        "layernorm",
        jobs=1,
        students=["e1_kill_parent", "e2_honest"],
        force=True,
        cell_timeout=20,
        wall_timeout=120,
        answer_policy=False,  # the slow hand-in starts a process (see the fixture)
    )
    thread.join()
    assert killed
    for student in ("e1_kill_parent", "e2_honest"):
        assert report.verdicts[student].status == st.PASSED, report.verdicts[student]
    table = {r["student"]: r for r in csv.DictReader(io.StringIO(to_csv(course, "layernorm")))}
    assert table["e1_kill_parent"]["score"] == table["e2_honest"]["score"] == FULL
    test_nothing_outlives_the_run(graded)


# -- shortcuts to a reference, and the habits of honest students ------------------------------
#: Full marks of dyt's hand-in (as FULL is layernorm's).
DYT_FULL = "11"
#: What a grading kernel says of what it cannot reach (normedu.course.reach).
UNAVAILABLE = "not available while this assignment is graded"


def _filled(release_nb, answers: dict[str, str]):
    nb = nbformat.from_dict(copy.deepcopy(release_nb))
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell.source = answers[meta["grade_id"]]
    return nb


@pytest.fixture(scope="module")
def shortcuts(tmp_path_factory):
    """Each shortcut of :data:`data.shortcuts.SHORTCUTS` handed in as one student's answers,
    and (layernorm) each honest habit of :data:`data.habits.HABITS`, beside an honest hand-in:
    one autograde run per assignment (layernorm, dyt), as an instructor grades."""
    base = tmp_path_factory.mktemp("shortcuts")
    course = Course(root=base / "course")
    tables = {}
    for assignment in ("layernorm", "dyt"):
        shutil.copytree(REPO / "solutions" / assignment, course.source_dir(assignment))
        release(course, [assignment])
        src = nbformat.read(course.source_dir(assignment) / f"{assignment}.ipynb", as_version=4)
        rel = nbformat.read(course.release_dir(assignment) / f"{assignment}.ipynb", as_version=4)
        inbox = base / f"inbox-{assignment}"
        correct = submission(src, rel, "correct")
        write_submission(inbox / "z_honest.ipynb", correct)
        for name, (_, answers) in SHORTCUTS.items():
            if assignment in answers:
                write_submission(inbox / f"{name}.ipynb", _filled(rel, answers[assignment]))
        if assignment == "layernorm":
            for name, answers in HABITS.items():
                write_submission(inbox / f"habit_{name}.ipynb", _filled(correct, answers))
        collect(course, assignment, inbox)
        autograde(course, assignment, jobs=1, cell_timeout=30, wall_timeout=120)
        text = to_csv(course, assignment)
        tables[assignment] = {r["student"]: r for r in csv.DictReader(io.StringIO(text))}
    return SimpleNamespace(course=course, tables=tables)


def _graded_text(course, student: str, assignment: str) -> str:
    path = course.autograded_dir(student, assignment) / f"{assignment}.ipynb"
    nb = nbformat.read(path, as_version=4)
    return "\n".join(
        o.get("evalue", "") + "".join(o.get("traceback", []))
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.output_type == "error"
    )


@pytest.mark.parametrize(
    "assignment,student",
    [(a, name) for name, (_, answers) in SHORTCUTS.items() for a in answers],
)
def test_a_shortcut_to_a_reference_fails_as_what_it_could_not_reach(shortcuts, assignment, student):
    # Not cheating, as far as the grader can tell: code that calls what the grading kernel
    # cannot reach, failing with a message that says what was not there.
    row = shortcuts.tables[assignment][student]
    assert row["score"] == "0" and row["tampered"] == "no", row
    assert UNAVAILABLE in _graded_text(shortcuts.course, student, assignment)


@pytest.mark.parametrize("assignment,full", [("layernorm", FULL), ("dyt", DYT_FULL)])
def test_an_honest_hand_in_beside_the_shortcuts_keeps_its_full_grade(shortcuts, assignment, full):
    row = shortcuts.tables[assignment]["z_honest"]
    assert (row["status"], row["score"], row["tampered"]) == (st.PASSED, full, "no"), row


def test_every_honest_habit_keeps_full_marks_and_no_flag(shortcuts):
    rows = {name: shortcuts.tables["layernorm"][f"habit_{name}"] for name in HABITS}
    wrong = {
        name: (row["status"], row["score"], row["tampered"], row["notes"][:300])
        for name, row in rows.items()
        if (row["status"], row["score"], row["tampered"]) != (st.PASSED, FULL, "no")
        or "review" in row["notes"]
    }
    assert wrong == {}


def test_the_feedback_names_what_was_not_available(shortcuts):
    path = shortcuts.course.autograded_dir("string_import", "layernorm") / "layernorm.ipynb"
    nb = nbformat.read(path, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    # The student's code is kept in the graded notebook; the tests say what it could not call.
    assert "__import__(" in answer.source
    text = _graded_text(shortcuts.course, "string_import", "layernorm")
    assert f"normedu.grading.diagnose.normalize is {UNAVAILABLE}" in text, text[:2000]
