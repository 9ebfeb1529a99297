"""Benchmark suite: how close each LayerNorm/RMSNorm implementation gets to memory bandwidth.

Normalization is memory-bound: its time floor is the bytes it must move divided by the memory
bandwidth. The suite measures, in one run and on one device:

* the device's achievable bandwidth, as a large copy ``dst.copy_(x)`` into a preallocated
  ``dst`` (and, to show the CPU allocator effect, ``x.clone()`` into a fresh tensor);
* for each op (``"layernorm"``, ``"rmsnorm"``), implementation, pass, dtype and shape: the
  median, min and max time of ``reps`` timed calls after the first call and ``warmup`` more
  untimed ones (the first call is timed apart: it includes compilation; with a preset's
  ``reps``, a variant whose samples would outlast the preset's ``budget_s`` gets fewer, at
  least ``min_reps``, as its row's ``reps`` records), the effective
  bandwidth ``gbps = ideal bytes / median`` and its fraction of the copy bandwidth measured at
  the same shape and dtype (``frac_of_copy``, medians; ``frac_best``, fastest call against
  fastest copy, the robust estimate on a machine shared with other work).

Implementations (``impls``):

========== ===================================================================================
eager      ``torch.nn.functional.layer_norm`` / ``rms_norm``: PyTorch's own kernels
textbook   :func:`normedu.nn.layer_norm` / ``rms_norm``: one torch op per line, autograd backward
compiled   the textbook code through ``torch.compile`` (Inductor; autograd backward compiled too)
numpy      :mod:`normedu.functional`: NumPy forward and hand-written backward (not bfloat16)
fast       :mod:`normedu.fast`: fused compiled kernels, hand-written fused backward
fast_out   ``fast`` writing into a preallocated output (``out=``; forward only)
========== ===================================================================================

Passes: ``"fwd"`` (inference: nothing requires grad) and ``"fwdbwd"`` (forward + backward with
a fixed random upstream gradient; gradients of x, weight and bias). Ideal bytes: forward reads x
and writes y, ``2*N*D*itemsize``; forward + backward adds reading x and dy and writing dx,
``5*N*D*itemsize`` in all. Parameters (D elements) are ignored.

Honesty rules the code follows:

* Timing is :mod:`normedu.timing`'s. Every timed call of one shape/dtype is interleaved
  round-robin with the others (and with the copy), so a machine whose load changes during
  the run slows every variant alike.
* The first call of each variant is timed separately: for the compiled ones it includes the
  compilation, reported as ``compile_s = first call - median`` (0.0 for variants that do not
  compile). Compiled code is cached per process, so a second run reports about zero.
* On CUDA each sample is bracketed by CUDA events and synchronized; each sample runs the
  variant several times back to back (``inner``, sized to about 2 ms) so that Python launch
  overhead overlaps GPU work; the time reported is per call. For shapes whose kernel takes
  less than the launch overhead (a few tens of µs) the overhead is what gets measured: that is
  what a Python caller pays too.
* On a CPU a fresh large output is ``mmap``-ed by glibc (its mmap threshold is at most 32 MiB),
  so the first write to each page faults and the operating system zeroes it. Every variant but
  ``fast_out`` pays this, as a model would; ``copy`` vs ``clone`` and ``fast`` vs ``fast_out``
  show its size.

Use from Python::

    from normedu.bench import PRESETS, Selection, run_benchmark
    res = run_benchmark(PRESETS["quick"], Selection(impls=("eager", "fast")))
    res.rows(); res.ratio("eager", 2048, 4096); res.copy_gbps; res.save("bench-out/bench.json")

or from the shell: ``python -m normedu.bench --quick`` (see :func:`main`).

Modules: :mod:`.variants` (what is measured: ops, implementations, passes, dtypes, presets),
:mod:`.traffic` (the bytes model), :mod:`.runner` (the run; timing from
:mod:`normedu.timing`), :mod:`.report` (:class:`BenchResult` and the Markdown tables),
:mod:`.cli` (the command line).
"""

from .cli import bf16_supported, main
from .report import (
    BenchResult,
    compile_markdown,
    ratios_markdown,
    repetitions_note,
    traffic_markdown,
)
from .runner import BOOK_RECORD, book_run, measure_book_run, run_benchmark
from .traffic import OpTraffic, aten_traffic, floor_seconds, ideal_bytes, itemsize
from .variants import (
    ALLOCATOR_NOTE,
    DTYPES,
    EPS,
    IMPLS,
    OPS,
    PASSES,
    PRESETS,
    QUICK_SKIP,
    ROW_KEYS,
    STORED_NAME,
    Preset,
    Selection,
)

__all__ = [
    "ALLOCATOR_NOTE",
    "BenchResult",
    "DTYPES",
    "EPS",
    "IMPLS",
    "OPS",
    "OpTraffic",
    "PASSES",
    "PRESETS",
    "Preset",
    "QUICK_SKIP",
    "ROW_KEYS",
    "STORED_NAME",
    "Selection",
    "aten_traffic",
    "bf16_supported",
    "book_run",
    "measure_book_run",
    "BOOK_RECORD",
    "compile_markdown",
    "floor_seconds",
    "ideal_bytes",
    "itemsize",
    "main",
    "ratios_markdown",
    "repetitions_note",
    "run_benchmark",
    "traffic_markdown",
]
