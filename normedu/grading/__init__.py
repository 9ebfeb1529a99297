"""Grading helpers that the exercise notebooks' test cells call.

Each assignment has a module of checks (:mod:`.batchnorm`, :mod:`.layernorm`, :mod:`.rmsnorm`,
:mod:`.jacobian`, :mod:`.drift`, :mod:`.prepost`). A check takes the student's function, runs
probes against an independent reference (:mod:`normedu.functional`, itself tested against
PyTorch, or central finite differences with a random upstream gradient), and raises
``AssertionError`` with a message a student can act on. When the output is wrong the check
compares it with the outputs of known mistakes (:mod:`.diagnose`) and names the one it matches.

Shared pieces:

- :mod:`.errors`    :class:`GradingError`, the exception every check raises.
- :mod:`.display`   what a failing check shows in a live notebook (the message, not our frames).
- :mod:`.compare`   calling student code safely and comparing arrays with readable messages.
- :mod:`.guard`     the anti-shortcut guard (no delegating to a library's norm).
- :mod:`.gradcheck` finite-difference gradients.
- :mod:`.answers`   checking short answers against stored hashes.
- :mod:`.mistakes`  the catalog of realistic wrong implementations the tests feed the checks.

Importing this package does not import torch: the numpy-only assignments stay fast to grade.
Only :mod:`.prepost` and the module part of :mod:`.rmsnorm` import torch, lazily.
"""

from normedu.grading import display
from normedu.grading.compare import assert_close, rel_error
from normedu.grading.errors import GradingError

# A failing check shows the student its message and their own cells, not the grader's frames.
display.install()

__all__ = ["GradingError", "assert_close", "rel_error"]
