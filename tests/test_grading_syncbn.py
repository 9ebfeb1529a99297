"""The simulated processes of the syncbn grader: sums, and clear messages instead of deadlocks."""

from __future__ import annotations

import time

import numpy as np
import pytest

from normedu.grading import GradingError
from normedu.grading.syncbn import simulate


def _sum_twice(x, all_reduce):
    return all_reduce(x.sum(axis=0)), all_reduce(np.array([len(x)], dtype=float))


def test_all_reduce_sums_over_processes_and_every_process_gets_it():
    xs = [np.arange(6.0).reshape(3, 2), np.ones((1, 2)), np.full((4, 2), 2.0)]
    res = simulate(_sum_twice, [(x,) for x in xs])
    for s, n in res:
        np.testing.assert_array_equal(s, sum(x.sum(axis=0) for x in xs))
        np.testing.assert_array_equal(n, [8.0])


def test_different_shapes_are_named():
    with pytest.raises(GradingError, match="same shape"):
        simulate(lambda x, all_reduce: all_reduce(x), [(np.ones((2, 3)),), (np.ones((1, 3)),)])


def _extra_call_on_big_batches(x, all_reduce):
    s = all_reduce(x.sum(axis=0))
    if len(x) > 1:
        s = all_reduce(s)
    return s


def test_a_call_the_others_never_make_fails_fast_instead_of_hanging():
    t0 = time.monotonic()
    with pytest.raises(GradingError, match="deadlock"):
        simulate(_extra_call_on_big_batches, [(np.ones((1, 2)),), (np.ones((3, 2)),)])
    assert time.monotonic() - t0 < 2


def _stuck_on_rank_one(x, all_reduce):
    if len(x) == 2:
        time.sleep(1.0)  # still computing when the others give up
    return all_reduce(x.sum(axis=0))


def test_a_process_that_never_arrives_times_out():
    with pytest.raises(GradingError, match="waited 0.2 s"):
        simulate(_stuck_on_rank_one, [(np.ones((1, 2)),), (np.ones((2, 2)),)], timeout=0.2)


def test_student_exception_names_the_process():
    def boom(x, all_reduce):
        if len(x) == 3:
            raise ValueError("bad")
        return all_reduce(x.sum(axis=0))

    with pytest.raises(GradingError, match="ValueError on process 1"):
        simulate(boom, [(np.ones((1, 2)),), (np.ones((3, 2)),)])
