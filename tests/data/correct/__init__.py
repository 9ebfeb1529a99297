"""Correct answers written independently of the solutions, one module per assignment.

Each module's ``VARIANTS`` maps a variant's name to ``{answer cell grade_id: source}``: a
valid implementation that differs from the solution (another variance formula, another
order of reshapes, einsum, loops over groups, a staged computational graph, NumPy's own
reshape error instead of an explicit check ...). ``tests/test_grading.py`` grades each one
in-process and ``tests/test_exercises.py`` through nbgrader: every variant must get full
marks, so that a correct answer never loses points for anything but its maths and its
contract.
"""

import importlib
import pkgutil

#: {assignment: {variant: {cell: source}}}, from every module of this package.
VARIANTS = {
    m.name: importlib.import_module(f"{__name__}.{m.name}").VARIANTS
    for m in pkgutil.iter_modules(__path__)
}
