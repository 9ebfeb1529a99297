"""Short answers checked against stored hashes, so the key is not readable in the package.

A multiple-choice answer is normalized (stripped, lower case) and hashed together with its
question id; the hidden test compares the hash with the stored one.
"""

from __future__ import annotations

import hashlib

from normedu.grading.errors import GradingError

__all__ = ["answer_hash", "check_format", "check_answer"]


def _normalize(answer: object) -> str:
    return str(answer).strip().strip("()").lower()


def answer_hash(question: str, answer: object) -> str:
    """sha256 of ``"<question>:<normalized answer>"``."""
    return hashlib.sha256(f"{question}:{_normalize(answer)}".encode()).hexdigest()


def check_format(name: str, answer: object, options: tuple[str, ...]) -> None:
    """Raise unless ``answer`` is one of ``options`` (e.g. ``("a", "b", "c")``)."""
    if answer is None:
        raise GradingError(f"{name} is still None: set it to one of {', '.join(options)}")
    if not isinstance(answer, str) or _normalize(answer) not in options:
        raise GradingError(
            f"{name} = {answer!r} is not a valid choice: use one of the letters "
            f"{', '.join(repr(o) for o in options)}"
        )


def check_answer(question: str, answer: object, key: str, hint: str) -> None:
    """Raise with ``hint`` unless ``answer`` hashes to ``key``."""
    if answer_hash(question, answer) != key:
        raise GradingError(f"{question}: {answer!r} is not the right answer. {hint}")
