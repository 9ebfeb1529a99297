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

The grading zygote also imports NumPy and the grader's kernel side
(:data:`.reach.KERNEL_MODULES`), and nothing else of normedu: its kernels must reach no
reference (:mod:`.reach`). It is started with the grading run's thread settings in its environment,
because NumPy fixes its thread pool at import.

The book build uses the same machinery without the sandbox (its pages are the course's own
code): ``Zygote(threads=None, preload=..., grading=False)`` imports what every chapter imports
(torch, matplotlib, the package) once, and :func:`warm_kernel_manager` forks each page's kernel
from it, in the page's folder and with the environment ``jupyter_client`` built for it. That
saves about 4 s of imports per page.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

__all__ = [
    "Zygote",
    "ForkedKernel",
    "fork_kernel",
    "warm_kernel_manager",
    "kernel_arguments",
    "serve",
]


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
    """A warm process that forks kernels: sandboxed ones (grading, one zygote per worker and
    kernel settings) or plain ones (the book build).

    ``threads``: the BLAS/OpenMP thread count of every kernel (fixed when NumPy is imported);
    None leaves the environment's. ``preload``: more modules to import once, e.g.
    ``("torch",)`` for an assignment whose notebook imports torch (never for one that does not:
    its kernels must not see it). ``grading``: also import NumPy and the grading checks.
    ``env``: variables to set in the zygote before it imports anything.
    """

    def __init__(
        self,
        threads: int | None = 1,
        preload: tuple[str, ...] = (),
        *,
        grading: bool = True,
        env: dict[str, str] | None = None,
    ):
        r_req, w_req = os.pipe()
        r_ans, w_ans = os.pipe()
        from .sandbox import THREAD_VARIABLES

        env = {**os.environ, **(env or {}), "PYTHONHASHSEED": "0"}
        if threads is not None:
            env.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
        flags = ["--grading"] if grading else []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "normedu.course.zygote", str(r_req), str(w_ans), *flags]
            + list(preload),
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

    def spawn(
        self,
        argv: list[str],
        sandbox: dict | None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ForkedKernel:
        """Fork a kernel: ``argv`` for ``IPKernelApp`` (``-f <connection file>`` ...),
        ``sandbox`` the keyword arguments of :func:`.sandbox.confine`, or None for a kernel
        that is not confined and runs in ``cwd`` with exactly the environment ``env``."""
        request = {"argv": argv, "sandbox": sandbox, "cwd": cwd, "env": env}
        self._requests.write(json.dumps(request) + "\n")
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


def fork_kernel(
    manager,
    zygote: Zygote | None,
    kernel_cmd: list[str],
    sandbox: dict | None,
    cwd: str,
    env: dict[str, str] | None = None,
) -> bool:
    """Fork the kernel of ``kernel_cmd`` from ``zygote`` for ``manager`` (a ``jupyter_client``
    kernel manager, inside its ``_async_launch_kernel``), with the arguments of
    :meth:`Zygote.spawn`, and record it as ``LocalProvisioner.launch_kernel`` records a
    process it started itself.

    Returns False, having started nothing, when there is no zygote, the command is not an
    IPython kernel of this interpreter, or the zygote is gone: the manager then starts the
    kernel its usual way.
    """
    argv = kernel_arguments(kernel_cmd)
    if zygote is None or argv is None:
        return False
    try:
        process = zygote.spawn(argv, sandbox, cwd=cwd, env=env)
    except (OSError, RuntimeError):  # the zygote died: nothing was forked
        return False
    provisioner = manager.provisioner
    # The fork calls setsid(): its process group, like a kernel started in a new session.
    provisioner.process, provisioner.pid = process, process.pid
    provisioner.pgid = process.pid
    provisioner.cwd = cwd
    manager._reconcile_connection_info(provisioner.connection_info)
    return True


def warm_kernel_manager(zygote: Zygote, on_exit=None) -> type:
    """A ``jupyter_client`` kernel manager class (for ``NotebookClient``'s
    ``kernel_manager_class``) whose IPython kernels are forked, unconfined, from ``zygote``,
    in the folder and with the environment the client asks for.

    ``on_exit(cpu_seconds)``, if given, is called as the client shuts the kernel down, with
    the CPU time (user + system, its threads and reaped children included) the kernel has
    used since it was forked: what the notebook's execution cost, imports the zygote made
    beforehand excluded.
    """
    from jupyter_client.manager import AsyncKernelManager

    class WarmKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd, **kw):
            cwd = kw.get("cwd") or os.getcwd()
            if not fork_kernel(self, zygote, kernel_cmd, None, cwd, kw.get("env")):
                await super()._async_launch_kernel(kernel_cmd, **kw)

        async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
            if on_exit is not None:
                on_exit(_cpu_seconds(self.provisioner.pid if self.provisioner else None))
            await super().shutdown_kernel(now=now, restart=restart)

    return WarmKernelManager


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` and its reaped children (None if gone)."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, ValueError):
        return None
    return t.user + t.system + t.children_user + t.children_system


def _child(request: dict, fds: tuple[int, ...]) -> None:
    """In the fork: leave the zygote's session and pipes, confine, then run the kernel."""
    os.setsid()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    from .sandbox import confine, connection_files, die_with_parent

    argv = request["argv"]
    if request["sandbox"] is None:  # a plain kernel (the book's): its folder and environment
        die_with_parent()
        if request["cwd"]:
            os.chdir(request["cwd"])
        env = request["env"] if request["env"] is not None else dict(os.environ)
    else:
        sandbox = dict(request["sandbox"])
        sandbox["readable"] = list(sandbox.get("readable", ())) + connection_files(argv)
        env = confine(**sandbox)
        if sandbox.get("reach") is not None:  # before IPython, before any student code
            from .reach import install

            install(sandbox["reach"])
    os.environ.clear()
    os.environ.update(env)
    import random
    import tempfile

    random.seed()  # not the zygote's state: every kernel draws its own
    tempfile.tempdir = None  # TMPDIR may differ from the zygote's
    from ipykernel.kernelapp import IPKernelApp

    sys.argv = ["ipykernel_launcher", *argv]
    IPKernelApp.launch_instance(argv=argv)


#: What ``IPKernelApp.initialize`` imports by itself, beyond ``ipykernel.kernelapp``: the
#: kernel class, its shell, and its debugger, which imports debugpy (150 modules). Imported
#: once here, a forked kernel starts in 0.1 instead of 0.3 CPU-s.
KERNEL_IMPORTS = (
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "ipykernel.debugger",
    "IPython.core.completerlib",
    "IPython.core.debugger",
    "IPython.core.oinspect",
    "IPython.extensions.storemagic",
    "sqlite3",
)


def serve(
    read_fd: int, write_fd: int, preload: tuple[str, ...] = (), grading: bool = False
) -> None:
    """The zygote: import what every kernel needs (and ``preload``), then fork one kernel per
    request line."""
    from .sandbox import die_with_parent

    die_with_parent()  # with the worker; the kernels die with us (sandbox.confine)
    import importlib
    import pkgutil

    import ipykernel.kernelapp  # noqa: F401 - the point of the zygote

    for name in KERNEL_IMPORTS:
        importlib.import_module(name)

    if grading:
        import numpy  # noqa: F401 - every assignment imports it

        from .reach import KERNEL_MODULES

        # The grader's kernel side, and nothing else of normedu: a grading kernel reaches no
        # reference and no check (:mod:`.reach`), so none may be loaded here to be inherited.
        for name in KERNEL_MODULES:
            importlib.import_module(name)
    for name in preload:
        # Importing torch starts no thread (its pools start at the first operation), so
        # forking after it is safe; nothing may run an operation here.
        if name.endswith(".*"):  # a package and every module in it
            package = importlib.import_module(name[:-2])
            for module in pkgutil.iter_modules(package.__path__):
                if not module.name.startswith("_"):  # never a package's __main__
                    importlib.import_module(f"{package.__name__}.{module.name}")
        else:
            importlib.import_module(name)

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        # A forked child cannot use CUDA once its parent has: better no zygote at all.
        raise SystemExit("normedu zygote: a preloaded module initialized CUDA; not forking")

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
            reach = (request.get("sandbox") or {}).get("reach")
            if reach is not None:  # what Landlock lets the kernel read: worked out once, here
                from .reach import landlock_view
                from .sandbox import read_only_paths

                landlock_view(read_only_paths(), reach)
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
    names = sys.argv[3:]
    serve(
        int(sys.argv[1]),
        int(sys.argv[2]),
        tuple(n for n in names if n != "--grading"),
        grading="--grading" in names,
    )
