"""Execute sanitized submissions in the sandbox, one after the other.

``python -m normedu.course.worker --serve R W`` is a long-lived worker: the parent
(:mod:`normedu.course.autograde`) starts ``jobs`` of them, each in its own session, and
sends job files over a private pipe (:func:`serve`), so that the imports (about 2 s here) are
paid once per worker, not per submission. ``python -m normedu.course.worker JOB.json`` runs a
single job. Each job names two files the worker writes:

- ``executed``: the notebook with every code cell's outputs. A cell that never ran (the kernel
  died, or the submission ran out of time) gets an error output that says why, so nbgrader
  scores it 0: nbgrader gives full marks to a test cell with no error output.
- ``result``: ``{"timed_out", "timeout_cells", "dead_kernel_cell", "not_run", "wall_s",
  "landlock", "interference", "failures"}`` (``failures``: failing test cells, :mod:`.trusted`).

A job's ``replace`` (``{cell index: source}``) holds the student's cells that the answer policy
rewrote (:mod:`.policy`: magics and shell lines skipped): the kernel runs the rewritten cell
in its place, and the executed notebook keeps the student's source. Every kernel runs behind
the job's ``reach`` (:mod:`.reach`).

The worker never opens the gradebook and never runs student code itself: the kernel does,
in its own working copy (see :mod:`normedu.course.sandbox`). The worker is a child
subreaper, so whatever the kernel forks ends up as the worker's descendant and is killed
before the worker exits (:func:`kill_descendants`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

_PR_SET_CHILD_SUBREAPER = 36

#: Error output for a cell that ran past the per-cell timeout.
TIMEOUT_ERROR = {
    "ename": "CellTimeoutError",
    "evalue": "the cell ran past the time limit and was interrupted",
    "traceback": ["CellTimeoutError: the cell ran past the time limit and was interrupted"],
}


def _not_run_error(reason: str) -> dict:
    return {
        "output_type": "error",
        "ename": "NotExecuted",
        "evalue": reason,
        "traceback": [f"NotExecuted: {reason}"],
    }


def descendants(pid: int) -> list[int]:
    """Live descendants of ``pid`` (zombies excluded), parents first."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def kill_descendants(pid: int | None = None, rounds: int = 20, keep: Iterable[int] = ()) -> int:
    """SIGKILL every descendant of ``pid`` (default: this process) except those in ``keep``
    (the kernel zygote, and the next job's kernel, started by this worker and not yet given
    any code). Returns how many were killed. Repeats, because a process may fork while its
    parent is being killed."""
    pid = os.getpid() if pid is None else pid
    keep = set(keep)
    killed = 0
    for _ in range(rounds):
        victims = [v for v in descendants(pid) if v not in keep]
        if not victims:
            break
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            for victim in victims:
                try:  # reap our own children (orphans re-parented to us included)
                    os.waitpid(victim, os.WNOHANG)
                except ChildProcessError:
                    pass
            if not set(victims) & set(descendants(pid)):  # (``keep`` holds no victim)
                break
            time.sleep(0.01)
    return killed


def _make_client(nb, km, cell_timeout: float, timeouts: list[int]):
    from nbclient import NotebookClient

    class _Client(NotebookClient):
        async def _async_handle_timeout(self, timeout, cell=None):
            timeouts.append(self._current_index)
            return await super()._async_handle_timeout(timeout, cell)

    def on_cell_executed(cell, cell_index, execute_reply):
        # As nbgrader's Execute: a timed-out cell must show an error, else it scores full marks.
        content = execute_reply["content"]
        if content["status"] == "error":
            if not any(
                o.output_type == "error" and o.ename == content["ename"] for o in cell.outputs
            ):
                from nbformat import NotebookNode

                cell.outputs.append(
                    NotebookNode(
                        output_type="error",
                        ename=content["ename"],
                        evalue=content["evalue"],
                        traceback=content["traceback"] or [f"{content['ename']}"],
                    )
                )

    client = _Client(
        nb,
        km=km,
        timeout=int(cell_timeout),
        allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout=TIMEOUT_ERROR,
        record_timing=False,
        shutdown_kernel="immediate",
        startup_timeout=120,
        extra_arguments=list(KERNEL_ARGUMENTS),
        on_cell_executed=on_cell_executed,
    )
    client._current_index = -1
    return client


async def _execute(nb, km, cell_timeout: float, state: dict) -> None:
    import atexit

    client = _make_client(nb, km, cell_timeout, state["timeout_cells"])
    try:
        await _execute_cells(client, nb, state)
    finally:
        # nbclient registers an exit handler per client; a long-lived worker must not pile them.
        atexit.unregister(client._cleanup_kernel)
        if state.get("channel") is not None:
            state["channel"].close()


async def _execute_cells(client, nb, state: dict) -> None:
    from .trusted import check_cell

    tests = state.get("tests") or {}
    replace = state.get("replace") or {}
    async with client.async_setup_kernel():
        count = 0
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            state["next"] = index
            client._current_index = index
            count += 1
            # A cell the answer policy rewrote runs rewritten; the notebook keeps the code.
            original = cell.source
            cell.source = replace.get(str(index), original)
            try:
                await client.async_execute_cell(cell, index, execution_count=count)
            finally:
                cell.source = original
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            # The grade is decided on the trusted side (a cell timed out in the kernel stays 0).
            if grade_id in tests and index not in state["timeout_cells"]:
                await check_cell(client, cell, tests[grade_id], grade_id, state, client.timeout)
            state["next"] = index + 1


#: Arguments of every kernel (also those started ahead of their job).
KERNEL_ARGUMENTS = [
    "--HistoryManager.hist_file=:memory:",
    # Plain tracebacks: IPython's default (with source context) took about 0.1 s per failing
    # test cell, most of a wrong submission's time; students see the same frames.
    "--InteractiveShell.xmode=Plain",
]


class KernelSettings(NamedTuple):
    """What a kernel is started with: the same for every job of one grading run."""

    kernel_name: str
    memory_mb: int
    threads: int
    landlock: str
    #: modules its zygote imports ahead (:func:`.autograde.preloads`)
    preload: tuple[str, ...]
    #: True: the machine's network (--allow-network); else its own (:func:`.namespaces.isolate`)
    network: bool = False
    #: what the kernel can reach, as JSON (:func:`.reach.for_assignment`); "" for no limit
    reach: str = ""

    @property
    def zygote_key(self) -> tuple[int, tuple[str, ...]]:
        """What a zygote fixes for the kernels it forks: their threads and preloaded modules."""
        return self.threads, self.preload


def _settings(job: dict, kernel_name: str = "python3") -> KernelSettings:
    """The :class:`KernelSettings` of a job (or of the ``kernel`` fields the pool passes)."""
    return KernelSettings(
        kernel_name,
        int(job.get("memory_mb", 0)),
        int(job.get("threads", 1)),
        job.get("landlock", "auto"),
        tuple(job.get("preload", ())),
        bool(job.get("network", False)),
        json.dumps(job["reach"], sort_keys=True) if job.get("reach") else "",
    )


def _kernel_manager(settings: KernelSettings, workdir: Path, zygote=None):
    from .kernel_manager import SandboxKernelManager

    return SandboxKernelManager(
        kernel_name=settings.kernel_name,
        sandbox_workdir=str(workdir),
        sandbox_memory_mb=settings.memory_mb,
        sandbox_threads=settings.threads,
        sandbox_landlock=settings.landlock,
        sandbox_network=settings.network,
        sandbox_reach=settings.reach,
        sandbox_zygote=zygote,
        # Unix sockets in the kernel's own working copy: no TCP port races, no TCP warning.
        transport="ipc",
        ip=str(workdir / "kernel"),
        # Beside the sockets: removing the working copy removes all of the kernel's files.
        connection_file=str(workdir / "kernel.json"),
    )


class Spare:
    """A kernel started AHEAD of its job, in a fresh working copy of its own, so that its
    start-up (a fork of the zygote that sets up IPython, or without a zygote a Python process
    importing ipykernel) overlaps the job before it. It has run
    nothing when its job takes it; the job's notebook is copied into its working copy then."""

    def __init__(self, settings: KernelSettings, zygote=None):
        import tempfile

        self.settings = settings
        # In the pool's scratch folder (the worker's TMPDIR); a short name for the sockets.
        self.workdir = Path(tempfile.mkdtemp(prefix="k"))
        self.km = _kernel_manager(settings, self.workdir, zygote)
        asyncio.run(self.km.start_kernel(extra_arguments=list(KERNEL_ARGUMENTS)))

    @property
    def pid(self) -> int | None:
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        return getattr(process, "pid", None)

    def alive(self) -> bool:
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        return process is not None and process.poll() is None

    def discard(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        shutil.rmtree(self.workdir, ignore_errors=True)


def run_job(job: dict, spare: Spare | None = None, keep: Iterable[int] = (), zygote=None) -> dict:
    """Execute ``job["notebook"]`` and write ``job["executed"]`` and ``job["result"]``.

    ``spare``: a kernel already started with this job's settings (its working copy replaces
    ``job["workdir"]``); without one, a kernel is started here. ``keep``: pids spared when
    this job's processes are killed (the zygote, the next job's kernel). ``zygote``: forks
    the kernel started here, if any (:mod:`.zygote`).
    """
    import nbformat
    from nbclient.exceptions import DeadKernelError

    from .sandbox import landlock_abi

    start = time.perf_counter()
    nb = nbformat.read(job["notebook"], as_version=4)
    kernel_name = nb.metadata.get("kernelspec", {}).get("name") or "python3"
    settings = _settings(job, kernel_name)
    if spare is not None and spare.settings == settings:
        workdir, km = spare.workdir, spare.km
    else:
        if spare is not None:
            spare.discard()
        workdir = Path(job["workdir"])
        workdir.mkdir(parents=True, exist_ok=True)
        km = _kernel_manager(settings, workdir, zygote)
    # The working copy: the student's notebook and nothing else of the course.
    shutil.copy(job["notebook"], workdir / Path(job["notebook"]).name)
    state: dict = {
        "next": 0,
        "timeout_cells": [],
        "tests": job.get("tests"),
        "replace": job.get("replace"),
    }
    timed_out = False
    dead_cell = None
    reason = None
    t_exec = time.perf_counter()
    try:
        asyncio.run(
            asyncio.wait_for(
                _execute(nb, km, job["cell_timeout"], state), timeout=job["wall_timeout"]
            )
        )
    except (asyncio.TimeoutError, TimeoutError):
        timed_out = True
    except DeadKernelError:
        # nbclient turns the wall clock's cancellation into DeadKernelError: tell them apart.
        if time.perf_counter() - t_exec >= job["wall_timeout"]:
            timed_out = True
        else:
            dead_cell = state["next"]
            reason = (
                f"the kernel died while running cell {dead_cell} "
                "(sys.exit/os._exit, a crash, or the memory limit)"
            )
    finally:
        kill_descendants(keep=keep)
    if timed_out:
        reason = f"the submission ran past its {job['wall_timeout']:g} s time limit"
    not_run = []
    if reason is not None:
        current = min(state["next"], len(nb.cells) - 1)
        cell = nb.cells[current] if nb.cells else None
        if cell is not None and cell.cell_type == "code":
            error = (
                {"output_type": "error", **TIMEOUT_ERROR} if timed_out else _not_run_error(reason)
            )
            if not any(o.output_type == "error" for o in cell.get("outputs", [])):
                cell.outputs = [*cell.get("outputs", []), nbformat.from_dict(error)]
        for index in range(current + 1, len(nb.cells)):
            cell = nb.cells[index]
            if cell.cell_type == "code":
                cell.outputs = [nbformat.from_dict(_not_run_error(reason))]
                not_run.append(index)
    nbformat.write(nb, job["executed"])
    result = {
        "timed_out": timed_out or bool(state["timeout_cells"]),
        "timeout_cells": sorted(set(state["timeout_cells"])),
        "dead_kernel_cell": dead_cell,
        "not_run": not_run,
        "reason": reason,
        "wall_s": round(time.perf_counter() - start, 3),
        "landlock": job.get("landlock", "auto") != "off" and landlock_abi() > 0,
        "interference": state.get("interference", []),
        "failures": state.get("failures", {}),
    }
    Path(job["result"]).write_text(json.dumps(result))
    return result


def serve(read_fd: int, write_fd: int, kernel: dict | None = None) -> None:
    """Run jobs until the parent closes the pipe: each line read is a job file; each answer
    written is that job's file name, once its result is written. The pipes are private fds,
    not stdout, which the kernel shares (a student's ``os.write(1, ...)`` cannot fake an
    answer).

    While a job runs, the kernel of the NEXT job is already starting (:class:`Spare`, with the
    settings of the current job): kernel start-up overlaps execution and tear-down. Every
    other process the job left is killed before its answer is written.

    Kernels are forked from a zygote (:mod:`.zygote`), one per thread count and preloaded
    modules. ``kernel``: the kernel fields of the run's jobs (``memory_mb``, ``threads``,
    ``landlock``, ``preload``); given, the zygote and the first job's kernel start at once,
    while the parent still prepares that job.
    """
    from .zygote import Zygote

    spare: Spare | None = None
    zygotes: dict[tuple, Zygote | None] = {}  # by KernelSettings.zygote_key

    def zygote_for(settings: KernelSettings) -> Zygote | None:
        key = settings.zygote_key
        if zygotes.get(key) is not None and zygotes[key].process.poll() is not None:
            zygotes.pop(key).close()  # killed (a kernel without signal scoping can): anew
        if key not in zygotes:
            try:
                zygotes[key] = Zygote(*key)
            except Exception:  # no zygote: kernels start from scratch, as without one
                import traceback

                traceback.print_exc()
                zygotes[key] = None
        return zygotes[key]

    def start_spare(settings: KernelSettings) -> Spare | None:
        try:
            return Spare(settings, zygote_for(settings))
        except Exception:  # no spare: the next job starts its own kernel
            import traceback

            traceback.print_exc()
            return None

    def kept() -> list[int]:
        pids = [z.pid for z in zygotes.values() if z is not None]
        return pids + ([spare.pid] if spare is not None and spare.pid else [])

    if kernel is not None:
        spare = start_spare(_settings(kernel))
    # What run_job needs, imported while the first job is on its way (torch for an assignment
    # whose kernels preload it: its checks run torch here, on the trusted side).
    import nbclient  # noqa: F401
    import nbformat  # noqa: F401

    if kernel is not None and "torch" in kernel.get("preload", ()):
        import torch  # noqa: F401

    with os.fdopen(read_fd, "r") as jobs, os.fdopen(write_fd, "w") as answers:
        for line in jobs:
            job_file = line.strip()
            if not job_file:
                continue
            current, spare = spare, None
            try:
                job = json.loads(Path(job_file).read_text())
                settings = _settings(job)
                if current is not None and not current.alive():
                    current.discard()  # its zygote was killed under it
                    current = None
                spare = start_spare(settings)
                try:
                    run_job(job, current, keep=kept(), zygote=zygote_for(settings))
                except Exception:  # the machinery failed, not the submission: once more
                    import traceback

                    traceback.print_exc()
                    kill_descendants(keep=kept())
                    run_job(job, None, keep=kept(), zygote=zygote_for(settings))
            except Exception:  # report, and keep serving the next submission
                import traceback

                traceback.print_exc()
            finally:
                kill_descendants(keep=kept())
                if current is not None:
                    shutil.rmtree(current.workdir, ignore_errors=True)
            answers.write(job_file + "\n")
            answers.flush()
    if spare is not None:
        spare.discard()
    for zygote in zygotes.values():
        if zygote is not None:
            zygote.close()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    kernel = None
    if argv[-1:] and argv[-1].startswith("--kernel="):
        kernel, argv = json.loads(argv[-1].split("=", 1)[1]), argv[:-1]
    if len(argv) == 3 and argv[0] == "--serve":
        mode = "serve"
    elif len(argv) == 1:
        mode = "one"
    else:
        raise SystemExit(
            "usage: python -m normedu.course.worker "
            "(JOB.json | --serve READ_FD WRITE_FD [--kernel=JSON])"
        )
    if sys.platform.startswith("linux"):
        # Orphans of the kernel are re-parented to us, so kill_descendants() finds them.
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    import logging

    logging.basicConfig(level=logging.CRITICAL)
    if mode == "serve":
        serve(int(argv[1]), int(argv[2]), kernel)
        return
    try:
        run_job(json.loads(Path(argv[0]).read_text()))
    finally:
        kill_descendants()


if __name__ == "__main__":
    main()
