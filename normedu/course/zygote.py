"""Kernels forked from a warm process, instead of started from scratch.

A Python kernel spends most of its start-up importing ``ipykernel`` and IPython (about 0.5 s
of CPU here), the same work for every submission. A *zygote* is one process per grading
worker that has done those imports once; for each submission it ``fork``s, and the child
confines itself exactly as the exec'd sandbox wrapper does (:func:`.sandbox.confine`: working
copy, scrubbed environment, rlimits, Landlock, death with its parent) and only then starts the
kernel, with the connection file that ``jupyter_client`` wrote. Nothing of one student's kernel
reaches the next: each is a fresh fork of the zygote, which never runs student code.

- :class:`Zygote` is the worker's handle: :meth:`Zygote.spawn` returns a :class:`ForkedKernel`.
- :class:`ForkedKernel` stands in for the ``Popen`` that ``jupyter_client``'s provisioner keeps
  (poll, wait, signals), for a process that is the zygote's child rather than the worker's.
- ``python -m normedu.course.zygote READ_FD WRITE_FD`` is the zygote itself (:func:`serve`).

The zygote also imports NumPy and the torch-free :mod:`normedu.grading` checks that test
cells call. It is started with the grading run's thread settings in its environment, because
NumPy fixes its thread pool at import.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

__all__ = ["Zygote", "ForkedKernel", "kernel_arguments", "serve"]


def kernel_arguments(kernel_cmd: list[str]) -> list[str] | None:
    """The arguments after ``-m ipykernel_launcher`` in a kernel command (with or without the
    sandbox wrapper and its ``--`` in front), or None when the command is not an IPython
    kernel of THIS interpreter, which is the only kind the zygote can fork."""
    import shutil

    start = kernel_cmd.index("--") + 1 if "--" in kernel_cmd else 0
    cmd = kernel_cmd[start:]
    if not cmd:
        return None
    python = shutil.which(cmd[0]) or cmd[0]
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return None
    for i in range(1, len(cmd) - 1):
        if cmd[i] == "-m" and cmd[i + 1] == "ipykernel_launcher":
            return list(cmd[i + 2 :])
        if not cmd[i].startswith("-"):  # a script or module other than the kernel
            return None
    return None


class ForkedKernel:
    """The part of ``subprocess.Popen`` that ``jupyter_client`` uses, for a kernel forked by
    the zygote (so not our child: its exit is seen with psutil, not ``waitpid``)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        import psutil

        if self.returncode is None:
            try:
                if psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE:
                    self.returncode = -signal.SIGKILL
            except psutil.NoSuchProcess:
                self.returncode = -signal.SIGKILL  # the zygote reaped it: the code is unknown
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.005)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """A warm process that forks sandboxed kernels: one per worker and kernel settings.

    ``threads``: the BLAS/OpenMP thread count of every kernel (fixed when NumPy is imported).
    ``preload``: more modules to import once, e.g. ``("torch",)`` for an assignment whose
    notebook imports torch (never for one that does not: its kernels must not see it).
    """

    def __init__(self, threads: int = 1, preload: tuple[str, ...] = ()):
        r_req, w_req = os.pipe()
        r_ans, w_ans = os.pipe()
        from .sandbox import THREAD_VARIABLES

        env = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(threads))}
        env["PYTHONHASHSEED"] = "0"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "normedu.course.zygote", str(r_req), str(w_ans), *preload],
            pass_fds=(r_req, w_ans),
            env=env,
            start_new_session=True,
        )
        os.close(r_req)
        os.close(w_ans)
        self._requests = os.fdopen(w_req, "w")
        self._answers = os.fdopen(r_ans, "r")

    @property
    def pid(self) -> int:
        return self.process.pid

    def spawn(self, argv: list[str], sandbox: dict) -> ForkedKernel:
        """Fork a kernel: ``argv`` for ``IPKernelApp`` (``-f <connection file>`` ...),
        ``sandbox`` the keyword arguments of :func:`.sandbox.confine`."""
        self._requests.write(json.dumps({"argv": argv, "sandbox": sandbox}) + "\n")
        self._requests.flush()
        line = self._answers.readline()
        if not line:
            raise RuntimeError(f"the kernel zygote (pid {self.pid}) exited")
        return ForkedKernel(int(json.loads(line)["pid"]))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._requests.close()
        with contextlib.suppress(OSError):
            self._answers.close()
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()


def _child(request: dict, fds: tuple[int, ...]) -> None:
    """In the fork: leave the zygote's session and pipes, confine, then run the kernel."""
    os.setsid()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    from .sandbox import confine, connection_files

    argv = request["argv"]
    sandbox = dict(request["sandbox"])
    sandbox["readable"] = list(sandbox.get("readable", ())) + connection_files(argv)
    env = confine(**sandbox)
    os.environ.clear()
    os.environ.update(env)
    import random
    import tempfile

    random.seed()  # not the zygote's state: every kernel draws its own
    tempfile.tempdir = None  # TMPDIR is the working copy's now
    from ipykernel.kernelapp import IPKernelApp

    sys.argv = ["ipykernel_launcher", *argv]
    IPKernelApp.launch_instance(argv=argv)


def serve(read_fd: int, write_fd: int, preload: tuple[str, ...] = ()) -> None:
    """The zygote: import what every kernel needs (and ``preload``), then fork one kernel per
    request line."""
    from .sandbox import die_with_parent

    die_with_parent()  # with the worker; the kernels die with us (sandbox.confine)
    import importlib
    import pkgutil

    import ipykernel.kernelapp  # noqa: F401 - the point of the zygote
    import numpy  # noqa: F401 - every assignment imports it

    import normedu.grading

    # What the test cells import (all torch-free; torch itself is left to the kernels that
    # need it). Student code could import these modules itself: having them loaded changes
    # nothing it can do.
    for module in pkgutil.iter_modules(normedu.grading.__path__):
        if module.name != "mistakes":  # the instructor's catalog: no test cell needs it
            importlib.import_module(f"normedu.grading.{module.name}")
    for name in preload:
        # Importing torch starts no thread (its pools start at the first operation), so
        # forking after it is safe; nothing may run an operation here.
        importlib.import_module(name)

    # Reap our kernels as they exit, so that they never linger as zombies.
    def reap(*_):
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass

    signal.signal(signal.SIGCHLD, reap)
    with os.fdopen(read_fd, "r") as requests, os.fdopen(write_fd, "w") as answers:
        for line in requests:
            if not line.strip():
                continue
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    _child(request, (read_fd, write_fd))
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:  # noqa: BLE001 - the kernel's own crash, reported
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(code)
            answers.write(json.dumps({"pid": pid}) + "\n")
            answers.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), tuple(sys.argv[3:]))
