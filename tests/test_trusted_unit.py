"""The trusted side of grading without a kernel (issue 31): the plain-value codec, and test
cells run by :class:`~normedu.course.trusted.TrustedCells` against a stand-in for the
kernel (the kernel-side helpers of :mod:`normedu.course.plain` on a dict namespace)."""

from __future__ import annotations

import base64
import io
import json
import pickle

import numpy as np
import pytest

from normedu.course import plain
from normedu.course.trusted import TrustedCells


def test_plain_values_round_trip_and_keep_dtypes():
    value = {
        "x": np.arange(6, dtype=np.float32).reshape(2, 3),
        "t": (1, 2.5, None, True, "s", np.float64(3.0), [np.int8(4)]),
    }
    back = plain.decode(json.loads(json.dumps(plain.encode(value))))
    assert back["x"].dtype == np.float32 and np.array_equal(back["x"], value["x"])
    assert back["t"][:5] == (1, 2.5, None, True, "s")
    assert isinstance(back["t"][5], np.float64) and back["t"][6][0].dtype == np.int8


def test_an_object_that_lies_crosses_as_its_bytes_or_its_name():
    class Liar(np.ndarray):
        def __eq__(self, other):
            return True

    liar = np.zeros(3).view(Liar)
    back = plain.decode(plain.encode(liar))
    assert type(back) is np.ndarray and not np.array_equal(back, np.ones(3))

    class Tensor:
        def __array__(self, *a, **k):
            return np.ones(3)

    stand_in = plain.decode(plain.encode(Tensor()))
    assert type(stand_in).__name__ == "Tensor" and not hasattr(stand_in, "__array__")


def test_decode_refuses_pickles_and_object_arrays():
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    for payload in (
        {"nd": base64.b64encode(buf.getvalue()).decode()},
        {"nd": base64.b64encode(pickle.dumps(np.zeros(2))).decode()},
        {"nd": 3},
        {"eval": "1"},
        [1, 2],
    ):
        with pytest.raises(plain.PlainValueError):
            plain.decode(payload)


@pytest.fixture
def kernel(monkeypatch):
    """A stand-in for the student's kernel: its namespace, and a requester that runs the
    kernel-side helpers there, as the kernel's thread does (:func:`plain.serve`)."""
    ns: dict = {}
    monkeypatch.setattr(plain, "_user_ns", lambda: ns)

    def request(op):
        return json.loads(plain.handle(json.loads(json.dumps(op))))

    return ns, TrustedCells(request)


def _layernorm(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) + beta


CELL = "from normedu.grading import layernorm as grade\ngrade.check_forward_values(f)\nprint('OK')"


def test_a_right_answer_passes_and_a_stub_fails(kernel):
    ns, cells = kernel
    ns["f"] = _layernorm
    outputs, passed = cells.run(CELL, "t")
    assert passed and outputs == [{"output_type": "stream", "name": "stdout", "text": "OK\n"}]

    def stub(x, gamma, beta, eps=1e-5):
        raise NotImplementedError()

    ns["f"] = stub
    outputs, passed = cells.run(CELL, "t")
    assert not passed and outputs[-1]["ename"] == "GradingError"
    assert "not implemented" in outputs[-1]["evalue"]


def test_a_replaced_numpy_in_the_kernel_changes_nothing(kernel):
    ns, cells = kernel

    import types

    # The student's "np" is a module named numpy: the trusted side imports the real one.
    fake = types.ModuleType("numpy")
    fake.allclose = lambda *a, **k: True
    ns.update(np=fake, f=lambda x, gamma, beta, eps=1e-5: x * 0)
    outputs, passed = cells.run("assert np.allclose(f(np.ones((2, 3)), 1, 0), 1)", "t")
    assert not passed and outputs[-1]["ename"] == "AssertionError"


def test_in_place_changes_come_back_and_a_library_call_fails(kernel):
    ns, cells = kernel

    def modifies(x, gamma, beta, eps=1e-5):
        x -= x.mean(-1, keepdims=True)
        return x

    ns["f"] = modifies
    outputs, passed = cells.run(CELL, "t")
    assert not passed and "modified its input x in place" in outputs[-1]["evalue"]

    import normedu.functional as nf

    ns["f"] = lambda x, gamma, beta, eps=1e-5: nf.layer_norm(x, gamma, beta, eps)
    ns["nf"] = nf
    outputs, passed = cells.run(CELL, "t")
    # Outside a grading kernel (here, in-process) the notebook's guard blocks the call; a
    # grading kernel cannot reach normedu.functional at all (tests/test_reach.py).
    assert not passed and "called normedu.functional.layer_norm" in outputs[-1]["evalue"]


class _AttentionConfig:
    """A model config as public attention code reads it (no head_dim: derived from q)."""

    n_heads = 2
    qk_norm = "rms"


_CONFIG = _AttentionConfig()


def _qk_attention(q, k, v, g_q, g_k, eps=1e-6, causal=False, config=_CONFIG):
    # Written as QK-norm attention is in public model code: sizes read from a config with
    # getattr and a default, and a LayerNorm branch this config never takes.
    dh = getattr(config, "head_dim", None) or q.shape[-1]
    if getattr(config, "qk_norm", "rms") == "ln":  # never taken here
        import torch.nn as nn

        return nn.LayerNorm(dh)(q)

    def rms(z, g):
        return z / np.sqrt(np.mean(z * z, axis=-1, keepdims=True) + eps) * g

    s = rms(q, g_q) @ np.swapaxes(rms(k, g_k), -1, -2) / np.sqrt(dh)
    if causal:
        s = np.where(np.tri(s.shape[-1], dtype=bool), s, -np.inf)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((w / w.sum(axis=-1, keepdims=True)) @ v).astype(q.dtype)


def test_real_qk_norm_code_with_getattr_and_an_unused_layernorm_branch_passes(kernel):
    # Issue 45: such code scored 0/9 (getattr refused; "uses .LayerNorm" for the branch that
    # never runs). What it returns decides; what it merely names does not.
    ns, cells = kernel
    ns["f"] = _qk_attention
    for check in ("check_shapes", "check_values", "check_causal", "check_large_gains"):
        cell = f"from normedu.grading import qknorm as grade\ngrade.{check}(f)"
        outputs, passed = cells.run(cell, check)
        assert passed, outputs


def test_autograde_stops_where_kernels_cannot_be_cut_off_the_network(tmp_path, monkeypatch):
    from normedu.course import namespaces
    from normedu.course.autograde import NetworkIsolationError, autograde
    from normedu.course.config import Course

    monkeypatch.setattr(namespaces, "available", lambda readable: "unshare(CLONE_NEWNET) refused")
    with pytest.raises(NetworkIsolationError, match="--allow-network"):
        autograde(Course(root=tmp_path), "demo")


def _failed(cells, cell: str) -> dict:
    """The error output of test cell ``cell``, which must fail with a check's message."""
    outputs, passed = cells.run(cell, "t")
    assert not passed and outputs[-1]["ename"] == "GradingError", outputs
    return outputs[-1]


def test_a_passable_function_crosses_by_name_and_nothing_else_does():
    from normedu.grading import drift

    for fn in (np.sin, drift.relu):
        assert plain.decode(json.loads(json.dumps(plain.encode(fn)))) is fn
    # Not registered: a name only (a stand-in), never the function.
    assert not callable(plain.decode(plain.encode(np.cos)))
    for key in ("os:system", "normedu.grading.drift:make_weights", "builtins:eval", 3):
        with pytest.raises(plain.PlainValueError):
            plain.decode({"fn": key})


STACK = "from normedu.grading import drift as grade\ngrade.check_forward_stack(f)"
RELU = (
    "import numpy as np\nfrom normedu.grading import drift as grade\n"
    "grade.check_stack_on(f, np.ones((2, 3)) - 1.5, [np.eye(3)], activation=grade.relu)"
)


def test_the_activation_reaches_the_students_stack(kernel):
    ns, cells = kernel

    def stack(x, weights, activation=np.tanh):
        out = []
        for w in weights:
            x = activation(x @ w)
            out.append(x)
        return out

    ns["f"] = stack
    assert cells.run(STACK, "t")[1] and cells.run(RELU, "t")[1]
    ns["f"] = lambda x, weights, activation=np.tanh: stack(x, weights)  # ignores it
    for cell in (STACK, RELU):
        _failed(cells, cell)


MODULE = (
    "from normedu.grading import rmsnorm as grade\n"
    "grade.check_module_structure(M)\ngrade.check_module_forward(M)\n"
    "grade.check_module_on(M, (2, 3, 4), seed=23, eps=1e-3)"
)


def test_a_torch_module_is_run_in_the_kernel_and_judged_here(kernel):
    """The module and its tensors stay in the kernel (a harness runs it there); its output
    and gradients come back as arrays and are compared here with F.rms_norm."""
    import torch

    ns, cells = kernel

    class RMSNorm(torch.nn.Module):
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.eps, self.weight = eps, torch.nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight

    ns["M"] = RMSNorm
    outputs, passed = cells.run(MODULE, "t")
    assert passed, outputs

    class NoEps(RMSNorm):
        def forward(self, x):  # the eps is ignored: off by a little, visibly at eps = 1e-3
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True)) * self.weight

    ns["M"] = NoEps
    _failed(cells, MODULE)


SYNC = (
    "import numpy as np\nfrom normedu.grading import syncbn as grade\n"
    "rng = np.random.default_rng(2)\n"
    "xs = [rng.standard_normal((n, 3)) + 2 * k for k, n in enumerate((1, 4, 2))]\n"
    "grade.check_forward(f, xs, rng.uniform(0.5, 2, 3), rng.standard_normal(3), eps=0.3)"
)


def test_simulated_processes_run_in_the_kernel_and_are_judged_here(kernel):
    ns, cells = kernel

    def syncbn(x, gamma, beta, all_reduce, eps=1e-5):
        n = all_reduce(np.array([len(x)], dtype=float))
        mu = all_reduce(x.sum(0)) / n
        var = all_reduce(((x - mu) ** 2).sum(0)) / n
        return gamma * (x - mu) / np.sqrt(var + eps) + beta

    ns["f"] = syncbn
    outputs, passed = cells.run(SYNC, "t")
    assert passed, outputs

    def local(x, gamma, beta, all_reduce, eps=1e-5):  # its own batch's statistics only
        return gamma * (x - x.mean(0)) / np.sqrt(x.var(0) + eps) + beta

    def hangs(x, gamma, beta, all_reduce, eps=1e-5):  # one process skips the all-reduce
        if len(x) > 1:
            all_reduce(x.sum(0))
        return x

    def modifies(x, gamma, beta, all_reduce, eps=1e-5):  # right, but scribbles on x
        out = syncbn(x, gamma, beta, all_reduce, eps)
        x[...] = 0.0
        return out

    for wrong, says in ((local, ""), (modifies, "in place"), (hangs, "all-reduce")):
        ns["f"] = wrong
        assert says in _failed(cells, SYNC)["evalue"]  # the kernel's own message came back


PREPOST = (
    "from normedu.grading import prepost as grade\n"
    "grade.check_pre_norm(pre)\ngrade.check_post_norm(post)\ngrade.check_grad_norms(g)\n"
    "x, up = grade.make_inputs(batch=3, width=8, seed=10)\n"
    "grade.check_residual_on(pre, post, x[:2], seed=5)\n"
    "grade.check_grad_norms_on(g, ('post', 3, 8, 9), x, up)\n"
    "grade.check_grad_norms_on(g, ('functions', ('tanh', 'triple', 'sin')), x, up)"
)


def test_blocks_and_gradients_stay_in_the_kernel_and_are_judged_here(kernel):
    """Modules, stand-in functions and autograd stay in the kernel (harnesses build them
    there from plain specs); outputs, gradients, call counts and norms come back."""
    import torch

    ns, cells = kernel

    def grad_norms(blocks, x, upstream):
        h = x.clone().requires_grad_(True)
        inputs = []
        for block in blocks:
            inputs.append(h)
            h = block(h)
        return [g.norm().item() for g in torch.autograd.grad(h, inputs, upstream)]

    ns.update(
        pre=lambda x, sublayer, norm: x + sublayer(norm(x)),
        post=lambda x, sublayer, norm: norm(x + sublayer(x)),
        g=grad_norms,
    )
    outputs, passed = cells.run(PREPOST, "t")
    assert passed, outputs
    for name, wrong in (
        ("pre", lambda x, sublayer, norm: norm(x + sublayer(x))),
        ("post", lambda x, sublayer, norm: norm(x) + sublayer(norm(x)) + 0 * norm(x)),
        ("g", lambda blocks, x, upstream: grad_norms(blocks, x, upstream)[::-1]),
    ):
        right, ns[name] = ns[name], wrong
        _failed(cells, PREPOST)
        ns[name] = right


def test_a_kernel_cannot_rewrite_the_inputs_a_harness_was_given():
    """A forged kernel answers a harness with zeros and reports its inputs as zeros "after
    the call": the check's reference comes from its own inputs, so zeros fail."""

    def forged(op):
        if op["op"] == "describe":
            return {n: {"callable": True} for n in op["names"] if n == "RMSNorm"}
        if op["op"] == "shortcuts":
            return []
        d, eps, x, w, up = plain.decode(json.loads(op["payload"])["args"])
        ok = {"out": np.zeros(x.shape), "gx": np.zeros(x.shape), "gw": np.zeros(d)}
        after = [d, eps, np.zeros_like(x), w, np.zeros_like(up)]
        return {"ok": plain.encode(ok), "args": plain.encode(after), "kwargs": plain.encode({})}

    cell = "from normedu.grading import rmsnorm as grade\ngrade.check_module_forward(RMSNorm)"
    _failed(TrustedCells(forged), cell)


def test_a_profile_that_zeroes_the_weights_in_place_fails():
    from normedu.grading import drift

    def zeroes(x, weights, activation=np.tanh):
        for w in weights:
            w[...] = 0.0
        return np.zeros((len(weights), 3))

    with pytest.raises(AssertionError):
        drift.check_drift_profile(zeroes)
