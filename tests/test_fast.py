"""normedu.fast: fused LayerNorm/RMSNorm checked against independent references.

References: the NumPy forward/backward of normedu.functional evaluated in float64, torch's own
F.layer_norm/F.rms_norm with autograd, and finite differences (torch.autograd.gradcheck) in
float64. Upstream gradients are random: with all-ones upstream dx is ~0 for any norm.

Every test uses one shape per dtype so that each kernel compiles once per module (compiling
costs seconds on a CPU).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from ulp_helpers import naive_half_layer_norm, ulp_error

from normedu import fast, functional
from normedu.conventions import DEFAULT_EPS

SHAPE = (3, 5, 96)  # leading axes are flattened into rows by the kernels
D = SHAPE[-1]
EPS = DEFAULT_EPS
TOL = {"rtol": 1e-5, "atol": 1e-5}

# One worker runs every test that compiles with Inductor (the "inductor" group), so a run
# imports and starts Inductor once and compiles each kernel once.
pytestmark = pytest.mark.xdist_group("inductor")

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    # An offset and a non-unit scale so that centering and scaling both matter.
    x = 3.0 + 2.0 * torch.randn(SHAPE, generator=gen)
    w = 1.0 + 0.5 * torch.randn(D, generator=gen)
    b = torch.randn(D, generator=gen)
    dy = torch.randn(SHAPE, generator=gen)
    return x, w, b, dy


def _np64(*ts):
    return [t.detach().double().numpy() for t in ts]


def test_layer_norm_forward_matches_numpy_float64(data):
    x, w, b, _ = data
    ref = functional.layer_norm(*_np64(x, w, b), eps=EPS)
    y = fast.layer_norm(x, w, b, EPS)
    assert y.shape == x.shape and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), ref, **TOL)


def test_rms_norm_forward_matches_numpy_float64(data):
    x, w, _, _ = data
    ref = functional.rms_norm(*_np64(x, w), eps=EPS)
    y = fast.rms_norm(x, w, EPS)
    np.testing.assert_allclose(y.numpy(), ref, **TOL)


def test_defaults_without_weight_and_bias_match_torch(data):
    x, _, _, _ = data
    torch.testing.assert_close(fast.layer_norm(x), F.layer_norm(x, (D,), eps=EPS), **TOL)
    torch.testing.assert_close(fast.rms_norm(x), F.rms_norm(x, (D,), eps=EPS), **TOL)


def test_layer_norm_backward_matches_hand_derived_numpy(data):
    x, w, b, dy = data
    xg, wg, bg = (t.clone().requires_grad_(True) for t in (x, w, b))
    fast.layer_norm(xg, wg, bg, EPS).backward(dy)
    dx, dw, db = functional.layer_norm_backward(*_np64(dy, x, w), eps=EPS)
    np.testing.assert_allclose(xg.grad.numpy(), dx, **TOL)
    # dweight/dbias sum over 15 rows: allow for float32 accumulation.
    np.testing.assert_allclose(wg.grad.numpy(), dw, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(bg.grad.numpy(), db, rtol=1e-5, atol=1e-4)


def test_rms_norm_backward_matches_hand_derived_numpy(data):
    x, w, _, dy = data
    xg, wg = (t.clone().requires_grad_(True) for t in (x, w))
    fast.rms_norm(xg, wg, EPS).backward(dy)
    dx, dw = functional.rms_norm_backward(*_np64(dy, x, w), eps=EPS)
    np.testing.assert_allclose(xg.grad.numpy(), dx, **TOL)
    np.testing.assert_allclose(wg.grad.numpy(), dw, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_backward_matches_torch_autograd(data, op):
    x, w, b, dy = data
    ours = [t.clone().requires_grad_(True) for t in (x, w, b)]
    ref = [t.clone().requires_grad_(True) for t in (x, w, b)]
    if op == "layernorm":
        fast.layer_norm(*ours, EPS).backward(dy)
        F.layer_norm(ref[0], (D,), ref[1], ref[2], EPS).backward(dy)
        pairs = zip(ours, ref, strict=True)
    else:
        fast.rms_norm(ours[0], ours[1], EPS).backward(dy)
        F.rms_norm(ref[0], (D,), ref[1], EPS).backward(dy)
        pairs = zip(ours[:2], ref[:2], strict=True)
    for a, r in pairs:
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-5, atol=1e-4)


def test_gradcheck_float64_finite_differences():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 12, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(12, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(12, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: fast.layer_norm(*a, eps=EPS), (x, w, b))
    assert torch.autograd.gradcheck(lambda *a: fast.rms_norm(*a, eps=EPS), (x, w))


def test_out_writes_in_place_and_refuses_autograd(data):
    x, w, b, _ = data
    out = torch.full_like(x, float("nan"))
    y = fast.layer_norm(x, w, b, EPS, out=out)
    assert y.data_ptr() == out.data_ptr()
    np.testing.assert_allclose(out.numpy(), functional.layer_norm(*_np64(x, w, b), eps=EPS), **TOL)
    out2 = torch.full_like(x, float("nan"))
    fast.rms_norm(x, w, EPS, out=out2)
    np.testing.assert_allclose(out2.numpy(), functional.rms_norm(*_np64(x, w), eps=EPS), **TOL)
    with pytest.raises(ValueError, match="inference"):
        fast.layer_norm(x.clone().requires_grad_(True), w, b, out=out)
    with pytest.raises(ValueError, match="out must match"):
        fast.rms_norm(x, w, out=torch.empty(2, D))


def test_bfloat16_is_computed_in_float32(data):
    """Within one bfloat16 ULP of float64 LayerNorm on the same inputs; the same norm with its
    mean and variance kept in bfloat16 (the negative control) is hundreds of ULPs off here."""
    x, w, b, _ = data
    # Offset 50, std 2: bfloat16's spacing at 50 (0.25) is what a bfloat16 mean loses.
    xb, wb, bb = (t.to(torch.bfloat16) for t in (x + 47.0, w, b))
    # On a CPU Inductor also computes bfloat16 arithmetic in float32 unless told to round each
    # intermediate (TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1): with that set, the kernel minus its
    # float32 upcast is 255 ULPs off here; this checks the result, whoever does the upcast.
    y = fast.layer_norm(xb, wb, bb, EPS)
    assert y.dtype == torch.bfloat16
    ref = F.layer_norm(xb.double(), (D,), wb.double(), bb.double(), EPS)
    assert ulp_error(y, ref) <= 1.0
    assert ulp_error(naive_half_layer_norm(xb, wb, bb, EPS), ref) > 20.0


def test_modules_match_torch_modules(data):
    x, w, b, dy = data
    ours, ref = fast.FastLayerNorm(D), torch.nn.LayerNorm(D, eps=DEFAULT_EPS)
    with torch.no_grad():
        for m in (ours, ref):
            m.weight.copy_(w)
            m.bias.copy_(b)
    torch.testing.assert_close(ours(x), ref(x), **TOL)
    rms, rms_ref = fast.FastRMSNorm(D), torch.nn.RMSNorm(D, eps=DEFAULT_EPS)
    with torch.no_grad():
        rms.weight.copy_(w)
        rms_ref.weight.copy_(w)
    xg = x.clone().requires_grad_(True)
    rms(xg).backward(dy)
    xr = x.clone().requires_grad_(True)
    rms_ref(xr).backward(dy)
    torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(rms.weight.grad, rms_ref.weight.grad, rtol=1e-5, atol=1e-4)
    assert "96" in repr(rms)


def test_bad_inputs_raise_clear_errors():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"weight has shape \(7,\)"):
        fast.layer_norm(x, torch.ones(7))
    with pytest.raises(ValueError, match=r"bias has shape"):
        fast.layer_norm(x, torch.ones(8), torch.zeros(3))
    with pytest.raises(TypeError, match="floating point"):
        fast.rms_norm(torch.ones(4, 8, dtype=torch.int64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        fast.rms_norm(np.ones((4, 8)))
    with pytest.raises(ValueError, match="non-empty last"):
        fast.layer_norm(torch.ones(4, 0))
    with pytest.raises(ValueError, match="eps"):
        fast.layer_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="unknown kernel"):
        fast.kernel_source("nope")


def test_kernel_source_is_the_code_that_runs():
    src = fast.kernel_source("rms_forward")
    assert src.startswith("def _rms_forward") and "rsqrt" in src


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_forward_and_backward_match_torch(dtype):
    gen = torch.Generator().manual_seed(0)
    x = (3 + 2 * torch.randn(64, 1024, generator=gen)).to("cuda", dtype)
    w = torch.randn(1024, generator=gen).to("cuda", dtype)
    b = torch.randn(1024, generator=gen).to("cuda", dtype)
    dy = torch.randn(64, 1024, generator=gen).to("cuda", dtype)
    tol = TOL if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    for op in ("layernorm", "rmsnorm"):
        ours = [t.clone().requires_grad_(True) for t in (x, w, b)]
        ref = [t.float().clone().requires_grad_(True) for t in (x, w, b)]
        if op == "layernorm":
            y = fast.layer_norm(*ours, EPS)
            y_ref = F.layer_norm(ref[0], (1024,), ref[1], ref[2], EPS)
        else:
            y = fast.rms_norm(ours[0], ours[1], EPS)
            y_ref = F.rms_norm(ref[0], (1024,), ref[1], EPS)
        assert y.dtype == dtype and y.is_cuda
        torch.testing.assert_close(y.float(), y_ref, **tol)
        y.backward(dy)
        y_ref.backward(dy.float())
        torch.testing.assert_close(ours[0].grad.float(), ref[0].grad, **tol)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("d", [1000, 4096, 16384])
def test_cuda_forward_uses_the_triton_kernel_and_matches_torch(d):
    gen = torch.Generator().manual_seed(1)
    x = (3 + 2 * torch.randn(33, d, generator=gen)).to("cuda")
    w, b = (torch.randn(d, generator=gen).to("cuda") for _ in range(2))
    assert fast.backend(x) == "triton"
    out = torch.empty_like(x)
    fast.layer_norm(x, w, b, EPS, out=out)
    torch.testing.assert_close(out, F.layer_norm(x, (d,), w, b, EPS), **TOL)
    torch.testing.assert_close(fast.rms_norm(x, w, EPS), F.rms_norm(x, (d,), w, EPS), **TOL)


TRITON_SCRIPT = """
import torch, torch.nn.functional as F
from normedu import triton_kernels as T
from ulp_helpers import ulp_error
assert T.available()
for d in (5, 768, 1000):  # BLOCK_D 8, 1024, 1024: masked lanes in the first and last
    g = torch.Generator().manual_seed(d)
    x = 50 + 2 * torch.randn(7, d, generator=g)  # an offset: a float16/bfloat16 mean would show
    w, b = (torch.randn(d, generator=g) for _ in range(2))
    ln = T.layer_norm_forward(x, w, b, 1e-5, torch.empty_like(x))
    torch.testing.assert_close(ln, F.layer_norm(x, (d,), w, b, 1e-5))
    rms = T.rms_norm_forward(x, w, 1e-5, torch.empty_like(x))
    torch.testing.assert_close(rms, F.rms_norm(x, (d,), w, 1e-5))
    # The interpreter converts float32 to bfloat16 by truncation (a CUDA store rounds to
    # nearest), so bfloat16 gets one ULP where float16 gets half of one.
    for dt, ulps in ((torch.float16, 1.0), (torch.bfloat16, 1.01)):
        xh, wh, bh = x.to(dt), w.to(dt), b.to(dt)
        x64, w64, b64 = xh.double(), wh.double(), bh.double()
        ln = T.layer_norm_forward(xh, wh, bh, 1e-5, torch.empty_like(xh))
        rms = T.rms_norm_forward(xh, wh, 1e-5, torch.empty_like(xh))
        assert ln.dtype == rms.dtype == dt
        err = ulp_error(ln, F.layer_norm(x64, (d,), w64, b64, 1e-5))
        assert err <= ulps, ("layer_norm", d, dt, err)
        err = ulp_error(rms, F.rms_norm(x64, (d,), w64, 1e-5))
        assert err <= ulps, ("rms_norm", d, dt, err)
print("ok")
"""


@pytest.mark.gpu
def test_triton_kernels_match_torch_in_the_interpreter():
    """The CUDA kernels' math, run on CPU tensors through Triton's interpreter.

    Needs the ``triton`` package, not a GPU: requirements-lock.txt pins the version CUDA torch
    2.13.0 requires (so CI runs it, about 10 s), and the ``gpu`` mark puts it in
    scripts/gpu_results.sh's ``pytest -m gpu`` too, where CUDA torch brings its own triton.
    Float32 against torch's float32 norms; float16 and bfloat16 in output ULPs of float64 norms
    of the same inputs (tests/ulp_helpers.py), where a half-precision mean would be hundreds off.
    """
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys
    from pathlib import Path

    # ulp_helpers lives next to this file; the child finds normedu as this process did.
    path = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    r = subprocess.run(
        [sys.executable, "-c", TRITON_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_backend_choice_on_a_cpu(data):
    x = data[0]
    assert fast.backend(x) == "c"  # float32: the C kernel (tests/test_cpu_kernels.py)
    assert fast.backend(x.double()) == "inductor"
    assert fast.backend(x.bfloat16()) == "inductor"


def test_float64_parameters_on_float32_input_fall_back_to_the_compiled_kernel(data):
    x, w, b, dy = data
    xg = x.clone().requires_grad_(True)
    w64, b64 = (t.double().requires_grad_(True) for t in (w, b))
    y = fast.layer_norm(xg, w64, b64, EPS)
    y.backward(dy)
    xr = x.double().requires_grad_(True)
    wr, br = (t.double().requires_grad_(True) for t in (w, b))
    F.layer_norm(xr, (D,), wr, br, EPS).backward(dy.double())
    torch.testing.assert_close(y.double(), F.layer_norm(x.double(), (D,), wr, br, EPS), **TOL)
    torch.testing.assert_close(xg.grad.double(), xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w64.grad, wr.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("wdtype", [torch.float32, torch.float64])
def test_each_call_decides_its_backend_once(data, monkeypatch, wdtype):
    # Forward and backward must run on the backend one decision picked: count the decisions
    # and record which kernels ran (C statistics reach the backward only from a C forward).
    from normedu import cpu_kernels

    x, w, b, dy = data
    calls, ran = [], []
    monkeypatch.setattr(fast, "backend", lambda t, real=fast.backend: calls.append(1) or real(t))
    for name in ("layer_norm_forward", "layer_norm_backward"):
        real = getattr(cpu_kernels, name)
        monkeypatch.setattr(
            cpu_kernels, name, lambda *a, real=real, name=name: ran.append(name) or real(*a)
        )
    xg = x.clone().requires_grad_(True)
    fast.layer_norm(xg, w.to(wdtype), b.to(wdtype), EPS).backward(dy)
    assert len(calls) == 1
    want = ["layer_norm_forward", "layer_norm_backward"] if wdtype == torch.float32 else []
    assert ran == want
    xr = x.double().requires_grad_(True)
    F.layer_norm(xr, (D,), w.double(), b.double(), EPS).backward(dy.double())
    torch.testing.assert_close(xg.grad.double(), xr.grad, rtol=1e-4, atol=1e-5)


def test_torch_compile_fullgraph_runs_a_model_of_fast_norms_like_eager():
    # The kernels are torch.library custom ops, so Dynamo keeps one graph (fullgraph=True
    # raises on any break) and differentiates through their registered backward.
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        fast.FastLayerNorm(16), torch.nn.Linear(16, 16), fast.FastRMSNorm(16)
    )
    x = 3.0 + 2.0 * torch.randn(6, 16)
    up = torch.randn(6, 16)
    grads = []
    for run in (model, torch.compile(model, fullgraph=True)):
        xg = x.clone().requires_grad_(True)
        model.zero_grad()
        y = run(xg)
        y.backward(up)
        grads.append((y.detach(), xg.grad, *(p.grad.clone() for p in model.parameters())))
    for eager, compiled in zip(*grads, strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
