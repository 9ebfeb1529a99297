"""The C forward kernels (normedu/csrc/norm_kernels.c) against torch in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normedu import cpu_kernels as C
from normedu import fast
from normedu.conventions import DEFAULT_EPS

EPS = DEFAULT_EPS


def _inputs(n, d, offset=3.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = offset + 2.0 * torch.randn(n, d, generator=gen)
    return x, torch.randn(d, generator=gen), torch.randn(d, generator=gen)


def _refs(x, w, b):
    d = x.shape[-1]
    x64, w64, b64 = x.double(), w.double(), b.double()
    return F.layer_norm(x64, (d,), w64, b64, EPS), F.rms_norm(x64, (d,), w64, EPS)


def test_the_kernels_build_here():
    # make test's environment has a C compiler (torch.compile needs one on a CPU too)
    assert C.available(), C.status()
    assert "built with" in C.status()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("n,d", [(7, 5), (3, 63), (5, 64), (4, 1000), (3, 4096), (2, 16387)])
def test_forward_matches_torch_float64(n, d, stream, monkeypatch):
    # stream=True forces the non-temporal-store path; odd d leaves rows misaligned and tails
    monkeypatch.setattr(C, "STREAM_MIN_BYTES", 0 if stream else 1 << 62)
    x, w, b = _inputs(n, d)
    ln, rms = _refs(x, w, b)
    y = C.layer_norm_forward(x, w, b, EPS, torch.empty_like(x))
    torch.testing.assert_close(y.double(), ln, rtol=1e-5, atol=1e-5)
    y = C.rms_norm_forward(x, w, EPS, torch.empty_like(x))
    torch.testing.assert_close(y.double(), rms, rtol=1e-5, atol=1e-5)
    y = C.layer_norm_forward(x, w, None, EPS, torch.empty_like(x))
    torch.testing.assert_close(y.double(), ln - b.double(), rtol=1e-5, atol=1e-5)


def test_misaligned_output_with_streaming(monkeypatch):
    monkeypatch.setattr(C, "STREAM_MIN_BYTES", 0)
    x, w, b = _inputs(8, 256)
    buf = torch.empty(8 * 256 + 1)
    out = buf[1:].view(8, 256)  # contiguous, but 4 bytes past a 64-byte boundary
    C.layer_norm_forward(x, w, b, EPS, out)
    torch.testing.assert_close(out.double(), _refs(x, w, b)[0], rtol=1e-5, atol=1e-5)


def test_large_offset_keeps_float32_accuracy():
    # The variance is two-pass (centred): a one-pass E[x^2] - E[x]^2 in float32 would lose
    # every digit at an offset of 1e4 with unit spread.
    x, w, b = _inputs(16, 4096, offset=1e4)
    ln = _refs(x, w, b)[0]
    y = C.layer_norm_forward(x, w, b, EPS, torch.empty_like(x))
    assert (y.double() - ln).abs().max() < 5e-3


def test_thread_count_does_not_change_the_result():
    x, w, b = _inputs(64, 2048)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = C.layer_norm_forward(x, w, b, EPS, torch.empty_like(x))
        torch.set_num_threads(2)
        two = C.layer_norm_forward(x, w, b, EPS, torch.empty_like(x))
    finally:
        torch.set_num_threads(old)
    assert torch.equal(one, two)


def test_fast_uses_the_c_kernel_for_float32(monkeypatch):
    x, w, b = _inputs(32, 512)
    calls = []
    real = C.layer_norm_forward
    monkeypatch.setattr(C, "layer_norm_forward", lambda *a: calls.append(1) or real(*a))
    y = fast.layer_norm(x, w, b, EPS)
    assert calls and fast.backend(x) == "c"
    torch.testing.assert_close(y.double(), _refs(x, w, b)[0], rtol=1e-5, atol=1e-5)
    # with a gradient: forward through C, backward through the compiled kernel
    xg = x.clone().requires_grad_(True)
    fast.layer_norm(xg, w, b, EPS).sum().backward()
    xr = x.double().requires_grad_(True)
    F.layer_norm(xr, (512,), w.double(), b.double(), EPS).sum().backward()
    torch.testing.assert_close(xg.grad.double(), xr.grad, rtol=1e-4, atol=1e-5)


def test_bad_inputs_raise_clear_errors():
    x, w, b = _inputs(4, 8)
    with pytest.raises(TypeError, match="float32"):
        C.layer_norm_forward(x.double(), w, b, EPS, torch.empty(4, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="contiguous"):
        C.layer_norm_forward(x.t(), w, b, EPS, torch.empty(8, 4))
    with pytest.raises(ValueError, match=r"weight has shape \(7,\)"):
        C.layer_norm_forward(x, w[:7], b, EPS, torch.empty_like(x))
    with pytest.raises(ValueError, match="out has shape"):
        C.layer_norm_forward(x, w, b, EPS, torch.empty(8, 4))


@pytest.fixture
def rebuilt(monkeypatch):
    """Makes the next ``C.available()`` build and load the library afresh, in this process,
    from the environment the test sets with ``monkeypatch``; afterwards the real library is
    loaded again. (A fresh process would cost an import of torch and of Inductor.)"""
    C._library.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    C._library.cache_clear()
    assert C.available(), C.status()


@pytest.mark.xdist_group("inductor")  # see tests/test_fast.py
def test_without_a_compiler_fast_falls_back_to_inductor(tmp_path, rebuilt):
    rebuilt.setenv("CC", str(tmp_path / "no-such-cc"))
    rebuilt.setenv("NORMEDU_CACHE_DIR", str(tmp_path))
    assert not C.available()
    assert "build failed" in C.status() and "no-such-cc" in C.status()
    x = torch.randn(4, 8)
    assert fast.backend(x) == "inductor"
    torch.testing.assert_close(fast.layer_norm(x), F.layer_norm(x, (8,)))


@pytest.mark.parametrize("n,d", [(7, 5), (33, 1000), (4, 4096), (3, 16387)])
def test_backward_matches_autograd_float64(n, d):
    x, w, b = _inputs(n, d, seed=3)
    dy = torch.randn(n, d, generator=torch.Generator().manual_seed(4))
    xr, wr, br = (t.double().requires_grad_(True) for t in (x, w, b))
    F.layer_norm(xr, (d,), wr, br, EPS).backward(dy.double())
    dx, dw, db = C.layer_norm_backward(dy, x, w, EPS)
    torch.testing.assert_close(dx.double(), xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw.double(), wr.grad, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(db.double(), br.grad, rtol=1e-5, atol=1e-4)
    xr, wr = (t.double().requires_grad_(True) for t in (x, w))
    F.rms_norm(xr, (d,), wr, EPS).backward(dy.double())
    dx, dw = C.rms_norm_backward(dy, x, w, EPS)
    torch.testing.assert_close(dx.double(), xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw.double(), wr.grad, rtol=1e-5, atol=1e-4)


def test_backward_column_sums_do_not_depend_on_threads():
    # Per-thread float64 partial sums: 1 and 2 threads agree to float32 rounding.
    x, w, _ = _inputs(4096, 64)
    dy = torch.randn(4096, 64, generator=torch.Generator().manual_seed(5))
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = C.layer_norm_backward(dy, x, w, EPS)
        torch.set_num_threads(2)
        two = C.layer_norm_backward(dy, x, w, EPS)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(one[0], two[0])  # dx is per row: bit-identical
    torch.testing.assert_close(one[1], two[1], rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(one[2], two[2], rtol=1e-6, atol=1e-5)


def test_fast_backward_runs_the_c_kernel(monkeypatch):
    x, w, b = _inputs(16, 256)
    calls = []
    real = C.rms_norm_backward
    monkeypatch.setattr(C, "rms_norm_backward", lambda *a: calls.append(1) or real(*a))
    xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    fast.rms_norm(xg, wg, EPS).sum().backward()
    assert calls == [1]
    xr, wr = x.double().requires_grad_(True), w.double().requires_grad_(True)
    F.rms_norm(xr, (256,), wr, EPS).sum().backward()
    torch.testing.assert_close(xg.grad.double(), xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wg.grad.double(), wr.grad, rtol=1e-5, atol=1e-4)


def test_forward_saves_the_statistics_the_backward_reuses():
    x, w, b = _inputs(64, 300, seed=6)
    dy = torch.randn(64, 300, generator=torch.Generator().manual_seed(7))
    stats = (torch.empty(64), torch.empty(64))
    C.layer_norm_forward(x, w, b, EPS, torch.empty_like(x), stats=stats)
    x64 = x.double()
    torch.testing.assert_close(stats[0].double(), x64.mean(1), rtol=1e-6, atol=1e-5)
    rstd = 1 / (x64.var(1, unbiased=False) + EPS).sqrt()
    torch.testing.assert_close(stats[1].double(), rstd, rtol=1e-5, atol=1e-7)
    with_stats = C.layer_norm_backward(dy, x, w, EPS, stats)
    recomputed = C.layer_norm_backward(dy, x, w, EPS)
    for a, r in zip(with_stats, recomputed, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-6)
    rms_stats = (torch.full((64,), 7.0), torch.empty(64))
    C.rms_norm_forward(x, w, EPS, torch.empty_like(x), stats=rms_stats)
    assert torch.equal(rms_stats[0], torch.zeros(64))  # RMSNorm has no mean
    torch.testing.assert_close(rms_stats[1].double(), 1 / (x64.pow(2).mean(1) + EPS).sqrt())
    with pytest.raises(ValueError, match=r"mean must be a float32 CPU tensor of shape \(64,\)"):
        C.layer_norm_forward(x, w, b, EPS, torch.empty_like(x), stats=(torch.empty(3), stats[1]))


@pytest.mark.xdist_group("inductor")  # see tests/test_fast.py
def test_ablation_times_every_variant_against_the_same_copy():
    from normedu.ablation import cpu_kernel_ablation

    r = cpu_kernel_ablation(64, 256, reps=2)
    assert set(r["seconds"]) == {"copy", "inductor", "c, ordinary stores", "c, streaming stores"}
    assert all(t > 0 for t in r["seconds"].values())
    for k, f in r["frac_of_copy"].items():
        assert f == pytest.approx(r["seconds"]["copy"] / r["seconds"][k])
    with pytest.raises(ValueError, match="n, d, reps"):
        cpu_kernel_ablation(0, 256)


def test_an_unwritable_cache_folder_falls_back_with_a_reason(tmp_path, rebuilt):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    rebuilt.setenv("NORMEDU_CACHE_DIR", str(blocker / "cache"))
    assert not C.available()
    assert "cannot write the cache folder" in C.status() and "NORMEDU_CACHE_DIR" in C.status()
