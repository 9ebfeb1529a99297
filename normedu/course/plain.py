"""Plain values between the trusted grader and a student's kernel, and the kernel's side.

The trusted side (:mod:`.trusted`, in the grading worker) runs a test cell's checks itself and
calls the student's functions through proxies; each call crosses to the kernel as JSON:

- :func:`encode` / :func:`decode`: numbers, strings, None, tuples, lists, dicts with string
  keys, and NumPy arrays and scalars of a numeric dtype (``np.save`` bytes, base64, read back
  with ``allow_pickle=False``); a function the checks may pass to student code (an
  activation, :func:`normedu.grading.kernel_side.passable`) as its registered name, looked up
  on the other side. Anything else is sent as its type's name only. No pickle, no object of
  the other side is ever rebuilt: a value whose ``__eq__``, ``__array__`` or ``__float__``
  lies arrives as the bytes of a plain array, or as a name.
- :func:`decode` is strict (numeric dtypes, sizes, depth): the trusted side runs it on what
  the student's process sent.
- :func:`call`, :func:`describe`: what the kernel runs for the trusted side (over the socket
  of :func:`serve`); :func:`call` also runs a check's kernel-side harness on the student's
  object (:mod:`normedu.grading.kernel_side`). This side imports no check: a grading kernel
  holds only what :mod:`.reach` lets it (no reference, no guard). They run in the
  student's process, so student code can change them: that can only change what comes
  back, which is validated like any answer.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import re
import types

import numpy as np

#: NumPy dtype kinds that cross: bool, signed/unsigned int, float, complex.
NUMERIC = "biufc"
MAX_DEPTH = 8
MAX_ELEMENTS = 20_000_000
MAX_ITEMS = 10_000
_TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,80}$")


class PlainValueError(ValueError):
    """What came back from the kernel is not a plain value."""


def _array_bytes(value) -> str:
    buf = io.BytesIO()
    np.save(buf, value, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def encode(value, depth: int = 0):
    """``value`` as JSON-able data (see the module docstring)."""
    if depth > MAX_DEPTH:
        return {"other": "deeply nested value"}
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind in NUMERIC:
        return {"nd": _array_bytes(np.array(value, copy=True, subok=False))}
    if isinstance(value, np.generic) and np.dtype(type(value)).kind in NUMERIC:
        return {"np": _array_bytes(np.array(value))}
    if type(value) in (tuple, list):
        return {type(value).__name__: [encode(v, depth + 1) for v in value[:MAX_ITEMS]]}
    if type(value) is dict and all(type(k) is str for k in value):
        return {"dict": {k: encode(v, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}}
    if callable(value):
        from normedu.grading.kernel_side import passable_name

        name = passable_name(value)
        if name is not None:
            return {"fn": name}
    return {"other": type(value).__name__}


def _load_array(text) -> np.ndarray:
    if not isinstance(text, str):
        raise PlainValueError("an array that is not base64 text")
    try:
        arr = np.load(io.BytesIO(base64.b64decode(text, validate=True)), allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - any malformed payload is the same failure
        raise PlainValueError(f"not a NumPy array: {exc}") from None
    if not isinstance(arr, np.ndarray) or type(arr) is not np.ndarray:
        raise PlainValueError("not a plain NumPy array")
    if arr.dtype.kind not in NUMERIC or arr.dtype.fields is not None:
        raise PlainValueError(f"an array of dtype {arr.dtype}, not a numeric one")
    if arr.size > MAX_ELEMENTS or arr.ndim > 32:
        raise PlainValueError(f"an array of shape {arr.shape}: too large")
    return arr


def unsupported(name) -> object:
    """A stand-in for a value of a type that does not cross: an empty object whose type
    is named like the original (so that a check says 'got a Tensor')."""
    name = name if isinstance(name, str) and _TYPE_NAME.match(name) else "object"
    return type(name.rsplit(".", 1)[-1], (), {"__repr__": lambda self: f"<{name}>"})()


def decode(data, depth: int = 0):
    """The value :func:`encode` made, validated: numeric arrays only, bounded sizes."""
    if depth > MAX_DEPTH + 1:
        raise PlainValueError("nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is not dict or len(data) != 1:
        raise PlainValueError(f"unexpected {type(data).__name__}")
    ((kind, inner),) = data.items()
    if kind == "nd":
        return _load_array(inner)
    if kind == "np":
        arr = _load_array(inner)
        if arr.ndim != 0:
            raise PlainValueError("a scalar with a shape")
        return arr[()]
    if kind in ("tuple", "list"):
        if type(inner) is not list or len(inner) > MAX_ITEMS:
            raise PlainValueError(f"a malformed {kind}")
        items = [decode(v, depth + 1) for v in inner]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        if type(inner) is not dict or len(inner) > MAX_ITEMS:
            raise PlainValueError("a malformed dict")
        return {str(k): decode(v, depth + 1) for k, v in inner.items()}
    if kind == "other":
        return unsupported(inner)
    if kind == "fn":
        from normedu.grading.kernel_side import named_function

        try:
            return named_function(inner)
        except (ValueError, ImportError) as exc:
            raise PlainValueError(str(exc)) from None
    raise PlainValueError(f"unknown kind {kind!r}")


# -- the kernel's side ------------------------------------------------------------------------
def _user_ns() -> dict:
    from IPython import get_ipython

    return get_ipython().user_ns


def describe(names: list[str]) -> str:
    """What each of ``names`` is in the notebook: a callable, a module (its name) or a value
    (plain, encoded). Names the notebook does not define are left out."""
    ns, out = _user_ns(), {}
    for name in names:
        if name not in ns:
            continue
        obj = ns[name]
        try:
            if isinstance(obj, types.ModuleType):
                out[name] = {"module": str(obj.__name__)}
            elif callable(obj):
                out[name] = {"callable": True}
            else:
                out[name] = {"value": encode(obj)}
        except Exception:  # noqa: BLE001 - a name that cannot be described is not sent
            continue
    return json.dumps(out)


def _cell_frames(exc: BaseException) -> list[list]:
    """``[[function, line], ...]`` of the traceback's frames in the notebook's own cells
    (IPython compiles a cell to a file of its ``ipykernel_*`` folder, or ``<...>``): where in
    the student's code it raised, for the notes and the status box."""
    import traceback

    # A harness's GradingError carries the student's exception as its cause.
    frames, seen = [], 0
    while exc is not None and seen < 5:
        frames = traceback.extract_tb(exc.__traceback__) + frames
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    own = [f for f in frames if "ipykernel_" in f.filename or f.filename.startswith("<")]
    return [[str(f.name)[:80], int(f.lineno or 0)] for f in own[-5:]]


def call(name: str, payload: str, harness: str | None = None) -> str:
    """Call the notebook's ``name(*args, **kwargs)`` on the decoded ``payload``, with warnings
    silenced (and, outside a grading kernel, the norm libraries blocked), as
    :func:`normedu.grading.calls.call` does;
    with ``harness``, run that kernel-side harness on it instead,
    ``harness(name, *args, **kwargs)`` (it calls the student's code itself, as its check
    did). Returns the encoded result or the exception's name and message, and, for a plain
    call, the arguments as they are after it (a function may modify them in place: the
    checks look)."""
    import contextlib
    import warnings

    from normedu.grading.calls import _blocker
    from normedu.grading.kernel_side import harness as find_harness

    request = json.loads(payload)
    args, kwargs = decode(request["args"]), decode(request["kwargs"])
    out: dict = {}
    try:
        fn = _user_ns()[name]
        run = fn
        if harness is not None:
            run = functools.partial(find_harness(harness), fn)
        blocked = _blocker(True) if harness is None else contextlib.nullcontext()
        with warnings.catch_warnings(), np.errstate(all="ignore"), blocked:
            warnings.simplefilter("ignore")
            out["ok"] = encode(run(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - the student's failure, reported as data
        out["error"] = [type(exc).__name__, str(exc)[:4000], _cell_frames(exc)]
    if harness is None:  # a harness's arguments are not read back (trusted.Proxy._ask)
        out["args"] = encode(args)
        out["kwargs"] = encode(kwargs)
    return json.dumps(out)


def handle(request: dict) -> str:
    """One request of the trusted side: ``{"op": "describe" | "call" | "harness", ...}``."""
    op = request.get("op")
    if op == "describe":
        return describe(request["names"])
    if op == "call":
        return call(request["name"], request["payload"])
    if op == "harness":
        return call(request["name"], request["payload"], harness=str(request["harness"]))
    raise ValueError(f"unknown request {op!r}")


def _recv(sock, limit: int) -> bytes | None:
    """One length-prefixed message (None at the end of the stream)."""
    head = b""
    while len(head) < 8:
        chunk = sock.recv(8 - len(head))
        if not chunk:
            return None
        head += chunk
    size = int.from_bytes(head, "big")
    if size > limit:
        raise PlainValueError(f"a message of {size} bytes")
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            return None
        got += n
    return bytes(data)


def _send(sock, data: bytes) -> None:
    sock.sendall(len(data).to_bytes(8, "big") + data)


def serve(path: str) -> str:
    """Answer the trusted side's requests from a thread of the kernel, over the Unix socket
    the grading worker listens on at ``path`` (in the working copy): a round trip costs a
    fraction of a millisecond, where an execute request costs about 10 ms."""
    import os
    import socket
    import threading

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # The path may pass the 107 bytes a socket address holds: connect by its name from its
    # folder (the kernel's own working copy), and go back to where the notebook was.
    folder, name = os.path.split(path)
    here = os.getcwd()
    os.chdir(folder)
    try:
        sock.connect(name)
    finally:
        os.chdir(here)

    def answer() -> None:
        with sock:
            while True:
                message = _recv(sock, 64 * 2**20)
                if message is None:
                    return
                try:
                    reply = handle(json.loads(message))
                except Exception as exc:  # noqa: BLE001 - reported, the trusted side fails it
                    reply = json.dumps({"failed": f"{type(exc).__name__}: {exc}"[:2000]})
                _send(sock, reply.encode())

    threading.Thread(target=answer, daemon=True, name="normedu-grader").start()
    return json.dumps("serving")
