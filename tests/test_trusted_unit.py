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


def test_in_place_changes_come_back_and_shortcuts_are_found(kernel):
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
    assert not passed and "must compute the result itself" in outputs[-1]["evalue"]


def test_autograde_stops_where_kernels_cannot_be_cut_off_the_network(tmp_path, monkeypatch):
    from normedu.course import namespaces
    from normedu.course.autograde import NetworkIsolationError, autograde
    from normedu.course.config import Course

    monkeypatch.setattr(namespaces, "available", lambda readable: "unshare(CLONE_NEWNET) refused")
    with pytest.raises(NetworkIsolationError, match="--allow-network"):
        autograde(Course(root=tmp_path), "demo")
