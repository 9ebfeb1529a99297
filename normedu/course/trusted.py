"""The checks that decide a grade, run where no student code runs.

A test cell's checks (``grade.check_forward_values(layernorm_forward)``) run in the grading
worker, not in the student's kernel: :class:`TrustedCells` executes the test cell's source as
the gradebook holds it (never the hand-in's) in a namespace of its own, with the real NumPy and
the real :mod:`normedu.grading`. Every name the cell takes from the notebook is resolved once
per cell (:func:`.plain.describe`):

- a function of the student's becomes a :class:`Proxy`: calling it sends the arguments as
  plain values to the kernel, which calls the real function and sends back plain values
  (:mod:`.plain`), which the checks then validate as they validate any answer;
- a module becomes the grader's own import of that module, and only of NumPy, ``math`` or the
  course's checks (:data:`MODULES`); a student's module of that name is ignored;
- anything else arrives as a plain value (an array, a number).

The calls cross over a Unix socket the worker listens on in the kernel's working copy,
answered by a thread of the kernel (:class:`Channel`, :func:`.plain.serve`).

So nothing the student's code does to its own process (IPython hooks, replaced functions,
lying objects, trace functions) reaches the code that decides: it can only change what its
functions return. The kernel still runs every test cell too, so that the notebook's state and
the student's view are as they were; its outputs no longer score.

The anti-shortcut guard (:mod:`normedu.grading.guard`) reads a function's code in the
process where it lives, and in a student's notebook it still does. Here it is not asked: what
a function may call is decided by what the grading kernel can reach (:mod:`.reach`: no
reference, no torch for a NumPy assignment, none of torch's norms for a torch one), so a
shortcut fails as the call it makes fails, and a library's norm merely named in the code
(an unused branch, a comment) costs nothing.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import io
import json
import traceback
import types
from collections.abc import Callable

from .plain import PlainValueError, decode, encode

#: Modules a test cell may get from the grader's own imports (top-level names).
MODULES = ("numpy", "math", "normedu.grading", "normedu.functional")
#: Kernel-side helpers, reached from the kernel's user_expressions.
_REMOTE = "__import__('normedu.course.plain', fromlist=['plain'])"


class KernelCallError(RuntimeError):
    """The kernel did not answer a request (timed out, died, or refused)."""


def _builtin_exception(name: str, message: str, harness: bool = False) -> BaseException:
    """An exception like the student's, rebuilt from its name and message only; a harness's
    ``GradingError`` (a check's message about the student's code) as the checks' own."""
    if harness and name == "GradingError":
        from normedu.grading.errors import GradingError

        return GradingError(message)
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - an exception type with other arguments
            pass
    safe = name if name.isidentifier() else "StudentError"
    return type(safe, (Exception,), {"__module__": "student"})(message)


def _update_in_place(before, now) -> None:
    """Leave the trusted side's arguments as the student's function left its copies: arrays
    (same shape) and dicts, also inside lists and tuples, as in the student's process."""
    import numpy as np

    if isinstance(before, np.ndarray) and isinstance(now, np.ndarray):
        if now.shape == before.shape and before.flags.writeable:
            np.copyto(before, now, casting="unsafe")
    elif isinstance(before, dict) and isinstance(now, dict):
        before.clear()
        before.update(now)
    elif isinstance(before, (list, tuple)) and isinstance(now, (list, tuple)):
        for b, n in zip(before, now, strict=False):
            _update_in_place(b, n)


class Proxy:
    """Stands for the student's function ``name``: a call is made in the kernel
    (:func:`.plain.call`) and returns plain values; arrays and dicts passed in are updated in
    place as the real function left them (the checks pass copies and compare). Its
    :meth:`run_in_kernel` runs a check's kernel-side harness on it there instead."""

    def __init__(self, cells: TrustedCells, name: str):
        self._cells = cells
        self.__name__ = self.__qualname__ = name

    def __repr__(self) -> str:
        return f"<student function {self.__name__}>"

    def __call__(self, *args, **kwargs):
        return self._ask({"op": "call", "name": self.__name__}, args, kwargs)

    def run_in_kernel(self, harness: str, args: tuple, kwargs: dict):
        """Run the check's kernel-side harness ``harness`` on the real object, in the kernel
        (:func:`normedu.grading.kernel_side.kernel_side`): plain values in, plain values
        out. A :class:`GradingError` the harness raised there comes back as one."""
        request = {"op": "harness", "name": self.__name__, "harness": harness}
        return self._ask(request, args, kwargs)

    def _ask(self, request: dict, args: tuple, kwargs: dict):
        payload = json.dumps({"args": encode(list(args)), "kwargs": encode(kwargs)})
        answer = self._cells.request({**request, "payload": payload})
        if not isinstance(answer, dict):
            raise PlainValueError("the kernel's answer is not a mapping")
        # A plain call's arguments are the check's copies, compared afterwards with what it
        # kept (the in-place check). A harness's are the check's own inputs, which it then
        # computes the reference from: they never take what the kernel sends back (a harness
        # checks in-place changes in the kernel itself).
        if request["op"] == "call":
            after, kw_after = decode(answer.get("args")), decode(answer.get("kwargs"))
            _update_in_place(list(args), after)
            if isinstance(kw_after, dict):
                for k, before in kwargs.items():
                    _update_in_place(before, kw_after.get(k))
        if "error" in answer:
            name, message, frames = (list(answer["error"]) + ["", "", []])[:3]
            exc = _builtin_exception(str(name), str(message), harness=request["op"] == "harness")
            # Plain values only: names and line numbers of the student's own frames.
            exc.student_frames = [
                (str(f[0])[:80], int(f[1]))
                for f in (frames if isinstance(frames, list) else [])[:5]
                if isinstance(f, list) and len(f) == 2 and isinstance(f[1], int)
            ]
            raise exc
        return decode(answer.get("ok"))


def _install_guard_hook() -> None:
    """The anti-shortcut guard finds nothing in a :class:`Proxy`: the kernel's reach decides
    what a student's function can call (see above)."""
    from normedu.grading import guard

    original = guard.find_shortcuts
    if getattr(original, "_trusted_hook", False):
        return

    def find_shortcuts(fn, banned=guard.NUMPY_ONLY):
        if isinstance(fn, Proxy):
            return []
        return original(fn, banned)

    find_shortcuts._trusted_hook = True
    guard.find_shortcuts = find_shortcuts


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _bound(tree: ast.AST) -> set[str]:
    """Names the cell binds itself (assignments, imports, definitions)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def _allowed_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in MODULES)


class TrustedCells:
    """The test cells of one submission, run in this process. ``request(op)`` has the kernel
    answer ``op`` (:func:`.plain.handle`) and returns the JSON answer, decoded (see
    :class:`Channel`)."""

    def __init__(self, request: Callable[[str], object]):
        _install_guard_hook()
        self.request = request
        self.ns: dict = {"__name__": "__main__", "__builtins__": builtins}

    def _resolve(self, names: set[str]) -> dict:
        wanted = sorted(n for n in names if n not in self.ns and not hasattr(builtins, n))
        if not wanted:
            return {}
        found = self.request({"op": "describe", "names": wanted})
        resolved = {}
        for name, what in (found if isinstance(found, dict) else {}).items():
            if name not in wanted or not isinstance(what, dict):
                continue
            if "callable" in what:
                resolved[name] = Proxy(self, name)
            elif "module" in what:
                module = str(what["module"])
                if _allowed_module(module):
                    with contextlib.suppress(ImportError):
                        resolved[name] = importlib.import_module(module)
            elif "value" in what:
                with contextlib.suppress(PlainValueError):
                    resolved[name] = decode(what["value"])
        return resolved

    def run(self, source: str, label: str) -> tuple[list[dict], bool]:
        """Run one test cell: ``(outputs, passed)``, the outputs as nbformat dicts: what it
        printed, and the error that failed it (nbgrader scores a test cell by that error)."""
        out = io.StringIO()
        filename = f"<test cell {label}>"
        error = None
        resolved: dict = {}
        namespace = dict(self.ns)
        try:
            tree = ast.parse(source, filename)
            code = compile(tree, filename, "exec")
            resolved = self._resolve(_names(code) - _bound(tree))
            namespace.update(resolved)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                exec(code, namespace)  # noqa: S102 - the course's own test cell
        except BaseException as exc:  # noqa: BLE001 - a failing check, or the student's error
            error = _error_output(exc, filename, source)
        # What the cell defined stays for the next test cells; the notebook's names are
        # asked again each time (the student may redefine a function between two tests).
        for key, value in namespace.items():
            if not (key in resolved and value is resolved[key]):
                self.ns[key] = value
        outputs = []
        if out.getvalue():
            outputs.append({"output_type": "stream", "name": "stdout", "text": out.getvalue()})
        if error is not None:
            outputs.append(error)
        return outputs, error is None


def _error_output(exc: BaseException, filename: str, source: str) -> dict:
    """An nbformat error output: the test cell's own lines, then ``ename: evalue``."""
    lines = source.splitlines()
    entries = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename and 0 < (frame.lineno or 0) <= len(lines):
            entries.append(
                f"Cell {filename[1:-1]}, line {frame.lineno}:\n    {lines[frame.lineno - 1]}"
            )
    # Where the student's function raised (reported by the kernel as plain names and lines),
    # found on the exception or on the one a check wrapped: :mod:`.diagnose` reads it.
    cause, seen = exc, 0
    while cause is not None and seen < 5:
        for func, line in getattr(cause, "student_frames", []):
            entries.append(f"{type(cause).__name__} raised in `{func}`, line {line} of its cell")
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    ename = type(exc).__name__
    evalue = str(exc)
    return {
        "output_type": "error",
        "ename": ename,
        "evalue": evalue,
        "traceback": [*entries, f"{ename}: {evalue}"],
    }


def parse_reply(reply: dict) -> object:
    """The JSON a kernel-side helper returned, from an ``execute_reply`` whose
    ``user_expressions`` hold it as ``r``."""
    content = reply.get("content", {}) if isinstance(reply, dict) else {}
    expr = content.get("user_expressions", {}).get("r", {})
    if not isinstance(expr, dict) or expr.get("status") != "ok":
        ename = expr.get("ename", "error") if isinstance(expr, dict) else "error"
        evalue = expr.get("evalue", "") if isinstance(expr, dict) else ""
        raise KernelCallError(f"the kernel could not run the call: {ename}: {evalue}"[:500])
    text = expr.get("data", {}).get("text/plain", "")
    if not isinstance(text, str) or len(text) > 256 * 2**20:
        raise KernelCallError("the kernel's answer is not text, or too long")
    try:
        value = ast.literal_eval(text)
        if not isinstance(value, str):
            raise ValueError("not a string")
        return json.loads(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise KernelCallError(f"the kernel's answer is not JSON text: {exc}"[:300]) from None


# -- the worker's side: requests to the kernel, one test cell after the other ----------------
class Channel:
    """The worker's line to the kernel-side helpers: a Unix socket it listens on in the
    kernel's working copy, which a thread of the kernel connects to (:func:`.plain.serve`),
    started with one execute request. ``limits["deadline"]`` (``time.monotonic()``) bounds
    every request; after one that ran past it the channel refuses all others (the thread may
    still be busy with the student's function)."""

    def __init__(self, kc, km, loop, workdir: str, limits: dict):
        self.kc, self.km, self.loop, self.limits = kc, km, loop, limits
        self.workdir, self.sock, self.broken = workdir, None, None

    def _execute(self, expression: str) -> object:
        import asyncio
        import time

        async def ask(deadline: float) -> dict:
            msg_id = self.kc.execute(
                "", silent=True, store_history=False, user_expressions={"r": expression}
            )
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KernelCallError("the kernel did not answer within the cell time limit")
                try:
                    msg = await self.kc.get_shell_msg(timeout=min(remaining, 1.0))
                except Exception:  # noqa: BLE001 - queue.Empty: nothing yet
                    if not await self.km.is_alive():
                        raise KernelCallError("the kernel died") from None
                    continue
                if msg.get("parent_header", {}).get("msg_id") == msg_id:
                    return msg

        deadline = self.limits["deadline"]
        future = asyncio.run_coroutine_threadsafe(ask(deadline), self.loop)
        try:
            return parse_reply(future.result(max(0.0, deadline - time.monotonic()) + 5))
        except TimeoutError:
            future.cancel()
            raise KernelCallError("no answer from the kernel within the cell time limit") from None

    def _connect(self) -> None:
        import os
        import socket
        import time

        name = f".grader-{os.urandom(4).hex()}.sock"
        path = os.path.join(self.workdir, name)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # A socket's path may hold at most 107 bytes, and a working copy's can be longer (a
        # deep TMPDIR): bind through the folder's descriptor, whose /proc path is short.
        folder = os.open(self.workdir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            listener.bind(f"/proc/self/fd/{folder}/{name}")
            listener.listen(1)
            listener.settimeout(max(0.1, self.limits["deadline"] - time.monotonic()))
            self._execute(f"{_REMOTE}.serve({path!r})")
            self.sock, _ = listener.accept()
        except OSError as exc:
            raise KernelCallError(f"the kernel did not connect: {exc}") from None
        finally:
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
            os.close(folder)

    def request(self, op: dict) -> object:
        import time

        from .plain import _recv, _send

        if self.broken:
            raise KernelCallError(self.broken)
        if self.sock is None:
            self._connect()
        remaining = self.limits["deadline"] - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            _send(self.sock, json.dumps(op).encode())
            data = _recv(self.sock, 256 * 2**20)
            if data is None:
                raise OSError("the kernel closed the line")
            answer = json.loads(data)
        except TimeoutError:
            self.broken = "the student's function ran past the cell time limit"
            raise KernelCallError(self.broken) from None
        except (OSError, ValueError, PlainValueError) as exc:
            self.broken = f"the kernel's answer was unusable: {exc}"[:300]
            raise KernelCallError(self.broken) from None
        if isinstance(answer, dict) and "failed" in answer:
            raise KernelCallError(f"the kernel could not answer: {answer['failed']}"[:500])
        return answer

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


#: The longest message kept per failing test cell (:func:`failure_record`): a student's own
#: exception text can be of any length.
MESSAGE_CHARS = 2000


def failure_record(outputs: list[dict]) -> dict[str, str]:
    """``{"error", "message"}`` of a failing test cell, from its trusted outputs (the error's
    name and value, the message capped at :data:`MESSAGE_CHARS`): the grader's record of what
    the student saw, from which the class report names the cause (:mod:`.failures`)."""
    error = next((o for o in outputs if o.get("output_type") == "error"), {})
    return {
        "error": str(error.get("ename", "")),
        "message": str(error.get("evalue", ""))[:MESSAGE_CHARS],
    }


async def check_cell(client, cell, source: str, grade_id: str, state: dict, seconds: float):
    """Run test cell ``grade_id`` (``source`` from the gradebook) on the trusted side, after
    the kernel ran it: its outputs become the cell's outputs, which nbgrader scores. A cell
    that passed in the kernel but fails here is noted in ``state["interference"]``; every
    failing cell's error, in ``state["failures"]`` (:func:`failure_record`)."""
    import asyncio
    import time

    import nbformat

    if state.get("trusted_cells") is None:
        limits = state.setdefault("trusted_limits", {"deadline": 0.0})
        workdir = client.km.sandbox_workdir
        loop = asyncio.get_running_loop()
        state["channel"] = Channel(client.kc, client.km, loop, workdir, limits)
        state["trusted_cells"] = TrustedCells(state["channel"].request)
    state["trusted_limits"]["deadline"] = time.monotonic() + seconds
    kernel_failed = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
    outputs, passed = await asyncio.to_thread(state["trusted_cells"].run, source, grade_id)
    if not passed and not kernel_failed:
        state.setdefault("interference", []).append(grade_id)
    if not passed:
        state.setdefault("failures", {})[grade_id] = failure_record(outputs)
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
