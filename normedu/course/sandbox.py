"""The sandbox a student's kernel runs in.

``python -m normedu.course.sandbox [options] -- <kernel command>`` confines itself, then
``exec``s the kernel, so the kernel process (and everything it forks) inherits:

- a working directory that holds a copy of the student's notebook and nothing else of the
  course, with ``HOME`` and ``TMPDIR`` inside it and a scrubbed environment;
- resource limits: address space (``RLIMIT_AS``, the memory cap), largest file written
  (``RLIMIT_FSIZE``), no core dumps;
- ``PR_SET_PDEATHSIG``: the kernel is killed when the grading worker that started it dies;
- where the Linux kernel supports it (5.13+), a Landlock ruleset: the process may write only
  inside its working directory (and to ``/dev``), and read only the system, Python and the
  ``normedu`` package, so absolute paths to the gradebook, to ``solutions/`` or to other
  students' files fail with ``PermissionError``. :func:`landlock_abi` says whether it is on.
  From ABI 6 it also scopes signals and abstract Unix sockets to the sandbox: the kernel
  cannot signal its worker, its zygote or the grading run, nor ``kill(-1)`` them;
- unless ``--allow-network``: namespaces of its own (:mod:`.namespaces`): no network, and a
  root that holds only what it may read and its working copy (no Unix socket outside it).

Limits, stated in the instructor guide: the kernel still runs as the grading user, and a fork
bomb or CPU hog is bounded only by the time limits. Use a container for high-stakes grading.

:class:`normedu.course.kernel_manager.SandboxKernelManager` is the ``jupyter_client`` kernel
manager that puts this wrapper in front of the kernel command (or forks the kernel from a
zygote, confined by :func:`confine`). It lives above both: this module imports neither it nor
the zygote, which imports the confinement from here.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import signal
import sys
from pathlib import Path

# Landlock ABI (linux/landlock.h). Numbers are the same on x86_64 and aarch64.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_CREATE_RULESET_VERSION = 1
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE, _MAKE_CHAR, _MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
_MAKE_REG, _MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
_MAKE_SYM, _REFER, _TRUNCATE = 1 << 12, 1 << 13, 1 << 14
_READ = _EXECUTE | _READ_FILE | _READ_DIR
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
# Landlock ABI 4: TCP bind/connect rights; ABI 6: scopes (what a domain may reach outside).
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
#: Landlock ABI from which a kernel cannot signal any process outside its own sandbox.
SIGNAL_SCOPE_ABI = 6

#: The thread counts of the BLAS/OpenMP libraries: read once, when a library loads.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

#: Environment variables passed through to the kernel; everything else is dropped.
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "JPY_PARENT_PID", "JPY_SESSION_NAME", "TZ")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The Landlock ABI version of the running Linux kernel, 0 when unavailable."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(
            _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION
        )
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def read_only_paths() -> list[str]:
    """What a sandboxed kernel may read: the system, the Python installation and normedu.

    ``sys.path`` entries outside the Python prefixes (for instance a repository root put there
    by an editable install) are left out on purpose: they would expose ``solutions/``.
    """
    import normedu

    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    paths = {"/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys"}
    paths |= {str(p) for p in prefixes}
    for entry in sys.path:
        if not entry:
            continue
        p = Path(entry).resolve()
        if any(p == q or q in p.parents for q in prefixes) or "site-packages" in p.parts:
            paths.add(str(p))
    paths.add(str(Path(normedu.__file__).resolve().parent))
    return sorted(p for p in paths if os.path.exists(p))


def _apply_landlock(workdir: str, readable: list[str], listable: list[str] = ()) -> None:
    """Landlock: read ``readable`` (files and folders, with all beneath them), list the
    folders of ``listable`` (their entries only), write only in ``workdir`` and ``/dev``."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available")
    handled = _READ | _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR
    handled |= _MAKE_REG | _MAKE_SOCK | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM
    if abi >= 2:
        handled |= _REFER
    if abi >= 3:
        handled |= _TRUNCATE
    libc = _libc()
    # ABI 6+: no signal to any process outside this sandbox (its worker, its zygote, the
    # grading run: kill(-1) included) and no connection to an abstract Unix socket outside
    # it. The network's own isolation is the namespace of namespaces.isolate().
    attr = _RulesetAttr(handled, 0, 0)
    size = 8
    if abi >= SIGNAL_SCOPE_ABI:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
    fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")

    def allow(path: str, rights: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                rights &= _FILE_RIGHTS
            rule = _PathBeneath(rights & handled, pfd)
            if libc.syscall(_SYS_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
        finally:
            os.close(pfd)

    for path in readable:
        allow(path, _READ)
    for path in listable:
        allow(path, _READ_DIR)
    allow("/dev", _READ | _WRITE_FILE | _TRUNCATE)
    # Everything in the working copy but device files: a kernel running as root could
    # otherwise mknod the machine's disk there and read or write it raw.
    allow(workdir, handled & ~(_MAKE_CHAR | _MAKE_BLOCK))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.syscall(_SYS_RESTRICT_SELF, fd, 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(fd)


def kernel_env(workdir: str, threads: int) -> dict[str, str]:
    """The kernel's environment: a scrubbed copy with every home-like directory in ``workdir``."""
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    tmp = os.path.join(workdir, ".tmp")
    os.makedirs(tmp, exist_ok=True)
    env.update(
        HOME=workdir,
        TMPDIR=tmp,
        IPYTHONDIR=os.path.join(workdir, ".ipython"),
        MPLCONFIGDIR=os.path.join(workdir, ".matplotlib"),
        JUPYTER_CONFIG_DIR=os.path.join(workdir, ".jupyter"),
        MPLBACKEND="Agg",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        NBGRADER_EXECUTION="autograde",
        **dict.fromkeys(THREAD_VARIABLES, str(threads)),
    )
    return env


def die_with_parent() -> None:
    """``PR_SET_PDEATHSIG``: this process is killed when the one that started it dies."""
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def connection_files(command: list[str]) -> list[str]:
    """The connection file of a kernel command (``-f <file>``): the kernel reads it once at
    start-up, so Landlock must let it."""
    return [a for a in command if a.endswith(".json") and os.path.isfile(a)]


def confine(
    workdir: str,
    *,
    memory_mb: int = 0,
    fsize_mb: int = 64,
    threads: int = 1,
    landlock: str = "auto",
    readable: list[str] | tuple[str, ...] = (),
    network: bool = True,
    reach: dict | None = None,
) -> dict[str, str]:
    """Confine THIS process (see the module docstring) and return the kernel's environment.

    Called by :func:`main` just before it ``exec``s the kernel, and by a forked kernel of
    :mod:`.zygote` before it starts. ``readable``: extra read-only paths (the connection file).
    ``network``: False cuts the kernel off every connection out of its sandbox
    (:func:`.namespaces.isolate`); where the system refuses, the kernel does not start.
    ``reach``: a grading kernel's reach (:mod:`.reach`): Landlock then lets it read only the
    real modules of normedu and none of the unavailable libraries (the caller installs the
    rest of the reach in the process, :func:`.reach.install`).
    """
    workdir = os.path.realpath(workdir)
    os.chdir(workdir)
    env = kernel_env(workdir, threads)
    die_with_parent()  # an orphaned kernel must never outlive grading
    if os.getppid() == 1:  # the parent died before prctl took effect
        sys.exit(1)
    if memory_mb > 0:
        cap = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    fsize = fsize_mb * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not network:
        from .namespaces import isolate

        try:
            isolate(workdir, read_only_paths() + list(readable))
        except OSError as exc:
            raise SystemExit(f"sandbox: no network isolation: {exc}") from exc
        die_with_parent()  # a new user namespace changes credentials, which clears it
    if landlock != "off":
        try:
            paths, listable = read_only_paths(), []
            if reach is not None:
                from .reach import landlock_view

                paths, listable = landlock_view(paths, reach)
            _apply_landlock(workdir, paths + list(readable), listable)
        except OSError as exc:
            if landlock == "on":
                raise SystemExit(f"sandbox: Landlock requested but unavailable: {exc}") from exc
    return env


def describe_sandbox(landlock: str = "auto", allow_network: bool = False) -> str:
    """One line for the report and the notes: what confines a kernel on this machine."""
    from .pool import pid_namespace

    abi = landlock_abi()
    network = " + network namespace" if not allow_network else " (network allowed)"
    # The workers' own PID namespaces (pool.py): without them a kernel that kills its
    # worker costs a re-grade, not a grade, and the instructor should know it.
    network += (
        " + a PID namespace per worker"
        if pid_namespace()
        else " (no PID namespace: a kernel can kill its worker; its hand-ins are graded again)"
    )
    if landlock != "off" and abi > 0:
        signals = (
            ", no signals out"
            if abi >= SIGNAL_SCOPE_ABI
            else " (ABI < 6: signals to grading processes are not blocked)"
        )
        return f"working copy + rlimits + Landlock ABI {abi}{signals}{network}"
    return "working copy + rlimits (no Landlock: absolute paths are not blocked)" + network


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m normedu.course.sandbox")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--memory-mb", type=int, default=0, help="address-space cap; 0: none")
    parser.add_argument("--fsize-mb", type=int, default=64, help="largest file the kernel writes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--landlock", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--allow-network", action="store_true", help="no network namespace")
    parser.add_argument("--readable", action="append", default=[], help="extra read-only path")
    parser.add_argument("--reach", default=None, help="a grading kernel's reach (JSON)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no kernel command after --")
    env = confine(
        args.workdir,
        memory_mb=args.memory_mb,
        fsize_mb=args.fsize_mb,
        threads=args.threads,
        landlock=args.landlock,
        network=args.allow_network,
        readable=args.readable + connection_files(command),
        reach=None if args.reach is None else json.loads(args.reach),
    )
    if args.reach is not None and "ipykernel_launcher" in command[1:]:
        # The kernel runs behind the reach (:mod:`.reach`): installed before IPython starts.
        at = command.index("ipykernel_launcher")
        command = [*command[: at - 1], "-m", "normedu.course.reach", args.reach, *command[at + 1 :]]
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main()
