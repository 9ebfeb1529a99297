"""Shared fixtures.

The book is built once per test session by :func:`book_html`. Under pytest-xdist every test
that uses it must carry ``@pytest.mark.xdist_group("book")`` so that they all land on the
same worker (``make test`` runs ``-n 2 --dist loadgroup``) and the build happens once. The
other groups work the same way: ``"course"`` and ``"lab"`` share a graded cohort or a JupyterLab
server, ``"inductor"`` holds the tests that compile with torch.compile (Inductor starts and
compiles a kernel in seconds; one worker does it once).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from normedu.course.sandbox import THREAD_VARIABLES

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# The two xdist workers share two cores: one BLAS/OpenMP thread each. With a thread per core,
# a worker's second thread spins between the small operations of a test instead of sleeping,
# taking CPU from the other worker and the book build: measured over a whole run, the worker
# processes used 101 CPU-s with one thread against 127 with two, every test passing alike.
# The book build inherits it too (its two page kernels share the cores with the other worker):
# four builds outside pytest took 199 and 194 CPU-s with one thread, 204 and 215 with the
# default. Tests about thread counts set them themselves.
for _var in THREAD_VARIABLES:
    os.environ.setdefault(_var, "1")

# Inductor (torch.compile on a CPU) first checks that the C++ compiler builds each vector
# instruction set /proc/cpuinfo lists, by compiling a probe that includes ATen's vector
# headers: about 14 CPU-s of g++ on a machine whose Inductor cache is empty, as CI's is. With
# this set it trusts /proc/cpuinfo; every kernel is still compiled with those instructions, so
# a compiler that could not build them still fails the tests that compile.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")


def run_book_build(
    out: Path | None = None, extra: list[str] | None = None
) -> subprocess.CompletedProcess:
    """``jupyter-book build . -W -n --keep-going`` as ``make book`` runs it, with the one
    BLAS/OpenMP thread per process set above."""
    cmd = [str(BIN / "jupyter-book"), "build", ".", "-W", "-n", "--keep-going", *(extra or [])]
    if out is not None:
        cmd += ["--path-output", str(out)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=1800)


@pytest.fixture(scope="session")
def book_build() -> subprocess.CompletedProcess:
    """The result of building the whole book into ``_build/`` (with the execution cache)."""
    return run_book_build()


@pytest.fixture(scope="session")
def book_html(book_build) -> Path:
    """Path to the built ``_build/html``; fails the test with the build log if the build failed."""
    if book_build.returncode != 0:
        reports = sorted((REPO / "_build" / "html" / "reports").glob("**/*.err.log"))
        tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in reports)
        pytest.fail(
            f"book build failed (exit {book_build.returncode}):\n"
            f"{book_build.stdout[-6000:]}\n{book_build.stderr[-6000:]}\n{tails}"
        )
    return REPO / "_build" / "html"
