"""No connection out of a kernel's sandbox: Linux namespaces for :func:`.sandbox.confine`.

:func:`isolate` moves the calling process (a kernel about to start) into

- a **network namespace** of its own: no interface but a private loopback, so no connection
  to the internet, to this machine's ``127.0.0.1`` or to another machine (torch.distributed's
  gloo, which the syncbn checks run on 127.0.0.1, still talks to itself);
- a **mount namespace** whose root holds only what the kernel may read (the system, Python,
  ``normedu``: :func:`.sandbox.read_only_paths`, bound read-only), a private ``/dev/shm`` and
  its own working copy: a Unix socket anywhere else (``/run``, ``/tmp``, another kernel's
  working copy) does not exist for it. (Landlock cannot refuse ``connect`` on a socket file;
  its ABI 6 scope covers abstract sockets, see :mod:`.sandbox`.)

As root directly; otherwise inside a new user namespace that maps the user to itself
(``unshare --user``). :func:`available` tries it in a forked child, so that ``autograde`` can
refuse to start where the system does not allow it.
"""

from __future__ import annotations

import ctypes
import os
import sys

_CLONE_NEWNS, _CLONE_NEWNET, _CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
#: Device files a kernel may use (bound one by one: a socket such as /dev/log stays out).
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = [None if v is None else str(v).encode() for v in (source, target, fstype, data)]
    _check(_libc().mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _loopback_up() -> None:
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, siocgifflags, req))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


def _unshare() -> None:
    libc = _libc()
    if libc.unshare(_CLONE_NEWNET | _CLONE_NEWNS) == 0:
        return
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWNS), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def _bind(path: str, root: str, bound: list[str], rdonly: bool = True) -> None:
    if any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound):
        return  # already inside a bound folder
    target = root + path
    if os.path.islink(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    elif os.path.exists(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    else:
        return
    _mount(path, target, None, _MS_BIND | (_MS_REC if rdonly else 0))
    if rdonly:
        _mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID)
    bound.append(path)


def _private_root(workdir: str, readable: list[str]) -> None:
    """Pivot into a new root that holds ``readable`` (read-only), a few devices, a private
    /dev/shm and ``workdir`` (read-write), each at its own path."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    root = os.path.join(workdir, ".root")
    os.makedirs(root, exist_ok=True)
    _mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=755")
    bound: list[str] = []
    # Symlinks first (merged /usr: /lib -> usr/lib), then folders, longest last.
    for path in sorted(p for p in readable if p not in ("/dev",) and not p.startswith("/dev/")):
        _bind(os.path.realpath(path) if not os.path.islink(path) else path, root, bound)
    os.makedirs(root + "/dev/shm", exist_ok=True)
    for name in DEVICES:
        _bind(f"/dev/{name}", root, [], rdonly=False)
    _mount("tmpfs", root + "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "size=512m,mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/tmp", mode=0o1777, exist_ok=True)
    _bind(workdir, root, [], rdonly=False)  # not recursive: .root itself stays out
    # pivot_root, not chroot: with the old root unmounted, nothing lies above the new one
    # (Landlock walks a path up through mount points: under chroot, the new root's files
    # would inherit the rights of the working copy the tmpfs is mounted in).
    os.makedirs(root + "/.old", exist_ok=True)
    nr = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
    if nr is None:
        raise OSError(f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc().syscall(nr, root.encode(), (root + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(_libc().umount2(b"/.old", 2), "umount old root")  # MNT_DETACH
    os.rmdir("/.old")
    os.chdir(workdir)


def isolate(workdir: str, readable: list[str]) -> None:
    """Cut THIS process off every connection out of its sandbox (see the module docstring).
    Raises ``OSError`` when the operating system refuses."""
    if not sys.platform.startswith("linux"):
        raise OSError("network and mount namespaces exist only on Linux")
    _unshare()
    try:
        _loopback_up()
    except OSError:
        pass  # no loopback: still no network; only code that talks to itself fails
    _private_root(os.path.realpath(workdir), readable)


def available(readable: list[str]) -> str | None:
    """None when :func:`isolate` works here, else why not (tried in a forked child in a
    scratch folder, so that this process keeps its network and its root). ``readable``: what
    the kernel may read (:func:`.sandbox.read_only_paths`), passed in so that this module
    does not import the sandbox back."""
    import shutil
    import tempfile

    if not sys.platform.startswith("linux"):
        return "network namespaces exist only on Linux"
    scratch = tempfile.mkdtemp(prefix="normedu-probe-")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        message = b""
        try:
            isolate(scratch, readable)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            message = (str(exc) or type(exc).__name__).encode()[:500]
        os.write(w, message)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        message = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    shutil.rmtree(scratch, ignore_errors=True)
    return message or None
