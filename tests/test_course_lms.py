"""The LMS round trip and the roster, without grading: Canvas's download names, collecting the
same download twice, removing and merging students, names in nbgrader's gradebook, Canvas's
gradebook-import CSV, and the one-line diagnosis of a broken answer (read from real IPython
tracebacks)."""

from __future__ import annotations

import csv
import io
import json
import os

import nbformat
import pytest

from normedu.cli import main
from normedu.course import cohort
from normedu.course.collect import collect, load_collect_record
from normedu.course.config import Course, ensure_alembic
from normedu.course.lms import canvas_grades, looks_like_raw_lms_name, parse_canvas, split_name

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Six hand-ins as Canvas names them, with the modification times its zip keeps (UTC).
CANVAS = {
    "doejane_12345_67890_demo.ipynb": "2026-03-01T10:00:00",
    "leeanna_LATE_34567_90999_demo.ipynb": "2026-03-02T09:00:00",
    "leeanna_late_34567_90999_demo-1.ipynb": "2026-03-02T11:30:00",
    "smithbob2_23456_78901_demo.ipynb": "2026-03-01T12:00:00",
    "kimmy_45678_11111_Untitled.ipynb": "2026-03-01T08:00:00",
    "ngo_56789_22222_demo.ipynb": "2026-03-01T09:00:00",
}


def _course(tmp_path) -> Course:
    (tmp_path / "course").mkdir()
    course = Course.at(tmp_path / "course")
    cohort.write_demo_assignment(course.root)
    return course


def _canvas_inbox(tmp_path, names=CANVAS):
    import datetime as dt

    inbox = tmp_path / "canvas"
    inbox.mkdir()
    for i, (name, when) in enumerate(names.items()):
        path = inbox / name
        path.write_text(f"hand-in {i}")
        stamp = dt.datetime.fromisoformat(when).replace(tzinfo=dt.timezone.utc).timestamp()
        os.utime(path, (stamp, stamp))
    return inbox


def test_canvas_names_are_read_with_late_marker_and_resubmission_suffix():
    late = parse_canvas("leeanna_LATE_34567_90999_groupnorm-1.ipynb")
    assert (late.name, late.late, late.user_id, late.submission_id) == (
        "leeanna", True, "34567", "90999"
    )  # fmt: skip
    assert (late.original, late.resubmission) == ("groupnorm.ipynb", 1)
    plain = parse_canvas("doejane_12345_67890_groupnorm.ipynb")
    assert (plain.name, plain.late, plain.original, plain.resubmission) == (
        "doejane", False, "groupnorm.ipynb", 0
    )  # fmt: skip
    assert parse_canvas("smith2_1_2_groupnorm-12.ipynb").resubmission == 12
    assert parse_canvas("ann_Late_1_2_x.ipynb").late
    with pytest.raises(ValueError, match="not named as a Canvas download"):
        parse_canvas("Jane Doe.ipynb")


def test_collect_lms_canvas_keeps_user_id_late_flag_and_hand_in_time(tmp_path, capsys):
    course = _course(tmp_path)
    inbox = _canvas_inbox(tmp_path)
    code = main(["--root", str(course.root), "collect", "demo", str(inbox), "--lms", "canvas"])
    out = capsys.readouterr().out
    assert code == 0, out
    record = load_collect_record(course, "demo")
    assert sorted(record) == ["doejane", "kimmy", "leeanna", "ngo", "smithbob2"]
    lee = record["leeanna"]
    # The newest resubmission (-1) is graded; the other file is reported.
    assert lee["source"] == "leeanna_late_34567_90999_demo-1.ipynb"
    assert (course.submitted_dir("leeanna", "demo") / "demo.ipynb").read_text() == "hand-in 2"
    assert any("2 files handed in" in n and "leeanna_LATE_34567" in n for n in lee["notes"])
    assert lee["late"] is True and lee["lms_user_id"] == "34567" and lee["name"] == "leeanna"
    assert lee["handed_in"] == "2026-03-02T11:30:00+00:00"
    assert record["doejane"]["late"] is False and record["doejane"]["lms_user_id"] == "12345"
    assert record["kimmy"]["notes"] == ["handed in as 'Untitled.ipynb', expected 'demo.ipynb'"]
    assert "LATE" in out and "2026-03-02T11:30:00+00:00" in out and "WARNING" not in out


def test_collecting_a_canvas_folder_twice_warns_and_merge_or_remove_undoes_it(tmp_path, capsys):
    """The instructor's week: collected without --lms (ids are whole file names), then with
    it. Both runs warn; ``students merge`` and ``remove`` bring the roster back to one row per
    student, and the log says what happened."""
    from normedu.course.students import history, roster

    course = _course(tmp_path)
    names = {k: v for k, v in CANVAS.items() if k.startswith(("doejane", "ngo"))}
    inbox = _canvas_inbox(tmp_path, names)
    root = ["--root", str(course.root)]
    assert main([*root, "collect", "demo", str(inbox)]) == 1  # flat: raw ids, warned
    out = capsys.readouterr().out
    assert "WARNING: student id 'doejane_12345_67890_demo' looks like an LMS file name" in out
    assert main([*root, "collect", "demo", str(inbox), "--lms", "canvas"]) == 1
    out = capsys.readouterr().out
    assert "students merge doejane_12345_67890_demo doejane" in out
    assert len(roster(course)) == 4  # doubled
    assert main([*root, "students", "merge", "doejane_12345_67890_demo", "doejane"]) == 0
    assert "kept doejane's hand-in" in capsys.readouterr().out  # same time: the new id's
    assert main([*root, "students", "remove", "ngo_56789_22222_demo", "--reason", "raw"]) == 0
    assert sorted(roster(course)) == ["doejane", "ngo"]
    assert not (course.root / "submitted" / "ngo_56789_22222_demo").exists()
    kept = course.root / history(course)[-1]["kept_in"] / "demo" / "demo.ipynb"
    assert kept.read_text() == "hand-in 1"  # moved aside, not deleted
    log = [json.loads(line) for line in (course.root / ".normedu/students.log").open()]
    assert [(e["action"], e["student"]) for e in log] == [
        ("merge", "doejane_12345_67890_demo"), ("remove", "ngo_56789_22222_demo")
    ]  # fmt: skip
    assert log[1]["reason"] == "raw" and log[1]["collect_records"]["demo"]["source"]
    # Collecting again now changes nothing and warns of nothing.
    assert main([*root, "collect", "demo", str(inbox), "--lms", "canvas"]) == 0
    assert "2 unchanged" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no student 'nobody'"):
        from normedu.course.students import remove

        remove(course, "nobody")


def test_merge_keeps_the_later_hand_in(tmp_path):
    from normedu.course.students import merge

    course = _course(tmp_path)
    late = {"doejane_12345_67890_demo-1.ipynb": "2026-03-05T10:00:00"}
    inbox = _canvas_inbox(tmp_path, late)
    collect(course, "demo", inbox)  # raw id, the later file
    (tmp_path / "canvas2").mkdir()
    early = _canvas_inbox(tmp_path / "canvas2", {"doejane_12345_67890_demo.ipynb": CANVAS[
        "doejane_12345_67890_demo.ipynb"]})  # fmt: skip
    collect(course, "demo", early, lms="canvas")
    entry = merge(course, "doejane_12345_67890_demo-1", "doejane")
    assert entry["kept"] == {"demo": "doejane_12345_67890_demo-1"}
    assert (course.submitted_dir("doejane", "demo") / "demo.ipynb").read_text() == "hand-in 0"
    assert load_collect_record(course, "demo")["doejane"]["notes"][-1].startswith("merged from")


def test_raw_lms_names_are_recognised():
    assert looks_like_raw_lms_name("doejane_12345_67890_groupnorm")
    assert looks_like_raw_lms_name("leeanna_LATE_34567_90999_groupnorm-1")
    assert looks_like_raw_lms_name("Jane_Doe_12345_assignsubmission_file")
    assert not looks_like_raw_lms_name("doejane")
    assert not looks_like_raw_lms_name("jane_doe_2")


def test_gradebook_names_replace_none_none(tmp_path):
    """Formgrader lists ``last_name, first_name``: a Canvas name gives no split and goes whole
    into last_name; ``Jane Doe`` splits; a name typed in Formgrader is kept."""
    from nbgrader.api import Gradebook

    from normedu.course.students import sync_names

    assert split_name("doejane") == ("", "doejane")
    assert split_name("Jane Doe") == ("Jane", "Doe")
    assert split_name("Mary Ann_Smith") == ("Mary Ann", "Smith")
    course = _course(tmp_path)
    collect(course, "demo", _canvas_inbox(tmp_path), lms="canvas")
    ensure_alembic()
    with Gradebook(course.db_url) as gb:
        gb.add_student("doejane")
        gb.add_student("ngo", first_name="Thi", last_name="Ngo")
    assert sync_names(course) == 2
    with Gradebook(course.db_url) as gb:
        doe, ngo = gb.find_student("doejane"), gb.find_student("ngo")
        assert (doe.first_name, doe.last_name, doe.lms_user_id) == ("", "doejane", "12345")
        assert (ngo.first_name, ngo.last_name, ngo.lms_user_id) == ("Thi", "Ngo", "56789")


def test_canvas_import_csv():
    text = canvas_grades(
        "groupnorm",
        10,
        [
            {"student": "doejane", "name": "doejane", "user_id": "12345", "score": "7.5"},
            {"student": "leeanna", "name": "leeanna", "user_id": "34567", "score": "10"},
        ],
        canvas_id="4242",
    )
    table = list(csv.reader(io.StringIO(text)))
    assert table[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "groupnorm (4242)",
    ]
    assert table[1][0].strip() == "Points Possible" and table[1][5] == "10"
    assert table[2] == ["doejane", "12345", "", "", "", "7.5"]
    assert canvas_grades("g", 1, [], None).splitlines()[0].endswith(",g")
    with pytest.raises(ValueError, match=r"no Canvas user ID for \['bob'\]"):
        canvas_grades("g", 1, [{"student": "bob", "name": "", "user_id": "", "score": "1"}])


def _executed(cells: list[tuple[str, str]]):
    """A notebook of (kind, source) cells, ``kind`` "answer" or "test", run by a real IPython
    shell with plain tracebacks (as the grading kernels run), its errors kept as outputs."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.InteractiveTB.set_mode("Plain")
    captured = []
    original = shell._showtraceback
    shell._showtraceback = lambda etype, value, stb: captured.append((etype, value, stb))
    nb = nbformat.v4.new_notebook()
    try:
        for i, (kind, source) in enumerate(cells):
            captured.clear()
            shell.run_cell(source, store_history=True)
            cell = nbformat.v4.new_code_cell(source)
            cell.metadata["nbgrader"] = {"solution": kind == "answer", "grade_id": f"c{i}"}
            for etype, value, stb in captured:
                cell.outputs.append(
                    nbformat.v4.new_output(
                        "error", ename=etype.__name__, evalue=str(value), traceback=stb
                    )
                )
            nb.cells.append(cell)
    finally:
        shell._showtraceback = original
        # A shell left behind makes get_ipython() answer in later tests of this process.
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()
    return nb


def test_answer_errors_name_the_student_function_and_line():
    from normedu.course.diagnose import answer_errors

    nb = _executed(
        [
            ("answer", "import math\n\ndef gn_forward(x):\n    y = (x +\n    return y\n"),
            ("answer", "def gn_backward(dy):\n    raise NotImplementedError()\n"),
            ("test", "assert 1 + 1 == 2\ngn_backward(1)\n"),
            ("test", "gn_forward(1)\n"),  # NameError: not the student's function raising
            ("test", "def helper():\n    raise KeyError('x')\nhelper()\n"),
        ]
    )
    assert answer_errors(nb) == [
        "syntax error in `gn_forward` (line 4)",
        "NotImplementedError in `gn_backward`",
    ]


def test_moodle_pattern_of_the_guide_keeps_name_and_user_id(tmp_path):
    """The guide's Moodle example: one folder per student, ``Jane Doe_12345_assignsubmission_
    file_/<file>``."""
    course = _course(tmp_path)
    inbox = tmp_path / "moodle"
    for folder in ("Jane Doe_12345_assignsubmission_file_", "Bo Li_777_assignsubmission_file_"):
        (inbox / folder).mkdir(parents=True)
        (inbox / folder / "demo.ipynb").write_text(folder)
    pattern = r"^(?P<student>[^_/]+)_(?P<user_id>\d+)_assignsubmission_file_/"
    items, unplaced = collect(course, "demo", inbox, pattern=pattern)
    assert unplaced == [] and not [w for i in items for w in i.warnings]
    record = load_collect_record(course, "demo")
    assert sorted(record) == ["Bo_Li", "Jane_Doe"]
    assert record["Jane_Doe"]["lms_user_id"] == "12345" and record["Jane_Doe"]["name"] == "Jane Doe"
    assert record["Jane_Doe"]["late"] is None
    # Without the pattern (--layout folders) the ids keep Moodle's folder names: warned.
    (tmp_path / "x").mkdir()
    other = _course(tmp_path / "x")
    items, _ = collect(other, "demo", inbox, layout="folders")
    assert all("looks like an LMS file name" in " ".join(i.warnings) for i in items)
