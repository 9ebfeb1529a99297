"""What a student sees when a check fails in a live notebook: the message, not the grader.

IPython prints every frame of a failing test cell's traceback: for a check, 30 lines of
``normedu/grading/...`` frames stand between the test line and the one line that helps
("Likely cause: ..."). :func:`install` registers an IPython handler for :class:`GradingError`
that keeps what the student wrote, the notebook's own cells (the test line, and the frames of
their function when it raised), and drops the frames inside installed files. The error output
keeps its ``ename``/``evalue``, so nbgrader's Validate and autograde still see a failure.
The feedback pages filter graded notebooks with the same rule (:func:`student_frames`).
"""

from __future__ import annotations

import re
import sys

from normedu.grading.errors import GradingError

__all__ = ["student_frames", "install"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: A traceback entry of a frame in a file (IPython: ``File /path/x.py:12, in f(...)``), as
#: opposed to a notebook cell (``Cell In[3], line 2``).
FILE_FRAME = re.compile(r"^\s*File\s+\S")


def student_frames(entries: list[str]) -> list[str]:
    """The entries of an IPython structured traceback that are not frames in a file."""
    return [e for e in entries if not FILE_FRAME.match(_ANSI.sub("", e))]


def _show(shell, etype, value, tb, tb_offset=None) -> list[str]:
    entries = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    stb = student_frames(entries) or [f"{etype.__name__}: {value}"]
    # IPython only records a custom handler's result: showing it is the handler's job. In a
    # kernel this publishes the cell's error output, which is how nbgrader sees the failure.
    shell._showtraceback(etype, value, stb)
    return stb


def install() -> bool:
    """Register the handler in the running IPython shell, if any (a plain Python process, a
    test run, is left alone). Returns whether one was registered."""
    if "IPython" not in sys.modules:  # not in a kernel: importing IPython here would be waste
        return False
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((GradingError,), _show)
    return True
