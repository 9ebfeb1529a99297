"""Shortcut hand-ins (issue 31): answers that do no work and get past the in-kernel guard.

``SHORTCUTS[name]`` is ``(construct, {assignment: {answer cell grade_id: source}})``: every
answer cell of the assignment replaced by the source, and the construct that the answer
policy (:mod:`normedu.course.policy`) must name. Modelled on an independent tester's held-out
hand-ins for dyt and qknorm, which got full marks through the real autograde path; the
layernorm ones are the same tricks on layernorm's functions.
"""

_LN_DICT_REF = """import normedu.functional as _nf

_IMPL = {"f": _nf.layer_norm, "b": _nf.layer_norm_backward}
del _nf


def layernorm_forward(x, gamma, beta, eps=1e-5):
    return _IMPL["f"](x, gamma, beta, eps)


def layernorm_backward(dout, x, gamma, eps=1e-5):
    return _IMPL["b"](dout, x, gamma, eps)


layernorm_backward_staged = layernorm_backward
"""

# The grader's own helpers (not blocked: they are no norm entry point), by built names.
_LN_STRING_IMPORT = """def _lib():
    return __import__("normedu.grading." + "diagnose", fromlist=["_"])


def layernorm_forward(x, gamma, beta, eps=1e-5):
    return getattr(_lib(), "norm" + "alize")(x, -1, gamma, beta, eps).astype(x.dtype)


def layernorm_backward(dout, x, gamma, eps=1e-5):
    lib, d = _lib(), x.shape[-1]
    x_hat = getattr(lib, "norm" + "alize")(x, -1, None, None, eps)
    dx = getattr(lib, "normalize" + "_backward")(dout, x, -1, gamma, eps)
    dgamma = (dout * x_hat).reshape(-1, d).sum(axis=0)
    dbeta = dout.reshape(-1, d).sum(axis=0)
    return dx.astype(x.dtype), dgamma.astype(x.dtype), dbeta.astype(x.dtype)


layernorm_backward_staged = layernorm_backward
"""

_LN_GUARD_PATCH = """import contextlib

import normedu.functional as F
import normedu.grading.guard as _guard

_guard.find_shortcuts = lambda *a, **k: []
_guard.library_blocked = contextlib.nullcontext
_REF_F, _REF_B = F.layer_norm, F.layer_norm_backward


def layernorm_forward(x, gamma, beta, eps=1e-5):
    return _REF_F(x, gamma, beta, eps)


def layernorm_backward(dout, x, gamma, eps=1e-5):
    return _REF_B(dout, x, gamma, eps)


layernorm_backward_staged = layernorm_backward
"""

# torch's autograd does the backward (no derivation), torch held in a dict.
_LN_TORCH_DICT = """import numpy as np

_M = {"t": __import__("torch")}


def _t(a):
    return _M["t"].from_numpy(np.asarray(a, dtype=np.float64))


def _ln(x, gamma, beta, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return gamma * (x - mu) / (var + eps).sqrt() + beta


def layernorm_forward(x, gamma, beta, eps=1e-5):
    return _ln(_t(x), _t(gamma), _t(beta), eps).numpy().astype(x.dtype)


def layernorm_backward(dout, x, gamma, eps=1e-5):
    T = _M["t"]
    xt, gt = _t(x).requires_grad_(), _t(gamma).requires_grad_()
    bt = T.zeros(x.shape[-1], dtype=T.float64, requires_grad=True)
    _ln(xt, gt, bt, eps).backward(_t(dout))
    dt = x.dtype
    return xt.grad.numpy().astype(dt), gt.grad.numpy().astype(dt), bt.grad.numpy().astype(dt)


layernorm_backward_staged = layernorm_backward
"""

_DYT_DICT_REF = """import normedu.functional as _nf

_IMPL = {"f": _nf.dyt, "b": _nf.dyt_backward}
del _nf


def dyt_forward(x, alpha, gamma, beta):
    return _IMPL["f"](x, alpha, gamma, beta)


def dyt_backward(dout, x, alpha, gamma):
    return _IMPL["b"](dout, x, alpha, gamma)
"""

# The reference reached through the module the course's own test cells bound (``grade``), no
# import in the answer at all, captured in a dict (the in-kernel guard sees no ``grade``).
_LN_COURSE_NAME = """_R = {"b": grade.ref.layer_norm_backward}


def layernorm_backward(dout, x, gamma, eps=1e-5):
    return _R["b"](dout, x, gamma, eps)
"""


def _ln(source: str) -> dict[str, str]:
    return {
        g: source for g in ("layernorm_forward", "layernorm_backward_staged", "layernorm_backward")
    }


#: {name: (construct the policy names, {assignment: {grade_id: source}})}
SHORTCUTS = {
    "dict_ref": ("normedu.functional", {"layernorm": _ln(_LN_DICT_REF)}),
    "string_import": ("__import__", {"layernorm": _ln(_LN_STRING_IMPORT)}),
    "guard_patch": ("contextlib", {"layernorm": _ln(_LN_GUARD_PATCH)}),
    "torch_dict": ("__import__", {"layernorm": _ln(_LN_TORCH_DICT)}),
    "dyt_dict_ref": (
        "normedu.functional",
        {"dyt": {"dyt_forward": _DYT_DICT_REF, "dyt_backward": _DYT_DICT_REF}},
    ),
    "course_name": ("grade", {"layernorm": {"layernorm_backward": _LN_COURSE_NAME}}),
}
