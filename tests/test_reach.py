"""What a grading kernel can reach (:mod:`normedu.course.reach`), each in a fresh interpreter
confined as a forked kernel is: the course's references and the libraries' norms are not
there, whatever the code writes, and what an honest answer uses is."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from normedu.course.sandbox import landlock_abi

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the grading sandbox needs Linux"
)


def _run(code: str, tmp_path: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_PROBE = """
import json, os, sys
out = {}
def t(label, code):
    try:
        out[label] = "ok " + repr(eval(code))[:80]
    except BaseException as e:
        out[label] = f"{type(e).__name__}: {e}"[:300]
"""


def test_the_kernel_side_loads_nothing_else_of_normedu_and_not_torch(tmp_path):
    loaded = _run(
        """
        import importlib, json, sys
        from normedu.course.reach import KERNEL_MODULES
        for name in KERNEL_MODULES:
            importlib.import_module(name)
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(("normedu", "torch")))))
        """,
        tmp_path,
    )
    from normedu.course.reach import KERNEL_MODULES

    assert set(loaded) == set(KERNEL_MODULES)


@pytest.mark.skipif(landlock_abi() < 1, reason="reading the package's files is stopped by Landlock")
def test_a_numpy_assignment_s_kernel_reaches_no_reference_and_no_torch(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    out = _run(
        _PROBE
        + f"""
import importlib, numpy
from normedu.course import reach, sandbox
spec = reach.for_assignment("layernorm", {{"numpy"}})
for name in reach.KERNEL_MODULES:
    importlib.import_module(name)
import normedu
package = os.path.dirname(normedu.__file__)
sandbox.confine({str(work)!r}, landlock="on", reach=spec, network=True)
reach.install(spec)
t("torch", "__import__('torch').tensor([1.0])")
t("importlib", "importlib.import_module('torch.nn.functional').layer_norm(1)")
t("module", "__import__('torch').nn.LayerNorm(4)")
t("isinstance", "isinstance(numpy.ones(2), __import__('torch').Tensor)")
t("reference", "__import__('normedu.functional', fromlist=['_']).layer_norm(numpy.ones((2, 3)))")
t("checks", "__import__('normedu.grading.layernorm', fromlist=['_']).ref.layer_norm(1)")
t("variants", "getattr(__import__('normedu.grading.diagnose', fromlist=['_']), 'normalize')(1)")
t("jax", "__import__('jax').nn.softmax(1)")
t("rel_error", "__import__('normedu.grading', fromlist=['_']).rel_error(numpy.ones(2), 1.0)")
t("scipy", "float(__import__('scipy.stats', fromlist=['_']).describe([1.0, 2.0]).mean)")
t("stdlib", "__import__('functools').reduce(int.__add__, [1, 2])")
t("course_helper", "__import__('normedu.grading.drift', fromlist=['_']).GAINS[0]")
t("simulate", "__import__('normedu.grading.syncbn', fromlist=['_']).simulate.__module__")
sys.meta_path.pop(0)
stand_ins = ("normedu.functional", "normedu.grading.l", "torch")
for name in [m for m in sys.modules if m.startswith(stand_ins)]:
    del sys.modules[name]
t("reference_no_finder", "__import__('normedu.functional', fromlist=['_']).layer_norm")
t("torch_no_finder", "__import__('torch')")
t("source", "open(os.path.join(package, 'functional.py')).read()")
site = os.path.dirname(numpy.__path__[0])
t("torch_source", "open(os.path.join(site, 'torch', 'version.py')).read()")
print(json.dumps(out))
""",
        tmp_path,
    )
    gone = "not available while this assignment is graded"
    why = "answers are written with NumPy"
    assert out["torch"] == f"NotAvailableWhileGrading: torch.tensor is {gone}: {why}"
    assert f"torch.nn.functional.layer_norm is {gone}" in out["importlib"]
    assert f"torch.nn.LayerNorm is {gone}" in out["module"]
    assert out["isinstance"] == "ok False"
    assert out["reference"].startswith(
        f"NotAvailableWhileGrading: normedu.functional.layer_norm is {gone}"
    )
    assert f"normedu.grading.layernorm.ref.layer_norm is {gone}" in out["checks"]
    assert f"normedu.grading.diagnose.normalize is {gone}" in out["variants"]
    assert out["jax"].startswith(f"NotAvailableWhileGrading: jax.nn.softmax is {gone}")
    assert (out["rel_error"], out["scipy"], out["stdlib"]) == ("ok 0.0", "ok 1.5", "ok 3")
    # What the course's own cells take from a checks' module is there for real (reach.LEAVES).
    assert (out["course_helper"], out["simulate"]) == ("ok 0.5", "ok 'normedu.grading.simulated'")
    for label in ("reference_no_finder", "torch_no_finder", "source", "torch_source"):
        assert out[label].startswith("PermissionError"), (label, out[label])


def test_a_torch_assignment_s_kernel_has_torch_without_its_norms(tmp_path):
    out = _run(
        _PROBE
        + """
import torch
from normedu.course import reach
reach.install(reach.for_assignment("rmsnorm", {"numpy", "torch"}))
x = torch.randn(2, 4, requires_grad=True)
t("F", "torch.nn.functional.rms_norm(x, (4,))")
t("module", "torch.nn.RMSNorm(4)")
t("inner", "torch.nn.modules.normalization.LayerNorm(4)")
t("aten", "torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5)")
t("top", "torch.layer_norm(x, (4,))")
t("ops", "float((x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)).sum().backward() or 1)")
print(json.dumps(out))
""",
        tmp_path,
    )
    gone = "is not available while this assignment is graded"
    assert f"torch.nn.functional.rms_norm {gone}" in out["F"]
    assert f"torch.nn.RMSNorm {gone}" in out["module"]
    assert f"torch.nn.modules.normalization.LayerNorm {gone}" in out["inner"]
    assert f"torch.ops.aten.native_layer_norm {gone}" in out["aten"]
    assert f"torch.layer_norm {gone}" in out["top"]
    assert out["ops"] == "ok 1.0"
