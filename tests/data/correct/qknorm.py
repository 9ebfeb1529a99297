"""Correct ``qknorm`` answers (see the package's docstring): einsum with a log-sum-exp
softmax, a loop over the heads with 2-D matrices, and float64 arithmetic cast back at the end."""

_EINSUM_LSE = """import numpy as np


def qk_norm_attention(q, k, v, g_q, g_k, eps=1e-6, causal=False):
    if q.shape != k.shape or k.shape != v.shape:
        raise ValueError("q, k, v: shapes differ")
    d = q.shape[-1]
    if np.shape(g_q) != (d,) or np.shape(g_k) != (d,):
        raise ValueError("gains must have shape (Dh,)")
    qh = q * (np.mean(q * q, axis=-1, keepdims=True) + eps) ** -0.5 * g_q
    kh = k * (np.mean(k * k, axis=-1, keepdims=True) + eps) ** -0.5 * g_k
    s = np.einsum("...id,...jd->...ij", qh, kh) / np.sqrt(d)
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n))) > 0, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    log_w = s - m - np.log(np.exp(s - m).sum(axis=-1, keepdims=True))
    return np.einsum("...ij,...jd->...id", np.exp(log_w), v).astype(q.dtype)
"""

_LOOP_HEADS = """import numpy as np


def qk_norm_attention(q, k, v, g_q, g_k, eps=1e-6, causal=False):
    if not (q.shape == k.shape and q.shape == v.shape):
        raise ValueError(f"shapes {q.shape}, {k.shape}, {v.shape} differ")
    B, H, T, Dh = q.shape
    for g in (g_q, g_k):
        if np.asarray(g).shape != (Dh,):
            raise ValueError(f"a gain has shape {np.asarray(g).shape}, expected ({Dh},)")
    out = np.empty_like(q)
    allowed = np.arange(T)[None, :] <= np.arange(T)[:, None]
    for b in range(B):
        for h in range(H):
            Q, K, V = q[b, h], k[b, h], v[b, h]
            rq = np.sqrt(np.linalg.norm(Q, axis=1, keepdims=True) ** 2 / Dh + eps)
            rk = np.sqrt(np.linalg.norm(K, axis=1, keepdims=True) ** 2 / Dh + eps)
            S = (Q / rq * g_q) @ (K / rk * g_k).T / np.sqrt(Dh)
            if causal:
                S[~allowed] = -np.inf
            P = np.exp(S - np.max(S, axis=1, keepdims=True))
            P /= np.sum(P, axis=1, keepdims=True)
            out[b, h] = P @ V
    return out
"""

_FLOAT64 = """import numpy as np


def qk_norm_attention(q, k, v, g_q, g_k, eps=1e-6, causal=False):
    shapes = {q.shape, k.shape, v.shape}
    if len(shapes) != 1:
        raise ValueError(f"q, k and v must share one shape, got {sorted(shapes)}")
    dh = q.shape[-1]
    if g_q.shape != (dh,) or g_k.shape != (dh,):
        raise ValueError(f"g_q {g_q.shape} and g_k {g_k.shape} must be ({dh},)")
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))

    def norm(z, g):
        return z / np.sqrt((z ** 2).sum(axis=-1, keepdims=True) / dh + eps) * g.astype(np.float64)

    scores = np.matmul(norm(q64, g_q), norm(k64, g_k).transpose(0, 1, 3, 2)) / dh ** 0.5
    if causal:
        t = scores.shape[-1]
        keep = np.tri(t, dtype=bool)
        top = np.where(keep, scores, -np.inf).max(axis=-1, keepdims=True)
        w = np.where(keep, np.exp(np.where(keep, scores, top) - top), 0.0)
    else:
        w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.matmul(w / w.sum(axis=-1, keepdims=True), v64).astype(q.dtype)
"""

VARIANTS = {
    "einsum_logsumexp": {"qk_norm_attention": _EINSUM_LSE},
    "loop_over_heads": {"qk_norm_attention": _LOOP_HEADS},
    "float64_then_cast": {"qk_norm_attention": _FLOAT64},
}
