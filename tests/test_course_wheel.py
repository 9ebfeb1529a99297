"""Students' installs: the wheel of ``normedu`` works outside the repository.

One test, a few seconds of work plus the build: build the wheel from a copy of the package
(``pip wheel``, no network), install it into a fresh virtual environment that gets numpy,
torch and the rest from the project environment's site-packages but NOT the editable
``normedu`` of the checkout, and, from a folder outside the checkout, execute every exercise
notebook of ``exercises/`` with its answer cells solved (taken from ``solutions/``), all in
one Python process. Every visible test cell must pass; ``normedu`` must come from the wheel.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from envs import fresh_env

from normedu.course.config import Course

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

RUNNER = r"""
import json, linecache, os, sys
import normedu


def main():
    here = os.path.dirname(normedu.__file__)
    assert here.startswith(sys.prefix), f"normedu imported from {here}, not from the wheel"
    done = []
    for path in sys.argv[1:]:
        cells = json.load(open(path))
        ns = {"__name__": "__main__"}
        for gid, src in cells:
            name = f"<{os.path.basename(path)}:{gid}>"
            # As IPython does for every cell: inspect.getsource then finds a function defined
            # in an earlier cell (the syncbn notebook saves the student's functions as a module).
            linecache.cache[name] = (len(src), None, src.splitlines(True), name)
            try:
                exec(compile(src, name, "exec"), ns)
            except Exception as exc:
                raise SystemExit(f"{path}: cell {gid} failed: {type(exc).__name__}: {exc}")
        done.append(os.path.basename(path))
    print("OK", normedu.__file__, *done)


# Guarded like a notebook's kernel: the syncbn notebook starts processes (forkserver), which
# import this file again as __mp_main__ and must not re-run the notebooks.
if __name__ == "__main__":
    main()
"""


def _solved_exercise(assignment: str) -> list[tuple[str, str]]:
    """Code cells of ``exercises/<a>`` with each answer cell replaced by the solution's."""

    def cells(folder: str) -> list[dict]:
        nb = json.loads((REPO / folder / assignment / f"{assignment}.ipynb").read_text())
        return [c for c in nb["cells"] if c["cell_type"] == "code"]

    solved = {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        .replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", "")
        for c in cells("solutions")
        if c["metadata"].get("nbgrader", {}).get("solution")
    }  # fmt: skip
    out = []
    for i, c in enumerate(cells("exercises")):
        gid = c["metadata"].get("nbgrader", {}).get("grade_id", f"cell{i}")
        src = solved.get(gid, "".join(c["source"]))
        # IPython magics and shell lines are not Python; the exercises use none that matter.
        src = "\n".join(
            line for line in src.splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        out.append((gid, src))
    return out


def test_wheel_runs_every_solved_exercise_outside_the_checkout(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "normedu", src / "normedu", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("normedu-*.whl")

    # numpy, torch, matplotlib ... from the project environment, not the checkout's normedu.
    env_dir = tmp_path / "student-env"
    python = fresh_env(env_dir)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]

    work = tmp_path / "student"
    work.mkdir()
    files = []
    for assignment in Course(root=REPO).assignments():
        path = work / f"{assignment}.json"
        path.write_text(json.dumps(_solved_exercise(assignment)))
        files.append(str(path))
    (work / "run.py").write_text(RUNNER)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "MPLBACKEND": "Agg", "LANG": "C.UTF-8"}
    out = subprocess.run(
        [str(python), "run.py", *files], cwd=work, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.splitlines()[-1].startswith("OK " + str(env_dir)), out.stdout[-2000:]
