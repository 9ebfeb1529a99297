"""Grading helpers that the exercise notebooks' test cells call.

Each assignment has a module of checks named like it (``normedu.grading.<assignment>``, e.g.
:mod:`.layernorm`, :mod:`.dyt`, :mod:`.qknorm`). A check takes the student's function, runs
probes against an independent reference (:mod:`normedu.functional`, itself tested against
PyTorch, or central finite differences with a random upstream gradient), and raises
``AssertionError`` with a message a student can act on. When the output is wrong the check
compares it with the outputs of known mistakes (:mod:`.diagnose`) and names the one it matches.

A norm assignment's module is a table (:class:`.normcheck.NormTable`: its references, the
names of its inputs and outputs, its causes and messages) and the public checks its notebook
calls; the checking itself is :mod:`.normcheck`'s, the same for every norm.

Shared pieces:

- :mod:`.errors`    :class:`GradingError`, the exception every check raises.
- :mod:`.display`   what a failing check shows in a live notebook (the message, not our frames).
- :mod:`.compare`   calling student code safely and comparing arrays with readable messages.
- :mod:`.normcheck` the one norm checker (its :class:`~.normcheck.NormTable` and Probe).
- :mod:`.causes`    the mistakes every standardizing norm can make, as one-line table entries.
- :mod:`.messages`  messages several norms share (eps outside the square root, β missing ...).
- :mod:`.guard`     the anti-shortcut guard (no delegating to a library's norm).
- :mod:`.gradcheck` finite-difference gradients.
- :mod:`.kernel_side` the parts of checks that run where the student's object lives (torch
  modules, simulated processes) when the grader runs the checks outside the kernel.
- :mod:`.answers`   checking short answers against stored hashes.
- :mod:`.validation` bad input must raise a ``ValueError`` (any message).
- :mod:`.mistakes`  the catalog of realistic wrong implementations the tests feed the checks,
  one module per assignment (never imported by a grading kernel).

Importing this package imports no check and no reference (:func:`assert_close` loads on first
use), and not torch: the numpy-only assignments stay fast to grade.
Only :mod:`.prepost` and the module part of :mod:`.rmsnorm` import torch, lazily.
"""

from normedu.grading import display
from normedu.grading.errors import GradingError
from normedu.grading.gradcheck import rel_error

# A failing check shows the student its message and their own cells, not the grader's frames.
display.install()

__all__ = ["GradingError", "assert_close", "rel_error"]


def __getattr__(name: str):
    # assert_close on first use: the package itself loads no check and no reference, so that a
    # grading kernel can hold it (normedu.course.reach).
    if name == "assert_close":
        from normedu.grading.compare import assert_close

        return assert_close
    raise AttributeError(f"module 'normedu.grading' has no attribute {name!r}")
