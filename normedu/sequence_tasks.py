"""Synthetic sequence tasks, generated in code (no downloads), for training tiny language models.

Every task is next-token prediction on one token sequence; only the answer tokens are scored.
Token ids: ``SEP = 0`` separates prompt from answer, ``1`` is unused padding, content tokens
are ``2 .. vocab-1``.

==================  ==========================================  ================
task                full sequence                               answer
==================  ==========================================  ================
``copy``            ``c1 .. cn SEP c1 .. cn``                   the prompt
``reverse``         ``c1 .. cn SEP cn .. c1``                   reversed prompt
``sort``            ``c1 .. cn SEP sorted(c)``                  sorted prompt
``recall``          ``k1 v1 .. kn vn SEP kq vq``                value of key kq
==================  ==========================================  ================

For ``recall`` the keys are distinct ids from the lower half of the content range and the
values come from the upper half; ``kq`` is one of the n keys, chosen uniformly.

A batch is a :class:`SequenceBatch`: inputs ``x`` = sequence[:-1] and targets ``y`` =
sequence[1:], both (B, T) int64, with ``y = IGNORE`` (-100) wherever the next token is not
part of the answer, so ``F.cross_entropy(..., ignore_index=IGNORE)`` scores the answer only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F

from . import seeding

__all__ = [
    "TASKS",
    "SEP",
    "IGNORE",
    "SequenceBatch",
    "make_batch",
    "chance_loss",
    "lm_loss",
    "accuracy",
]

SEP = 0
PAD = 1
FIRST = 2  # first content token id
IGNORE = -100
TASKS = ("copy", "reverse", "sort", "recall")


def chance_loss(vocab: int, task: str) -> float:
    """Cross-entropy per answer token of a model that learned only which tokens can answer.

    The answer tokens are drawn uniformly from the content ids (``vocab - 2`` of them; ``SEP``
    and ``PAD`` never answer), for ``recall`` from the upper half of them (the values): a
    uniform guess over those ids scores ``ln`` of their number. (For ``sort`` each position
    has its own distribution, so a position-aware guess can do better.)
    """
    _check_task(task)
    n_content = vocab - FIRST
    return math.log(n_content - n_content // 2 if task == "recall" else n_content)


@dataclass(frozen=True)
class SequenceBatch:
    """One batch of a task.

    - x: (B, T) int64 input token ids.
    - y: (B, T) int64 next-token targets; IGNORE where the position is not scored.
    - task: the task's name.
    - vocab: vocabulary size V (token ids are < V).
    """

    x: Tensor
    y: Tensor
    task: str
    vocab: int

    @property
    def seq_len(self) -> int:
        return self.x.shape[1]

    @property
    def scored(self) -> Tensor:
        """(B, T) bool: positions whose target is scored."""
        return self.y != IGNORE

    def to(self, device) -> SequenceBatch:
        return SequenceBatch(self.x.to(device), self.y.to(device), self.task, self.vocab)


def seq_len(task: str, n: int) -> int:
    """Input length T of a batch of ``task`` with ``n`` prompt items."""
    _check_task(task)
    return 2 * n + 2 if task == "recall" else 2 * n


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {TASKS}")


def make_batch(
    task: str, batch: int, n: int, vocab: int, seed: int | None = None, device=None
) -> SequenceBatch:
    """Draw ``batch`` random sequences of ``task`` with ``n`` prompt items.

    Inputs:
    - task: one of :data:`TASKS`.
    - batch: number of sequences B >= 1.
    - n: prompt items per sequence (n key/value pairs for ``recall``), n >= 1.
    - vocab: vocabulary size V; content ids are 2 .. V-1. ``recall`` needs at least n keys,
      i.e. (V - 2) // 2 >= n.
    - seed: seed of a private generator (the global RNG is untouched); None draws from it.

    Returns a :class:`SequenceBatch` with x, y of shape (B, T), T = :func:`seq_len`.
    """
    _check_task(task)
    if batch < 1 or n < 1:
        raise ValueError(f"batch and n must be >= 1, got batch={batch}, n={n}")
    n_content = vocab - FIRST
    if n_content < 2:
        raise ValueError(f"vocab must be >= 4 (2 reserved ids + content), got {vocab}")
    gen = seeding.generator(seed) if seed is not None else None
    if task == "recall":
        n_keys = n_content // 2
        if n_keys < n:
            raise ValueError(
                f"recall with n={n} pairs needs (vocab - 2) // 2 >= n distinct keys; "
                f"vocab={vocab} gives {n_keys}"
            )
        keys = torch.argsort(torch.rand(batch, n_keys, generator=gen), dim=1)[:, :n] + FIRST
        values = torch.randint(FIRST + n_keys, vocab, (batch, n), generator=gen)
        pairs = torch.stack([keys, values], dim=2).reshape(batch, 2 * n)
        q = torch.randint(0, n, (batch,), generator=gen)
        rows = torch.arange(batch)
        sep = torch.full((batch, 1), SEP, dtype=torch.int64)
        seq = torch.cat([pairs, sep, keys[rows, q, None], values[rows, q, None]], dim=1)
        n_answer = 1
    else:
        prompt = torch.randint(FIRST, vocab, (batch, n), generator=gen)
        if task == "copy":
            answer = prompt
        elif task == "reverse":
            answer = prompt.flip(1)
        else:
            answer = prompt.sort(dim=1).values
        sep = torch.full((batch, 1), SEP, dtype=torch.int64)
        seq = torch.cat([prompt, sep, answer], dim=1)
        n_answer = n
    x, y = seq[:, :-1].clone(), seq[:, 1:].clone()
    y[:, : y.shape[1] - n_answer] = IGNORE
    if device is not None:
        x, y = x.to(device), y.to(device)
    return SequenceBatch(x, y, task, vocab)


def lm_loss(logits: Tensor, batch: SequenceBatch) -> Tensor:
    """Mean cross-entropy over the scored positions; logits (B, T, V) -> scalar."""
    if logits.shape[:2] != batch.y.shape or logits.shape[2] != batch.vocab:
        raise ValueError(
            f"logits have shape {tuple(logits.shape)}, expected "
            f"({batch.y.shape[0]}, {batch.y.shape[1]}, {batch.vocab})"
        )
    return F.cross_entropy(
        logits.reshape(-1, batch.vocab), batch.y.reshape(-1), ignore_index=IGNORE
    )


def accuracy(logits: Tensor, batch: SequenceBatch) -> float:
    """Fraction of scored positions where the arg-max token is the target."""
    mask = batch.scored
    pred = logits.argmax(dim=-1)
    return float((pred[mask] == batch.y[mask]).float().mean())
