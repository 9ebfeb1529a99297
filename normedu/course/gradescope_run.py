"""What the Gradescope autograder runs (``python -m normedu.course.gradescope_run``).

- ``prepare`` (``setup.sh``, once per image): opens the zip's gradebook and prints the
  sandbox this machine allows, for the instructor's build log.
- ``grade`` (``run_autograder``, once per submission): finds the notebook in
  ``<root>/submission``, grades it with :func:`normedu.course.autograde.autograde` on a copy
  of the zip's course (the same checks, sandbox, answer policy and messages as the
  instructor's own ``normedu autograde``) and writes ``<root>/results/results.json`` in
  Gradescope's format: one test per graded cell, named as the feedback page names it, with
  the output the feedback page shows (:class:`.nbgrader_bridge.StudentTracebacks`: a hidden
  test's error is its last line only). Whatever happens, a results file is written: a
  hand-in that cannot be graded, or a grader that fails, gets a score of 0 and a sentence
  that says why.

``<root>`` is ``$NORMEDU_GRADESCOPE_ROOT``, else ``/autograder`` (Gradescope's). The zip and
its options: :mod:`.gradescope`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import status as st
from .gradescope import DEFAULT_ROOT, OPTIONS_FILE, ROOT_ENV, Options

#: The one student of a run: Gradescope grades each submission in a container of its own.
STUDENT = "gradescope"
#: Files a submission may carry that are never the hand-in (macOS and Jupyter leave them).
IGNORED_PARTS = ("__MACOSX", ".ipynb_checkpoints")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HIDDEN = "### BEGIN HIDDEN TESTS"
#: Said when the grading machinery, not the hand-in, failed.
NOT_YOUR_FAULT = (
    "This is no fault of your submission: tell your instructor, who can have it graded again."
)


def locate(folder: Path, notebook: str) -> tuple[Path | None, list[str], str | None]:
    """``(file to grade, notes, None)`` or ``(None, notes, why nothing can be graded)``.

    The file named ``<notebook>.ipynb`` (at any depth: a zip upload keeps its folders);
    else the only notebook, else the only file, graded under the right name with a note,
    as ``normedu collect`` grades a wrongly named hand-in."""
    expected = f"{notebook}.ipynb"
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and not p.name.startswith(".")
        and not set(p.relative_to(folder).parts) & set(IGNORED_PARTS)
    ) if folder.is_dir() else []  # fmt: skip
    shown = ", ".join(repr(p.relative_to(folder).as_posix()) for p in files[:6])
    named = [p for p in files if p.name == expected]
    notebooks = [p for p in files if p.suffix.lower() == ".ipynb"]
    if len(named) == 1:
        others = [p.name for p in notebooks if p != named[0]]
        notes = [f"other notebooks not graded: {', '.join(others)}"] if others else []
        return named[0], notes, None
    if len(named) > 1:
        return None, [], f"{len(named)} files are named {expected} ({shown}): hand in one"
    single = notebooks if notebooks else files
    if len(single) == 1:
        note = f"handed in as {single[0].name!r}, expected {expected!r} (graded as {expected})"
        return single[0], [note], None
    if notebooks:
        return (
            None,
            [],
            f"{len(notebooks)} notebooks were handed in ({shown}) and none is named {expected}: "
            f"hand in one notebook, {expected}",
        )
    if not files:
        return None, [], f"nothing was handed in: hand in {expected}"
    return None, [], f"no notebook among the files handed in ({shown}): hand in {expected}"


def _text(cell) -> str:
    """The outputs of an autograded cell as the feedback page shows them, as plain text."""
    parts = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(out.get("text", ""))
        elif kind == "error":
            parts.append("\n".join(out.get("traceback", [])))
        elif kind in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", ""))
    return _ANSI.sub("", "\n".join(p.rstrip("\n") for p in parts if p)).strip("\n")


def _outputs(path: Path) -> dict[str, str]:
    """``{grade_id: output text}`` of the test cells of the autograded notebook at ``path``
    (none when it cannot be read)."""
    import nbformat

    from .nbgrader_bridge import StudentTracebacks

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - no notebook: the verdict's notes say why
        return {}
    nb, _ = StudentTracebacks().preprocess(nb, {})
    out = {}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid and cell.cell_type == "code":
            out[gid] = _text(cell)
    return out


def summary(status: str, notes: list[str], tampered: bool | None) -> str:
    """The submission's top-level output: what the feedback page's status box says."""
    lines = [f"Status: {status}"]
    if tampered:
        lines.append("Test cells were changed or deleted: the originals were graded.")
    lines += [f"- {note}" for note in notes]
    if st.kind(status) in st.NOT_RUN or status == "not graded":
        lines.append(
            "Nothing in your submission was run. Hand in the notebook file (.ipynb) of this "
            "assignment, saved from Jupyter."
        )
    return "\n".join(lines)


def results(
    opts: Options,
    tests: list,
    scores: dict[str, float],
    outputs: dict[str, str],
    labels: dict[str, str],
    *,
    status: str,
    notes: list[str],
    tampered: bool | None = None,
    not_run: str = "",
    seconds: float = 0.0,
) -> dict:
    """Gradescope's ``results.json`` of one submission: one entry per test cell (``tests``:
    the gradebook's :class:`.checks.SourceCell` of each), hidden tests shown with
    ``opts.hidden_visibility``. ``not_run``: the output of a test that has none."""
    entries = []
    for cell in tests:
        score = float(scores.get(cell.grade_id, 0.0))
        entries.append(
            {
                "name": labels.get(cell.grade_id, cell.grade_id),
                "score": score,
                "max_score": cell.points,
                "status": "passed" if score >= cell.points else "failed",
                "output": outputs[cell.grade_id] if cell.grade_id in outputs else not_run,
                "output_format": "text",
                "visibility": opts.hidden_visibility if _HIDDEN in cell.source else "visible",
            }
        )
    return {
        "score": sum(e["score"] for e in entries),
        "execution_time": int(round(seconds)),
        "output": summary(status, notes, tampered),
        "output_format": "text",
        "tests": entries,
        "extra_data": {"normedu_status": status, "tampered": tampered},
    }


def grade(root: Path) -> dict:
    """Grade ``<root>/submission`` with the zip's course (see the module docstring)."""
    from .autograde import NetworkIsolationError, autograde
    from .checks import expected_cells
    from .config import Course
    from .feedback import cell_labels
    from .gradebook import scores as recorded

    t0 = time.perf_counter()
    source = root / "source"
    opts = Options(**json.loads((source / OPTIONS_FILE).read_text()))
    work = Path(tempfile.mkdtemp(prefix="normedu-gradescope-"))
    try:
        # A copy: the zip's course stays as built, however often this runs.
        shutil.copytree(source / "course", work / "course")
        course = Course(root=work / "course")
        a, nb = opts.assignment, opts.notebook
        tests = [c for c in expected_cells(course.db_url, a, nb) if c.is_test]
        labels = cell_labels(course, a, nb)
        path, notes, problem = locate(root / "submission", nb)
        if problem:
            print(f"not graded: {problem}")
            return results(
                opts, tests, {}, {}, labels, status="not graded", notes=[problem],
                not_run="not run: " + problem,
            )  # fmt: skip
        target = course.submitted_dir(STUDENT, a) / f"{nb}.ipynb"
        target.parent.mkdir(parents=True)
        shutil.copyfile(path, target)
        try:
            report = autograde(
                course, a, jobs=1, force=True, cell_timeout=opts.cell_timeout,
                wall_timeout=opts.wall_timeout, memory_mb=opts.memory_mb,
                allow_network=opts.allow_network, progress=False,
            )  # fmt: skip
        except NetworkIsolationError as exc:
            print(f"ERROR: {exc}\nRebuild the zip with `normedu gradescope {a} --allow-network`.")
            reason = "the grader could not start its sandbox on this machine. " + NOT_YOUR_FAULT
            return results(
                opts, tests, {}, {}, labels, status=st.GRADING_FAILED, notes=[reason],
                not_run="not run: " + reason,
            )  # fmt: skip
        for error in report.errors:
            print(f"ERROR: {error}")
        verdict = report.verdicts[STUDENT]
        print(f"{a}: {verdict.status}; sandbox: {report.sandbox}; {report.seconds:.1f} s")
        notes = [*notes, *verdict.notes]
        if verdict.status == st.GRADING_FAILED:
            notes.append(NOT_YOUR_FAULT)
        scores = {g: s for g, s, _ in recorded(course, a, STUDENT) or []}
        outputs = _outputs(course.autograded_dir(STUDENT, a) / f"{nb}.ipynb")
        return results(
            opts, tests, scores, outputs, labels, status=verdict.status, notes=notes,
            tampered=verdict.tampered, not_run=f"not run ({verdict.status})",
            seconds=time.perf_counter() - t0,
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write(path: Path, data: dict) -> None:
    """Write ``results.json`` whole or not at all (a file beside it, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(partial, path)


def failure(exc: BaseException) -> dict:
    """The result of a run whose grader failed: score 0, and why, without the traceback
    (printed for the instructor's log instead)."""
    reason = f"The autograder failed ({type(exc).__name__}), so nothing was graded. "
    return {"score": 0.0, "output": reason + NOT_YOUR_FAULT, "tests": []}


def prepare(root: Path) -> None:
    """For the build log: the assignment, the gradebook's test cells, the sandbox."""
    from .checks import expected_cells
    from .config import Course
    from .namespaces import available
    from .sandbox import describe_sandbox, read_only_paths

    opts = Options(**json.loads((root / "source" / OPTIONS_FILE).read_text()))
    course = Course(root=root / "source" / "course")
    tests = [c for c in expected_cells(course.db_url, opts.assignment, opts.notebook) if c.is_test]
    why = available(read_only_paths())
    print(
        f"normedu autograder for {opts.assignment}: {len(tests)} test cells, "
        f"{sum(c.points for c in tests):g} points; sandbox: "
        f"{describe_sandbox('auto', opts.allow_network or bool(why))}"
    )
    if why and not opts.allow_network:
        print(
            f"WARNING: no network namespace here ({why}): if grading reports the same, "
            f"rebuild with `normedu gradescope {opts.assignment} --allow-network`"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normedu.course.gradescope_run")
    parser.add_argument("action", choices=("prepare", "grade"))
    parser.add_argument(
        "--root", default=os.environ.get(ROOT_ENV, DEFAULT_ROOT), help="Gradescope's folder"
    )
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.action == "prepare":
        prepare(root)
        return 0
    try:
        data = grade(root)
    except BaseException as exc:  # noqa: BLE001 - a result must be written whatever happens
        traceback.print_exc(file=sys.stdout)
        data = failure(exc)
    write(root / "results" / "results.json", data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
