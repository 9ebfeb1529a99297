"""``normedu gradescope A -o autograder.zip``: an autograder for Gradescope that grades as
``normedu autograde`` does.

The zip follows Gradescope's published autograder specification ("Gradescope autograder
specifications"): ``setup.sh`` and ``run_autograder`` at the root of the archive. Gradescope
unpacks it to ``/autograder/source``, runs ``setup.sh`` once as root when it builds the
image (Ubuntu), then ``run_autograder`` once per submission, in a fresh container, with the
student's files in ``/autograder/submission``; the grade goes to
``/autograder/results/results.json``.

What the zip holds::

    setup.sh            installs Python (a virtual environment), the pinned packages and the wheel
    run_autograder      runs ``python -m normedu.course.gradescope_run grade``
    normedu-*.whl       the course's own package, built from this checkout
    requirements.txt    what grading needs: nbgrader's stack, NumPy (torch only if the notebook
                        loads it, from PyTorch's CPU index), the notebook's other imports
    constraints.txt     the exact versions of the environment that built the zip
    gradescope.json     the options (hidden tests' visibility, limits, network)
    course/             a course of this one assignment: its source notebook (solutions and
                        hidden tests), the release, and the gradebook nbgrader made of them

The grading itself is :func:`normedu.course.autograde.autograde` on that course
(:mod:`.gradescope_run`): the same checks, sandbox, answer policy and messages. So the zip
holds the solution and the hidden tests, like the instructor's gradebook: keep it private.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .autograde import CELL_TIMEOUT_S, MEMORY_MB, WALL_TIMEOUT_S
from .config import Course

#: Gradescope's visibility values (its specification's "Controlling Test Case Visibility").
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
#: Where ``setup.sh`` installs torch from when the assignment loads it: the CPU build.
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
#: Gradescope's folder; ``$NORMEDU_GRADESCOPE_ROOT`` moves it (tests emulate the harness).
ROOT_ENV = "NORMEDU_GRADESCOPE_ROOT"
DEFAULT_ROOT = "/autograder"
#: Python interpreter ``setup.sh`` installs into instead of a new virtual environment.
PYTHON_ENV = "NORMEDU_GRADESCOPE_PYTHON"
#: The one file of options in the zip, read by :mod:`.gradescope_run`.
OPTIONS_FILE = "gradescope.json"


@dataclass(frozen=True)
class Options:
    """How the autograder grades. ``hidden_visibility``: when students see the hidden tests'
    entries (Gradescope's visibility; default ``after_published``: once the instructor
    publishes the grades); the limits and ``allow_network`` are ``normedu autograde``'s."""

    assignment: str
    notebook: str
    hidden_visibility: str = "after_published"
    cell_timeout: float = CELL_TIMEOUT_S
    wall_timeout: float = WALL_TIMEOUT_S
    memory_mb: int = MEMORY_MB
    allow_network: bool = False

    def __post_init__(self):
        if self.hidden_visibility not in VISIBILITIES:
            raise ValueError(
                f"hidden visibility must be one of {VISIBILITIES}, got {self.hidden_visibility!r}"
            )


SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu 24.04:
# Python 3.11 or newer is needed). Made by `normedu gradescope {assignment}`.
set -euo pipefail
SOURCE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
ROOT="${{{root_env}:-{default_root}}}"
# {python_env}: install into this Python (it needs pip), not a new environment. The
# course's tests point it at an environment that already holds every pinned package, so
# that nothing is downloaded: the test machines are offline, and torch alone is ~200 MB.
PY="${{{python_env}:-}}"
if [ -z "$PY" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends python3 python3-venv python3-pip
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "normedu needs Python 3.11+: choose Gradescope's Ubuntu 24.04 base image" >&2
        exit 1
    fi
    # An environment of its own: Ubuntu 24.04's Python refuses system-wide pip (PEP 668).
    python3 -m venv "$ROOT/venv"
    PY="$ROOT/venv/bin/python"
    "$PY" -m pip install -q --disable-pip-version-check --upgrade pip
fi
PIP=("$PY" -m pip install -q --disable-pip-version-check -c "$SOURCE/constraints.txt")
{torch}"${{PIP[@]}}" -r "$SOURCE/requirements.txt"
# The course's package without its dependencies: they are above (torch only where needed).
"$PY" -m pip install -q --disable-pip-version-check --no-deps --no-index "$SOURCE"/{wheel}
echo "$PY" > "$SOURCE/python.txt"
"$PY" -m normedu.course.gradescope_run prepare
"""

TORCH_LINE = (
    "# This assignment loads torch: its CPU build, from PyTorch's own index (its version\n"
    "# 2.x.y+cpu ranks above PyPI's 2.x.y), torch's dependencies from either index.\n"
    '"${{PIP[@]}}" --index-url {index} --extra-index-url https://pypi.org/simple torch\n'
)

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this once per submission (files in $ROOT/submission); the grade goes to
# $ROOT/results/results.json. Made by `normedu gradescope {assignment}`.
ROOT="${{{root_env}:-{default_root}}}"
PY="$(cat "$ROOT/source/python.txt" 2>/dev/null || echo python3)"
"$PY" -m normedu.course.gradescope_run grade --root "$ROOT"
code=$?
# Never leave Gradescope without a result, even when Python itself could not start.
if [ ! -s "$ROOT/results/results.json" ]; then
    mkdir -p "$ROOT/results"
    printf '{{"score": 0, "output": "%s", "tests": []}}\\n' \\
        "The autograder could not start (exit status $code), so nothing was graded. This is no \
fault of your submission: tell your instructor." > "$ROOT/results/results.json"
fi
exit 0
"""


_NAMES = {"root_env": ROOT_ENV, "default_root": DEFAULT_ROOT, "python_env": PYTHON_ENV}


def setup_script(assignment: str, wheel: str, torch: bool) -> str:
    """``setup.sh`` of the zip; ``torch``: the assignment loads torch (its CPU build)."""
    line = TORCH_LINE.format(index=TORCH_INDEX) if torch else ""
    return SETUP_SH.format(**_NAMES, assignment=assignment, torch=line, wheel=wheel)


def run_script(assignment: str) -> str:
    """``run_autograder`` of the zip."""
    return RUN_AUTOGRADER.format(**_NAMES, assignment=assignment)


def build_wheel(into: Path) -> Path:
    """The wheel of this checkout's ``normedu`` (``pip wheel``, no network), in ``into``."""
    import normedu

    repo = Path(normedu.__file__).resolve().parent.parent
    if not (repo / "pyproject.toml").is_file():
        raise ValueError(
            f"no pyproject.toml beside the normedu package ({repo}): build the autograder "
            "from a checkout of the course (an installed wheel cannot rebuild itself)"
        )
    with tempfile.TemporaryDirectory(prefix="normedu-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(repo / name, src / name)
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
        shutil.copytree(repo / "normedu", src / "normedu", ignore=ignore)
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        out = subprocess.run(
            [*command, "-q", "-w", str(into), str(src)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    if out.returncode != 0:
        raise RuntimeError(f"pip wheel failed:\n{out.stderr[-3000:]}")
    (wheel,) = into.glob("normedu-*.whl")
    return wheel


def _distribution(module: str) -> str:
    """The distribution that installs the top-level ``module`` (``sklearn``: scikit-learn)."""
    from importlib.metadata import packages_distributions

    return (packages_distributions().get(module) or [module])[0]


def requirements(source: Path) -> tuple[list[str], bool]:
    """What grading the notebook ``source`` needs besides the wheel, and whether it loads
    torch: nbgrader's stack (normedu's ``course`` extra), NumPy, tqdm (the grading pool's
    progress bar) and the notebook's own third-party imports."""
    from importlib.metadata import requires

    from .checks import imported_modules, loads_module

    needs = ["numpy", "tqdm"]
    for line in requires("normedu") or []:
        spec, _, marker = line.partition(";")
        if "extra" in marker and '"course"' in marker:
            needs.append(spec.strip())
    outside = imported_modules(source) - set(sys.stdlib_module_names) - {"normedu", "torch"}
    needs += sorted(_distribution(m) for m in outside)
    torch = loads_module(source, "torch")
    return list(dict.fromkeys(needs)), torch


def constraints() -> str:
    """``name==version`` of every distribution of this environment but normedu: the versions
    the instructor's own ``normedu autograde`` runs with. A local label (``+cpu``, ``+cu128``)
    is dropped, so that torch's CPU index serves the same version."""
    from importlib.metadata import distributions

    pins = {}
    for dist in distributions():
        name = (dist.metadata["Name"] or "").strip()
        if name and name.lower() != "normedu":
            pins.setdefault(name.lower(), f"{name}=={dist.version.split('+')[0]}")
    return "".join(line + "\n" for _, line in sorted(pins.items()))


def _stage_course(course: Course, assignment: str, into: Path) -> None:
    """A course of ``assignment`` alone in ``into``: its source, its release and the gradebook
    nbgrader makes of them (so that grading never generates it again)."""
    from .release import release

    shutil.copytree(course.source_dir(assignment), into / course.source / assignment)
    release(Course(root=into), [assignment])
    shutil.rmtree(into / ".normedu", ignore_errors=True)  # nbgrader's empty exchange


def build_autograder(
    course: Course, assignment: str, output: str | Path, **options
) -> tuple[Path, Options, bool]:
    """Write Gradescope's autograder zip of ``assignment`` to ``output``. ``options``: the
    fields of :class:`Options` but the assignment and notebook. Returns the zip's path, the
    options and whether ``setup.sh`` installs torch."""
    notebooks = course.notebooks(assignment)
    if len(notebooks) != 1:
        raise ValueError(f"one notebook per assignment; {assignment!r} has {notebooks}")
    opts = Options(assignment, notebooks[0], **options)
    source = course.source_dir(assignment) / f"{opts.notebook}.ipynb"
    needs, torch = requirements(source)
    output = Path(output).resolve()
    with tempfile.TemporaryDirectory(prefix="normedu-gradescope-") as tmp:
        stage = Path(tmp)
        _stage_course(course, assignment, stage / "course")
        wheel = build_wheel(stage)
        files = {
            "setup.sh": setup_script(assignment, wheel.name, torch),
            "run_autograder": run_script(assignment),
            "requirements.txt": "".join(n + "\n" for n in needs),
            "constraints.txt": constraints(),
            OPTIONS_FILE: json.dumps(asdict(opts), indent=1) + "\n",
        }
        for name, text in files.items():
            (stage / name).write_text(text)
        output.parent.mkdir(parents=True, exist_ok=True)
        partial = output.with_name(output.name + ".part")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(p for p in stage.rglob("*") if p.is_file()):
                rel = path.relative_to(stage).as_posix()
                info = zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0))
                executable = rel in ("setup.sh", "run_autograder")
                info.external_attr = (0o755 if executable else 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())
        partial.replace(output)
    return output, opts, torch
