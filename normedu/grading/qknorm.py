# ruff: noqa: E501  (a table's causes are one line each: a message reads best beside its variant)
"""Checks for the ``qknorm`` assignment (attention over RMS-normalized queries and keys, numpy).

Student function:
- ``qk_norm_attention(q, k, v, g_q, g_k, eps=1e-6, causal=False) -> out``: q, k, v of one
  shape (B, H, T, Dh) and one dtype, g_q and g_k (Dh,); ``q̂ = q / sqrt(mean(q², last axis) +
  eps) · g_q`` (likewise k̂), ``out = softmax(q̂ k̂ᵀ / √Dh, last axis) v`` in q's dtype; with
  ``causal=True`` query i gives weight exactly 0 to every j > i. A row of the softmax stays
  finite for any finite scores (tested in float64 with gains of 1e4 and more). q, k, v of
  different shapes or a gain of the wrong shape must raise a ``ValueError`` (any message),
  graded in its own visible cell (:func:`check_errors`).

The output is not a norm of one input, but :class:`~normedu.grading.normcheck.NormTable` takes
it as it is: five named inputs (q first, so labels and dtypes follow q), the options ``eps``
and ``causal``, and ``nonfinite``: a NaN in the output is diagnosed against the causes (a naive
softmax, a masked diagonal) instead of failing with the generic division-by-zero message.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from normedu import functional as ref
from normedu.conventions import QK_NORM_EPS
from normedu.grading.normcheck import NormTable, Probe
from normedu.grading.validation import expect_value_error

__all__ = [
    "check_shapes",
    "check_values",
    "check_causal",
    "check_large_gains",
    "check_errors",
    "check_on",
]

OVERFLOW = "a row of your softmax is NaN/inf: with large gains the scores q̂·k̂/√Dh are huge, exp overflows to inf (or every weight of a row underflows to 0, and 0/0 is NaN). Subtract each row's max before exp: softmax(s) = exp(s − max s) / Σ exp(s − max s), with the masked positions already at −inf"
FILL = "masked scores must be −inf (np.where(future, -np.inf, s)), not a large negative constant (−1e4, −1e9, np.finfo(np.float16).min as in some public attention code): with large gains the real scores fall below your constant, and the future positions get the weight"
HEADS = "the RMS is taken over each head's Dh features, one per query, per key and per head: mean(q², axis=-1, keepdims=True) on (B, H, T, Dh), not over all heads' features together (OLMo normalizes q and k of shape (B, T, H·Dh) before splitting them into heads; that is another model)"
LAYERNORM = "QK-norm here is an RMSNorm of q and k: q / sqrt(mean(q²) + eps) · g_q, with no mean subtracted; a LayerNorm on q and k ((q − mean) / std, as some public models use) is another norm"
TEMPERATURE = "the scores are q̂ k̂ᵀ / √Dh with q̂ and k̂ RMS-normalized: cosine similarities (q and k divided by their L2 norm) times a temperature (a learnable logit scale, initialized at 1 or 10 in public cosine-attention code) are another model"
MULTIPLY = "the mask is applied after exp, with the max taken over the whole row, future positions included: with a large future score exp(s − max) underflows to 0 at every past position and the row is 0/0 = NaN. Mask the scores first (future at −inf), then subtract the max of what is left"
SHAPES = "q, k and v must have one shape (B, H, T, Dh) and g_q, g_k the shape (Dh,): check the shapes and raise a ValueError (a message naming them helps whoever reads it)."


def _softmax(s: np.ndarray, axis: int = -1, naive: bool = False) -> np.ndarray:
    e = np.exp(s if naive else s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _attn(
    p: Probe,
    *,
    norm_axis: int | tuple[int, ...] | None = -1,
    l2: bool = False,
    center: bool = False,
    normalize: bool = True,
    scale: str = "sqrt_dh",
    eps_outside: bool = False,
    gain_first: bool = False,
    norm_v: bool = False,
    softmax_axis: int = -1,
    naive: bool = False,
    mask: str = "future",
    fill: float = -np.inf,
    layernorm: bool = False,
) -> np.ndarray:
    """QK-norm attention with one switch per mistake (correct with the defaults). ``mask``:
    "future" (j > i set to ``fill``), "diag" (j >= i), "next" (j > i + 1: one future position
    seen), "past" (j < i: the wrong triangle), "after" (the weights of j > i zeroed after the
    softmax), "multiply" (exp of the scores minus the max over the whole row, times the lower
    triangle), "none"; used only with ``causal``. ``scale``: "sqrt_dh", "dh", "sqrt_t",
    "none"; ``center``: LayerNorm's centred variance; ``normalize=False``: q̂ = q·g_q."""
    eps, dh, t = p.eps, p.q.shape[-1], p.q.shape[-2]

    def rms(z: np.ndarray, g) -> np.ndarray:
        if not normalize:
            return z * g
        if layernorm:
            c = z - z.mean(norm_axis, keepdims=True)
            return c / np.sqrt((c * c).mean(norm_axis, keepdims=True) + eps) * g
        if center:  # divided by the standard deviation (np.var), the numerator as given
            return z / np.sqrt(z.var(norm_axis, keepdims=True) + eps) * g
        if gain_first:
            z = z * g
        ms = (z * z).sum(norm_axis, keepdims=True) if l2 else (z * z).mean(norm_axis, keepdims=True)
        den = np.sqrt(ms) + eps if eps_outside else np.sqrt(ms + eps)
        return z / den if gain_first else z / den * g

    s = rms(p.q, p.g_q) @ np.swapaxes(rms(p.k, p.g_k), -1, -2)
    s = (
        s
        / {"sqrt_dh": np.sqrt(dh), "dh": dh, "sqrt_t": np.sqrt(t), "none": 1.0, "temp10": 0.1}[
            scale
        ]
    )
    v = rms(p.v, 1.0) if norm_v else p.v
    if not p.causal or mask in ("none", "after", "multiply"):
        w = _softmax(s, softmax_axis, naive)
        if p.causal and mask == "after":
            w = np.where(np.tri(t, dtype=bool), w, 0.0)
        if p.causal and mask == "multiply":
            w = np.exp(s - s.max(axis=-1, keepdims=True)) * np.tri(t)
            w = w / w.sum(axis=-1, keepdims=True)
        return w @ v
    offset = {"future": 0, "diag": -1, "next": 1}
    keep = ~np.tri(t, k=-1, dtype=bool) if mask == "past" else np.tri(t, k=offset[mask], dtype=bool)
    return _softmax(np.where(keep, s, fill), softmax_axis, naive) @ v


QKNORM = NormTable(
    inputs=("q", "k", "v", "g_q", "g_k"),
    reference=ref.qk_norm_attention,
    outputs=(("out", "q"),),
    causes=[
        ("q and k are not normalized: q̂ = q / sqrt(mean(q², axis=-1, keepdims=True) + eps) · g_q (likewise k̂), not q · g_q", lambda p: _attn(p, normalize=False)),
        ("the RMS is taken over the head dimension Dh (the last axis), one per query and per key: mean(q², axis=-1, keepdims=True), not over the T positions (axis -2)", lambda p: _attn(p, norm_axis=-2)),
        ("the RMS is taken over the head dimension Dh alone (axis=-1), one per query and per key, not over (T, Dh) or the whole array", lambda p: _attn(p, norm_axis=(-2, -1)), lambda p: _attn(p, norm_axis=None)),
        (HEADS, lambda p: _attn(p, norm_axis=(-3, -1) if p.q.ndim >= 3 else "no head axis")),
        ("QK-norm divides by the root mean square sqrt(mean(q²) + eps), not by the standard deviation sqrt(np.var(q) + eps): np.var subtracts the mean first, as LayerNorm does", lambda p: _attn(p, center=True)),
        (LAYERNORM, lambda p: _attn(p, layernorm=True)),
        (TEMPERATURE, lambda p: _attn(p, l2=True, scale="temp10"), lambda p: _attn(p, l2=True, scale="none")),
        ("you divided by the L2 norm sqrt(Σq²); QK-norm divides by the root MEAN square sqrt(mean(q²) + ε), which is √Dh times smaller", lambda p: _attn(p, l2=True), lambda p: _attn(p, l2=True, eps_outside=True)),
        ("the scores must be divided by √Dh: scores = q̂ k̂ᵀ / √Dh", lambda p: _attn(p, scale="none")),
        ("the scores are divided by √Dh, the square root of the head dimension, not by Dh itself", lambda p: _attn(p, scale="dh")),
        ("the scores are divided by √Dh, Dh = q.shape[-1] (the head dimension), not by √T (T = q.shape[-2], the number of positions)", lambda p: _attn(p, scale="sqrt_t")),
        ("ε must be inside the square root: q / sqrt(mean(q²) + ε), not q / (rms + ε)", lambda p: _attn(p, eps_outside=True)),
        ("the gains multiply AFTER normalizing: q̂ = q / rms(q) · g_q; multiplied before, they are normalized away (partly)", lambda p: _attn(p, gain_first=True)),
        ("v is not normalized: only the queries and the keys are (out = softmax(scores) v with v as it is)", lambda p: _attn(p, norm_v=True), lambda p: _attn(p, norm_v=True, gain_first=True)),
        ("the softmax runs over the keys (the last axis of scores, axis=-1): each query's weights sum to 1, not each key's", lambda p: _attn(p, softmax_axis=-2)),
        ("the causal mask hides only the future (j > i); yours also hides the diagonal (j >= i), so query 0 sees nothing: np.triu(..., k=1), or np.tri(T) for the positions kept", lambda p: _attn(p, mask="diag"), lambda p: _attn(p, mask="diag", fill=-1e9)),
        ("the causal mask is off by one: query i sees i + 1 too; mask every j > i (np.triu(..., k=1)), keep j ≤ i (np.tri(T))", lambda p: _attn(p, mask="next")),
        ("the wrong triangle is masked: query i must see the past j ≤ i and not the future j > i (mask np.triu(..., k=1), not np.tril)", lambda p: _attn(p, mask="past")),
        (MULTIPLY, lambda p: _attn(p, mask="multiply")),
        ("the mask must be applied to the scores before the softmax (future scores at −inf): zeroing weights after the softmax leaves rows that no longer sum to 1", lambda p: _attn(p, mask="after")),
        ("with causal=True, query i must give weight exactly 0 to every later position j > i: mask the scores with −inf above the diagonal", lambda p: _attn(p, mask="none")),
        (FILL, lambda p: _attn(p, fill=-1e9), lambda p: _attn(p, fill=-1e4), lambda p: _attn(p, fill=float(np.finfo(np.float16).min))),
        (OVERFLOW, lambda p: _attn(p, naive=True)),
    ],
    eps_ignored="the eps argument is not used (or not inside the square root): divide by sqrt(mean(q²) + eps) with the eps you were given",
    keep_dtype="out must be in q's dtype, e.g. .astype(q.dtype): a float64 value such as np.sqrt(Dh) promotes float32 arrays to float64",
    nonfinite=OVERFLOW,
)  # fmt: skip


def _probe(shape, seed, *, eps=QK_NORM_EPS, causal=False, gain=None, dtype=np.float64) -> Probe:
    """q, k, v normal (std 2, offset 0.3); gains in [0.5, 2) unless ``gain`` fixes them."""
    rng = np.random.default_rng(seed)
    q, k, v = (2.0 * rng.standard_normal(shape) + 0.3 for _ in range(3))
    dh = shape[-1]
    gq, gk = (rng.uniform(0.5, 2.0, dh) if gain is None else np.full(dh, gain) for _ in range(2))
    args = {
        n: a.astype(dtype)
        for n, a in zip(("q", "k", "v", "g_q", "g_k"), (q, k, v, gq, gk), strict=True)
    }
    return Probe(args, {"eps": eps, "causal": causal})


def check_on(
    f, q, k, v, g_q, g_k, eps=QK_NORM_EPS, causal=False, *, rtol=1e-6, atol=1e-8, what=None
):
    """``f(q, k, v, g_q, g_k, eps=eps, causal=causal)`` against the reference on the caller's
    inputs. A float64 probe that fails is diagnosed against the known mistakes; a float32 one
    only compared (pass a looser ``rtol``/``atol``)."""
    probe = Probe({"q": q, "k": k, "v": v, "g_q": g_q, "g_k": g_k}, {"eps": eps, "causal": causal})
    QKNORM.check_forward(f, probe, rtol=rtol, atol=atol, what=what)


def check_shapes(f: Callable) -> None:
    """out has q's shape and dtype: (2, 3, 5, 8) and (1, 2, 4, 6), float64 and float32."""
    probes = [
        _probe(s, 1, dtype=d)
        for s in ((2, 3, 5, 8), (1, 2, 4, 6))
        for d in (np.float64, np.float32)
    ]
    QKNORM.check_shapes(f, probes)


def check_values(f: Callable) -> None:
    """Against the reference: two shapes, eps = 0.3, Dh = 1 and T = 1, float32 input."""
    for probe in (
        _probe((2, 3, 5, 8), 2),
        _probe((1, 2, 6, 4), 3, eps=0.3),
        _probe((2, 1, 4, 1), 4),
        _probe((2, 2, 1, 5), 5),
    ):
        QKNORM.check_forward(f, probe)
    QKNORM.check_forward(f, _probe((2, 4, 8, 16), 6, dtype=np.float32), rtol=1e-4, atol=1e-5)


def _anti_aligned(seed: int, gain: float) -> Probe:
    """Causal, every key pointing against every query (k ≈ −q): with gains of ``gain`` every
    score is about −gain²·√Dh, far below any large negative constant a mask might use."""
    rng = np.random.default_rng(seed)
    shape = (1, 2, 5, 16)
    u = rng.standard_normal(shape[-1])
    q = u + 0.1 * rng.standard_normal(shape)
    k = -u + 0.1 * rng.standard_normal(shape)
    v = rng.standard_normal(shape)
    gains = np.full(shape[-1], gain)
    return Probe(
        {"q": q, "k": k, "v": v, "g_q": gains, "g_k": gains}, {"eps": QK_NORM_EPS, "causal": True}
    )


def check_causal(f: Callable) -> None:
    """causal=True: each query attends to itself and the earlier positions only, at two
    shapes; then with gains of 1e16 and keys opposite to the queries, so that every real score
    is about −4e32, below any large negative constant a mask might use (−1e9, −1e30): the
    contract is weight exactly 0 for ANY finite scores, so the mask must be −inf."""
    QKNORM.check_forward(f, _probe((2, 3, 5, 8), 7, causal=True))
    QKNORM.check_forward(f, _probe((1, 2, 6, 4), 8, causal=True, eps=0.3))
    QKNORM.check_forward(
        f,
        _anti_aligned(9, 1e16),
        what="out with causal=True, gains 1e16 and keys opposite to the queries",
    )


def check_large_gains(f: Callable) -> None:
    """g_q = g_k = 1e4 in float64: scores up to about 1e8; every row must stay finite."""
    QKNORM.check_forward(f, _probe((2, 2, 6, 8), 10, gain=1e4), what="out with g_q = g_k = 1e4")


def check_errors(f: Callable) -> None:
    """k and v with another T than q, and g_q of shape (1,): a ValueError (any message)."""
    p = _probe((1, 2, 4, 6), 11)
    k, v = (np.concatenate([a, a[..., :1, :]], axis=-2) for a in (p.k, p.v))
    expect_value_error(
        f,
        (p.q, k, v, p.g_q, p.g_k),
        "for q of shape (1, 2, 4, 6) and k, v of shape (1, 2, 5, 6)",
        SHAPES,
    )
    expect_value_error(
        f, (p.q, p.k, p.v, np.ones(1), p.g_k), "for g_q of shape (1,) and Dh = 6", SHAPES
    )
