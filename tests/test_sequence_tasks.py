"""Synthetic sequence tasks: each answer checked against a plain-Python reconstruction."""

from __future__ import annotations

import math

import pytest
import torch

from normedu.sequence_tasks import (
    IGNORE,
    SEP,
    TASKS,
    accuracy,
    chance_loss,
    lm_loss,
    make_batch,
    seq_len,
)


def _full(b):
    """Rebuild the full token sequence from x and the last target."""
    return [row_x + [row_y[-1]] for row_x, row_y in zip(b.x.tolist(), b.y.tolist(), strict=True)]


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_answer_tasks(task):
    n = 5
    b = make_batch(task, batch=6, n=n, vocab=12, seed=0)
    assert b.x.shape == b.y.shape == (6, seq_len(task, n)) == (6, 2 * n)
    for seq in _full(b):
        prompt, sep, answer = seq[:n], seq[n], seq[n + 1 :]
        assert sep == SEP and all(2 <= t < 12 for t in prompt)
        expected = {"copy": prompt, "reverse": prompt[::-1], "sort": sorted(prompt)}[task]
        assert answer == expected
    # targets are x shifted by one, and only the n answer positions are scored
    assert torch.equal(b.y[:, :n], torch.full((6, n), IGNORE))
    assert torch.equal(b.scored.sum(1), torch.full((6,), n))
    assert torch.equal(b.y[:, n:-1], b.x[:, n + 1 :])


def test_recall_task():
    n = 4
    b = make_batch("recall", batch=8, n=n, vocab=20, seed=1)
    assert b.x.shape == (8, seq_len("recall", n)) == (8, 2 * n + 2)
    for seq in _full(b):
        keys, values = seq[0 : 2 * n : 2], seq[1 : 2 * n : 2]
        assert len(set(keys)) == n  # distinct keys
        assert all(2 <= k < 2 + 9 for k in keys) and all(11 <= v < 20 for v in values)
        assert seq[2 * n] == SEP
        query, answer = seq[2 * n + 1], seq[2 * n + 2]
        assert answer == dict(zip(keys, values, strict=True))[query]
    assert torch.equal(b.scored.sum(1), torch.ones(8, dtype=torch.long))


def test_seeded_and_independent_of_global_rng():
    a = make_batch("copy", 3, 4, 10, seed=5)
    torch.manual_seed(123)
    b = make_batch("copy", 3, 4, 10, seed=5)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    c = make_batch("copy", 3, 4, 10, seed=6)
    assert not torch.equal(a.x, c.x)


def test_loss_and_accuracy():
    b = make_batch("reverse", 4, 3, 8, seed=0)
    uniform = torch.zeros(4, b.seq_len, 8)
    assert float(lm_loss(uniform, b)) == pytest.approx(math.log(8))
    perfect = torch.full((4, b.seq_len, 8), -10.0)
    y = b.y.clamp(min=0)
    perfect.scatter_(2, y[..., None], 10.0)
    assert accuracy(perfect, b) == 1.0
    assert float(lm_loss(perfect, b)) < 1e-6
    with pytest.raises(ValueError, match="logits"):
        lm_loss(torch.zeros(4, b.seq_len, 9), b)


@pytest.mark.parametrize(
    "args, match",
    [
        (("shuffle", 2, 3, 10), "unknown task"),
        (("copy", 0, 3, 10), ">= 1"),
        (("copy", 2, 3, 3), "vocab"),
        (("recall", 2, 5, 10), "distinct keys"),
    ],
)
def test_errors(args, match):
    with pytest.raises(ValueError, match=match):
        make_batch(*args)


def test_tasks_listed():
    assert set(TASKS) == {"copy", "reverse", "sort", "recall"}


@pytest.mark.parametrize("task", TASKS)
def test_chance_loss_is_the_entropy_of_the_answer_tokens(task):
    """A model that learned only which ids answer, uniformly: its loss is the entropy of the
    answers' distribution, estimated here from a large batch (not ln V: ids 0 and 1 never
    answer)."""
    b = make_batch(task, 4000, 4, 16, seed=0)
    answers = b.y[b.y != IGNORE]
    p = torch.bincount(answers, minlength=16).double() / answers.numel()
    entropy = float(-(p[p > 0] * p[p > 0].log()).sum())
    assert chance_loss(16, task) == pytest.approx(entropy, abs=0.01)
    assert chance_loss(16, task) < math.log(16) - 0.1
