"""What the benchmark measures: ops, implementations, passes, dtypes, presets, and one
zero-argument callable per variant.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..conventions import DEFAULT_EPS

__all__ = [
    "OPS",
    "IMPLS",
    "PASSES",
    "DTYPES",
    "STORED_NAME",
    "EPS",
    "ROW_KEYS",
    "ALLOCATOR_NOTE",
    "Preset",
    "PRESETS",
    "QUICK_SKIP",
    "Selection",
    "preset_named",
    "make_variant",
    "copy_variants",
]

OPS = ("layernorm", "rmsnorm")
IMPLS = ("eager", "textbook", "compiled", "numpy", "fast", "fast_out")
PASSES = ("fwd", "fwdbwd")
DTYPES = ("float32", "bfloat16", "float16")
#: Name of the stored GPU result: ``results/gpu/bench.json``.
STORED_NAME = "bench"
#: The eps every variant runs with: the course default.
EPS = DEFAULT_EPS
ROW_KEYS = (
    "op",
    "impl",
    "pass_",
    "dtype",
    "n",
    "d",
    "median_s",
    "min_s",
    "max_s",
    "reps",
    "gbps",
    "frac_of_copy",
    "compile_s",
    "frac_best",
)
ALLOCATOR_NOTE = (
    "CPU: fresh large outputs are mmap-ed by glibc (mmap threshold <= 32 MiB), so the first "
    "write to each 4 KiB page faults and the operating system zeroes it; 'copy' writes into a "
    "preallocated tensor, 'clone' into a fresh one, and 'fast_out' is 'fast' with a "
    "preallocated output."
)


@dataclass(frozen=True)
class Preset:
    """Repetitions and shapes of a benchmark run: :data:`PRESETS` holds the named ones, and
    :meth:`override` changes some of a named one's values for one run."""

    #: untimed calls after the first call (which is itself untimed as a sample)
    warmup: int
    reps: int
    #: (N, D) of every measured input
    shapes: tuple[tuple[int, int], ...]
    #: target duration (s) of one CUDA sample; each sample repeats the call to reach it.
    cuda_sample_s: float = 2e-3
    #: seconds of timed samples per variant: a slower variant gets fewer than ``reps`` (the
    #: unfused NumPy forward takes 0.4 s a call at the quick shape), but at least ``min_reps``.
    #: None: every variant gets exactly ``reps`` (what reps given to :meth:`override` get).
    budget_s: float | None = None
    min_reps: int = 5
    #: recorded as the run's ``meta["preset"]``: the :data:`PRESETS` key it comes from
    name: str = "custom"

    def __post_init__(self) -> None:
        shapes = []
        for s in self.shapes:
            if len(s) != 2 or any(int(v) != v or v <= 0 for v in s):
                raise ValueError(f"each shape must be (N, D) with positive integers, got {s!r}")
            shapes.append((int(s[0]), int(s[1])))
        if not shapes:
            raise ValueError("shapes must not be empty")
        object.__setattr__(self, "shapes", tuple(shapes))  # lists in, hashable tuples kept
        if self.reps < 1 or self.warmup < 0:
            raise ValueError(
                f"need reps >= 1 and warmup >= 0, got reps={self.reps}, warmup={self.warmup}"
            )

    def override(
        self,
        shapes: Sequence[tuple[int, int]] | None = None,
        warmup: int | None = None,
        reps: int | None = None,
    ) -> Preset:
        """This preset with the values given (None keeps the preset's). Reps given here are
        exact: the time budget that would give slow variants fewer is dropped."""
        changes: dict[str, Any] = {}
        if shapes is not None:
            changes["shapes"] = tuple(tuple(s) for s in shapes)
        if warmup is not None:
            changes["warmup"] = int(warmup)
        if reps is not None:
            changes.update(reps=int(reps), budget_s=None)
        return replace(self, **changes)


PRESETS: dict[str, Preset] = {
    "quick": Preset(warmup=0, reps=9, shapes=((2048, 4096),), budget_s=1.0, name="quick"),
    "full": Preset(
        warmup=3,
        reps=25,
        shapes=((8192, 768), (8192, 2048), (8192, 4096), (4096, 8192), (2048, 16384)),
        budget_s=3.0,
        name="full",
    ),
}


def preset_named(preset: Preset | str) -> Preset:
    """``preset`` itself, or the :data:`PRESETS` entry of that name."""
    if isinstance(preset, Preset):
        return preset
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {tuple(PRESETS)}, got {preset!r}")
    return PRESETS[preset]


def _choice(name: str, values: Sequence[str] | str, allowed: Sequence[str]) -> tuple[str, ...]:
    values = (values,) if isinstance(values, str) else tuple(values)
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ValueError(f"{name} must be a non-empty subset of {tuple(allowed)}, got {values}")
    return values


@dataclass(frozen=True)
class Selection:
    """Which variants a run measures: subsets of :data:`OPS`, :data:`IMPLS`, :data:`PASSES`
    and :data:`DTYPES` (every combination), less the ``"impl/pass"`` variants in ``skip``
    (e.g. :data:`QUICK_SKIP`). Lists are kept as tuples, so a selection is hashable."""

    ops: tuple[str, ...] = OPS
    impls: tuple[str, ...] = ("eager", "textbook", "compiled")
    passes: tuple[str, ...] = ("fwd",)
    dtypes: tuple[str, ...] = ("float32",)
    skip: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, allowed in (
            ("ops", OPS),
            ("impls", IMPLS),
            ("passes", PASSES),
            ("dtypes", DTYPES),
        ):
            object.__setattr__(self, name, _choice(name, getattr(self, name), allowed))
        object.__setattr__(self, "skip", tuple(self.skip))


#: What ``python -m normedu.bench --quick`` and the book leave out: the unfused backwards
#: (NumPy, textbook) take about a second per call at the quick shape and teach nothing new
#: about speed.
QUICK_SKIP = ("numpy/fwdbwd", "textbook/fwdbwd")


@functools.cache
def _compiled_textbook(op: str):
    import torch

    from .. import fast, nn

    fast.raise_recompile_limit()

    fn = nn.layer_norm if op == "layernorm" else nn.rms_norm
    return torch.compile(fn, dynamic=False)


def make_variant(op: str, impl: str, pass_: str, x, w, b, dy, out) -> Callable[[], Any] | None:
    """A zero-argument callable running one variant, or None if it does not exist."""
    import torch
    import torch.nn.functional as F

    from .. import fast, functional, nn

    d = x.shape[-1]
    if impl == "numpy":
        if x.dtype not in (torch.float32, torch.float64):
            return None
        xn, wn, bn, dyn = (t.detach().cpu().numpy() for t in (x, w, b, dy))
        if op == "layernorm":
            if pass_ == "fwd":
                return lambda: functional.layer_norm(xn, wn, bn, EPS)

            def run_ln():
                functional.layer_norm(xn, wn, bn, EPS)
                return functional.layer_norm_backward(dyn, xn, wn, EPS)

            return run_ln
        if pass_ == "fwd":
            return lambda: functional.rms_norm(xn, wn, EPS)

        def run_rms():
            functional.rms_norm(xn, wn, EPS)
            return functional.rms_norm_backward(dyn, xn, wn, EPS)

        return run_rms

    if impl == "fast_out":
        if pass_ != "fwd":
            return None
        if op == "layernorm":
            return lambda: fast.layer_norm(x, w, b, EPS, out=out)
        return lambda: fast.rms_norm(x, w, EPS, out=out)

    fns = {
        ("layernorm", "eager"): lambda x_, w_, b_: F.layer_norm(x_, (d,), w_, b_, EPS),
        ("rmsnorm", "eager"): lambda x_, w_, b_: F.rms_norm(x_, (d,), w_, EPS),
        ("layernorm", "textbook"): lambda x_, w_, b_: nn.layer_norm(x_, w_, b_, EPS),
        ("rmsnorm", "textbook"): lambda x_, w_, b_: nn.rms_norm(x_, w_, EPS),
        ("layernorm", "fast"): lambda x_, w_, b_: fast.layer_norm(x_, w_, b_, EPS),
        ("rmsnorm", "fast"): lambda x_, w_, b_: fast.rms_norm(x_, w_, EPS),
    }
    if impl == "compiled":
        comp = _compiled_textbook(op)
        if op == "layernorm":
            fn = lambda x_, w_, b_: comp(x_, w_, b_, EPS)  # noqa: E731
        else:
            fn = lambda x_, w_, b_: comp(x_, w_, EPS)  # noqa: E731
    else:
        fn = fns[(op, impl)]
    if pass_ == "fwd":
        return lambda: fn(x, w, b)
    xg, wg, bg = (t.detach().clone().requires_grad_(True) for t in (x, w, b))

    def run_fwdbwd():
        xg.grad = wg.grad = bg.grad = None
        fn(xg, wg, bg).backward(dy)

    return run_fwdbwd


# --------------------------------------------------------------------------- timing


def copy_variants(x) -> list[tuple[dict[str, Any], Callable[[], Any], bool]]:
    """The two copies: into a preallocated tensor (the roofline) and into a fresh one."""
    import torch

    dst = torch.empty_like(x)
    return [
        ({"op": "copy", "impl": "copy", "pass_": "fwd"}, lambda: dst.copy_(x), False),
        ({"op": "copy", "impl": "clone", "pass_": "fwd"}, lambda: x.clone(), False),
    ]
