"""Hand-written C kernels for LayerNorm and RMSNorm on a CPU (float32), forward and backward.

The source is ``normedu/csrc/norm_kernels.c``. Forward, per row: one read of ``x`` from
memory, two passes over the now-cached row (mean, then the centred variance), one write of
``y``, and optionally the row's mean and 1/sigma saved for the backward. Backward, per row:
``dx`` from ``x`` and ``dy`` (read once from memory) while ``dweight``/``dbias`` accumulate in
per-thread rows that stay in cache (float32 over blocks of 32 rows, then float64). They differ
from TorchInductor's generated kernels for the same math in two ways that matter for speed:

* **64 independent partial sums** per reduction instead of one vector accumulator, so a pass
  over a cached row is not held up by the latency of each add;
* **streaming (non-temporal) stores** into a caller's preallocated output of at least
  :data:`STREAM_MIN_BYTES`: an ordinary store to a line that is not in cache first reads that
  line (read-for-ownership), a hidden third stream of traffic. Small outputs use ordinary
  stores so that they stay in cache for the next layer.

A *fresh* output (``torch.empty_like``) uses ordinary stores: glibc hands a large allocation
out as new pages from the operating system, whose first write faults and zeroes each 4 KiB
page into the cache, so there is no read-for-ownership left to save. That page-fault cost is
the same for every implementation; :mod:`normedu.bench` measures it as the "clone" row.

The library is compiled at first use with the system C compiler (``$CC``, else ``cc``; the one
torch.compile needs on a CPU anyway), with the first of :data:`FLAG_SETS` that works (``-O3
-march=native -fopenmp`` and 512-bit vectors where the CPU has them), and cached in
``$NORMEDU_CACHE_DIR`` (default ``~/.cache/normedu``) under a hash of the source, the flags and
the CPU. No compiler, or a failed build, is not an error: :func:`available` is then False and
:mod:`normedu.fast` uses its compiled kernels; :func:`status` says why.

Shapes: ``x`` (N, D) contiguous float32 on the CPU; ``w``, ``b`` (D,) float32; ``out`` like x.
Threads: ``torch.get_num_threads()`` at call time.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

__all__ = [
    "available",
    "status",
    "layer_norm_forward",
    "rms_norm_forward",
    "layer_norm_backward",
    "rms_norm_backward",
    "SOURCE",
    "STREAM_MIN_BYTES",
]

SOURCE = Path(__file__).resolve().parent / "csrc" / "norm_kernels.c"

#: Preallocated outputs at least this large get streaming stores (see the module docstring).
#: Measured here at 32 MiB (2048 x 4096 float32): in a tight loop, where the output stays in
#: cache between calls, ordinary stores were as fast; in the benchmark, where other work runs
#: between calls, streaming reached 0.9-1.0 of the copy bandwidth and ordinary stores 0.6-0.8.
#: From 64 MiB on, streaming was 1.4-2x faster in both.
STREAM_MIN_BYTES = 32 << 20

#: Tried in order: the first flag set that compiles is used.
FLAG_SETS = (
    # 512-bit vectors where the CPU has them (gcc defaults to 256 on many x86 cores)
    ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp"),
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-fopenmp"),
    ("-O3",),
)

_STATUS = ["not built yet"]


def _cache_dir() -> Path:
    if os.environ.get("NORMEDU_CACHE_DIR"):
        return Path(os.environ["NORMEDU_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "normedu"


def _cpu_id() -> str:
    # -march=native code is only valid on this CPU: a home folder shared between machines
    # must not hand one machine's build to another.
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        return "".join(lines)
    except OSError:
        return platform.processor()


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _build(cc: str, flags: tuple[str, ...], target: Path) -> str | None:
    """Compile SOURCE into ``target`` atomically; return None on success, else the error."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Build under a temporary name and rename: parallel test workers may build at once.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    except OSError as exc:
        return f"cannot write the cache folder {target.parent} (set NORMEDU_CACHE_DIR): {exc}"
    os.close(fd)
    cmd = [cc, *flags, "-shared", "-fPIC", "-o", tmp, str(SOURCE), "-lm"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        os.unlink(tmp)
        return f"{' '.join(cmd)}: {exc}"
    if r.returncode != 0:
        os.unlink(tmp)
        return f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}"
    os.replace(tmp, target)
    return None


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The loaded kernel library, building it if needed; None if impossible."""
    if os.environ.get("NORMEDU_NO_C_KERNELS"):
        _STATUS[0] = "disabled by NORMEDU_NO_C_KERNELS"
        return None
    cc = _compiler()
    if cc is None:
        _STATUS[0] = "no C compiler found (set CC)"
        return None
    source = SOURCE.read_bytes()
    errors = []
    for flags in FLAG_SETS:
        key = hashlib.sha256(
            b"\0".join([source, " ".join(flags).encode(), cc.encode(), _cpu_id().encode()])
        ).hexdigest()[:16]
        target = _cache_dir() / f"norm_kernels-{key}.so"
        if not target.exists():
            err = _build(cc, flags, target)
            if err is not None:
                errors.append(err)
                continue
        try:
            lib = ctypes.CDLL(str(target))
        except OSError as exc:
            errors.append(f"loading {target}: {exc}")
            continue
        fn = lib.normedu_norm_fwd
        fn.restype = None
        fn.argtypes = (
            [ctypes.c_void_p] * 4
            + [ctypes.c_long] * 2
            + [ctypes.c_float]
            + [ctypes.c_int] * 3
            + [ctypes.c_void_p] * 2
        )
        fn = lib.normedu_norm_bwd
        fn.restype = ctypes.c_int
        fn.argtypes = (
            [ctypes.c_void_p] * 6
            + [ctypes.c_long] * 2
            + [ctypes.c_float]
            + [ctypes.c_int] * 2
            + [ctypes.c_void_p] * 2
        )
        _STATUS[0] = f"built with {cc} {' '.join(flags)} ({target})"
        return lib
    _STATUS[0] = "build failed: " + " | ".join(errors)
    return None


def available() -> bool:
    """True if the C kernels are built (or can be) and loaded on this machine."""
    return _library() is not None


def status() -> str:
    """How the kernels were built, or why they are not available."""
    _library()
    return _STATUS[0]


def _check(x: Tensor, params: dict[str, Tensor | None], out: Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must be (N, D), got shape {tuple(x.shape)}")
    d = x.shape[1]
    for name, t in {"x": x, "out": out, **params}.items():
        if t is None:
            continue
        if t.dtype != torch.float32 or t.device.type != "cpu":
            raise TypeError(f"{name} must be float32 on the CPU, got {t.dtype} on {t.device}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
        if name in params and tuple(t.shape) != (d,):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({d},)")
    if out.shape != x.shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(x.shape)}")


Stats = tuple[Tensor, Tensor]


def _check_stats(stats: Stats | None, n: int) -> tuple[int | None, int | None]:
    """Data pointers of ``(mean, rstd)``, each float32 (N,) on the CPU, or (None, None)."""
    if stats is None:
        return None, None
    for name, t in zip(("mean", "rstd"), stats, strict=True):
        if t.dtype != torch.float32 or t.device.type != "cpu" or tuple(t.shape) != (n,):
            raise ValueError(
                f"{name} must be a float32 CPU tensor of shape ({n},), got {t.dtype} "
                f"{tuple(t.shape)} on {t.device}"
            )
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    return stats[0].data_ptr(), stats[1].data_ptr()


def _run(x, w, b, eps, out, center: bool, stream, stats) -> Tensor:
    lib = _library()
    if lib is None:
        raise RuntimeError(f"normedu's C kernels are not available: {status()}")
    _check(x, {"weight": w, "bias": b}, out)
    n, d = x.shape
    mean_p, rstd_p = _check_stats(stats, n)
    if stream is None:
        stream = out.numel() * 4 >= STREAM_MIN_BYTES
    lib.normedu_norm_fwd(
        x.data_ptr(),
        w.data_ptr(),
        b.data_ptr() if b is not None else None,
        out.data_ptr(),
        n,
        d,
        float(eps),
        int(center),
        int(stream),
        torch.get_num_threads(),
        mean_p,
        rstd_p,
    )
    return out


def layer_norm_forward(
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    eps: float,
    out: Tensor,
    stream: bool | None = None,
    stats: Stats | None = None,
) -> Tensor:
    """y = (x - mean) / sqrt(var + eps) * w (+ b) per row of x (N, D), written into ``out``.

    - stream: use streaming stores (None: when ``out`` has at least STREAM_MIN_BYTES; pass
      False for a fresh output).
    - stats: optional ``(mean, rstd)`` float32 (N,) tensors that receive the row statistics,
      for :func:`layer_norm_backward`.
    """
    return _run(x, w, b, eps, out, True, stream, stats)


def rms_norm_forward(
    x: Tensor,
    w: Tensor,
    eps: float,
    out: Tensor,
    stream: bool | None = None,
    stats: Stats | None = None,
) -> Tensor:
    """y = x / sqrt(mean(x**2) + eps) * w per row of x (N, D), written into ``out``.

    ``stats``: as in :func:`layer_norm_forward` (its mean is left at 0).
    """
    if stats is not None:
        stats[0].zero_()
    return _run(x, w, None, eps, out, False, stream, stats)


def _backward(dy: Tensor, x: Tensor, w: Tensor, eps: float, center: bool, stats: Stats | None):
    lib = _library()
    if lib is None:
        raise RuntimeError(f"normedu's C kernels are not available: {status()}")
    _check(x, {"weight": w}, dy)
    n, d = x.shape
    mean_p, rstd_p = _check_stats(stats, n)
    dx, dw = torch.empty_like(x), torch.empty_like(w)
    db = torch.empty_like(w) if center else None
    threads = torch.get_num_threads()
    rc = lib.normedu_norm_bwd(
        dy.data_ptr(),
        x.data_ptr(),
        w.data_ptr(),
        dx.data_ptr(),
        dw.data_ptr(),
        db.data_ptr() if db is not None else None,
        n,
        d,
        float(eps),
        int(center),
        threads,
        mean_p,
        rstd_p,
    )
    if rc != 0:
        raise MemoryError(f"normedu_norm_bwd could not allocate {threads} x {d} float64 rows")
    return dx, dw, db


def layer_norm_backward(
    dy: Tensor, x: Tensor, w: Tensor, eps: float, stats: Stats | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """``(dx, dweight, dbias)`` of LayerNorm for upstream ``dy`` (N, D); x (N, D); w (D,).

    dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)) with g = dy * w, per row;
    dweight = sum over rows of dy * x_hat; dbias = sum over rows of dy. ``stats``: the
    ``(mean, rstd)`` the forward wrote; None recomputes them from x.
    """
    return _backward(dy, x, w, eps, True, stats)


def rms_norm_backward(
    dy: Tensor, x: Tensor, w: Tensor, eps: float, stats: Stats | None = None
) -> tuple[Tensor, Tensor]:
    """``(dx, dweight)`` of RMSNorm: dx = rstd * (g - x_hat * mean(g * x_hat)), g = dy * w."""
    dx, dw, _ = _backward(dy, x, w, eps, False, stats)
    return dx, dw
