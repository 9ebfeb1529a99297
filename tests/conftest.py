"""Shared fixtures.

The book is built once per test session by :func:`book_html`. Under pytest-xdist every test
that uses it must carry ``@pytest.mark.xdist_group("book")`` so that they all land on the
same worker (``make test`` runs ``-n 2 --dist loadgroup``) and the build happens once. The
other groups work the same way: ``"course"`` and ``"lab"`` share a graded cohort or a JupyterLab
server, ``"inductor"`` holds the tests that compile with torch.compile (Inductor starts and
compiles a kernel in seconds; one worker does it once).

Under ``-n`` the book is not built by the worker that runs the book's tests: the build is the
longest single piece of work in the session, so the controller starts it in the background as
soon as a worker has collected a book test (:class:`BackgroundBuild`), the workers run at a
lower CPU priority than the build, and the book's tests are scheduled last
(:func:`pytest_collection_modifyitems`, with ``--no-loadscope-reorder``). The other tests fill
the cores the build leaves idle, and
the book's tests find the build finished or nearly so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
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


def book_build_command(out: Path | None = None, extra: list[str] | None = None) -> list[str]:
    """``jupyter-book build . -W -n --keep-going`` as ``make book`` runs it."""
    cmd = [str(BIN / "jupyter-book"), "build", ".", "-W", "-n", "--keep-going", *(extra or [])]
    if out is not None:
        cmd += ["--path-output", str(out)]
    return cmd


def _build_env() -> dict[str, str]:
    # The one BLAS/OpenMP thread per process set above, and one hash seed (set iteration in
    # Sphinx's output).
    return {**os.environ, "PYTHONHASHSEED": "0"}


def run_book_build(
    out: Path | None = None, extra: list[str] | None = None
) -> subprocess.CompletedProcess:
    """Build the book in this process's time (see :func:`book_build_command`)."""
    return subprocess.run(
        book_build_command(out, extra),
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_build_env(),
        timeout=BUILD_TIMEOUT,
    )


#: Seconds a book build may take before the session gives up on it.
BUILD_TIMEOUT = 1800
#: The folder where the controller's background build reports (inherited by the workers).
BUILD_DIR_ENV = "NORMEDU_TEST_BUILD_DIR"
#: How much lower the workers' CPU priority is than the build's. At 5, a worker sharing a core
#: with one of the build's page kernels gets about a quarter of it: the build is barely slowed,
#: and a test's own time limits (a kernel's start, a grading cell) still hold.
WORKER_NICENESS = 5


class BackgroundBuild:
    """The controller's book build: started once, in the background; its output, then its
    exit status, land in ``folder`` (``stdout``, ``stderr``, ``returncode``), where
    :func:`book_build` on a worker reads them."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.proc: subprocess.Popen | None = None
        #: session seconds (time.monotonic) at which the build started and ended
        self.started: float | None = None
        self.ended: float | None = None

    def start(self) -> None:
        if self.proc is not None:
            return
        out = (self.folder / "stdout").open("w")
        err = (self.folder / "stderr").open("w")
        self.proc = subprocess.Popen(
            book_build_command(),
            cwd=REPO,
            stdout=out,
            stderr=err,
            text=True,
            env=_build_env(),
            start_new_session=True,  # so that stop() ends its kernels too
        )
        self.started = time.monotonic()
        (self.folder / "started").write_text(str(self.proc.pid))
        threading.Thread(target=self._report, args=(out, err), daemon=True).start()

    def _report(self, out, err) -> None:
        try:
            code = self.proc.wait(timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.stop()
            code = -9
        self.ended = time.monotonic()
        out.close()
        err.close()
        # Written last and atomically: its presence means the build is over.
        tmp = self.folder / "returncode.tmp"
        tmp.write_text(str(code))
        tmp.rename(self.folder / "returncode")

    def stop(self) -> None:
        """End the build (and its kernels) if it still runs: the session is over."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait()


def _is_controller(config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        os.nice(WORKER_NICENESS)
    elif _is_controller(config):
        folder = Path(tempfile.mkdtemp(prefix="normedu-book-build-"))
        # Set before the workers start, which inherit it.
        os.environ[BUILD_DIR_ENV] = str(folder)
        config.normedu_build = BackgroundBuild(folder)
        config.normedu_t0 = time.monotonic()
        config.normedu_cpu0 = _machine_cpu()


def _machine_cpu() -> tuple[float, float, float] | None:
    """(busy, idle, stolen) CPU-seconds of the whole machine since boot, from /proc/stat (None
    where there is none). Busy counts user, nice, system, irq and softirq; idle counts iowait
    too; stolen is the time a virtual machine's host ran something else on its cores, which
    makes the same session slower from one hour to the next."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
    return busy / hz, (fields[3] + fields[4]) / hz, fields[7] / hz


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """When the session's book build started and ended, counted from pytest's configuration:
    the book's tests cannot start before it ends, so it bounds the session's time from below.
    And how busy the machine's cores were meanwhile: where they were busy throughout, the
    session's time is its CPU work divided by the cores, whatever the order of the tests."""
    if not hasattr(config, "normedu_t0"):
        return
    t0 = config.normedu_t0
    build = config.normedu_build
    if build.started is not None:
        end = "still running" if build.ended is None else f"ended at {build.ended - t0:.0f} s"
        terminalreporter.write_line(
            f"book build: started at {build.started - t0:.0f} s, {end} of the session"
        )
    before, after = config.normedu_cpu0, _machine_cpu()
    if before is not None and after is not None:
        busy, idle, stolen = (b - a for a, b in zip(before, after, strict=True))
        terminalreporter.write_line(
            f"machine: {busy:.0f} CPU-s busy, {idle:.0f} idle, {stolen:.0f} stolen by the host "
            f"on {os.cpu_count()} cores ({busy / max(busy + idle, 1e-9):.0%} busy) over "
            f"{time.monotonic() - t0:.0f} s"
        )


def pytest_unconfigure(config):
    build = getattr(config, "normedu_build", None)
    if build is not None:
        build.stop()
        shutil.rmtree(build.folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """On the controller: a worker collected the session's tests; if the book's are among them
    (their ids end in ``@book`` under ``--dist loadgroup``), start building it."""
    build = getattr(node.config, "normedu_build", None)
    if build is not None and any(i.endswith("@book") for i in ids):
        build.start()


def _group(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None


#: Scheduling order of the groups (ungrouped tests between "inductor" and "book"): the longest
#: chains first, the book last, to find its background build done.
GROUP_ORDER = ("course", "attacks", "lab", "inductor", None, "book")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: GROUP_ORDER.index(_group(item)))


def _wait_for_background_build(folder: Path) -> subprocess.CompletedProcess | None:
    """The controller's build, once it has ended; None if it never started (run it here)."""
    started = folder / "started"
    deadline = time.monotonic() + 30
    while not started.exists():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.5)
    done = folder / "returncode"
    deadline = time.monotonic() + BUILD_TIMEOUT + 60
    while not done.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the background book build did not end within {BUILD_TIMEOUT} s")
        time.sleep(1)
    return subprocess.CompletedProcess(
        book_build_command(),
        int(done.read_text()),
        (folder / "stdout").read_text(),
        (folder / "stderr").read_text(),
    )


@pytest.fixture(scope="session")
def book_build() -> subprocess.CompletedProcess:
    """The result of building the whole book into ``_build/`` (with the execution cache): the
    controller's background build under ``-n``, else one run here."""
    folder = os.environ.get(BUILD_DIR_ENV)
    if folder:
        done = _wait_for_background_build(Path(folder))
        if done is not None:
            return done
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
