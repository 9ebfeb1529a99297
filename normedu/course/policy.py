"""The answer policy: what the code a student wrote may use, decided from its text alone.

The anti-shortcut guard (:mod:`normedu.grading.guard`) inspects a function in the student's
own kernel, and only what it can see there: a reference captured in a dict, a module imported
by a name built as a string, or the guard itself switched off by the answer cell all get past
it (issue 31). This policy decides in the grading parent, from the notebook's text, before
anything of the hand-in runs, so nothing the student's code does can change its answer.

Every code cell the student wrote (each answer cell, and any cell added or edited outside
them; the course's own cells, restored from the gradebook or unchanged from the release, are
not checked) is parsed with :mod:`ast`, after IPython's own rewriting of ``%magic`` and
``!shell`` lines (so a magic becomes the ``get_ipython()`` call it is). A cell that still does
not parse fails in the kernel as it would anyway. A cell violates the policy if it

- imports a module outside the assignment's allow-list (:func:`allowed_modules`): the
  top-level modules the SOLUTION's answer cells import (NumPy; torch for the torch
  assignments) and the standard library's harmless math modules (:data:`SAFE_STDLIB`), and plotting
  (:data:`SAFE_EXTRA`).
  ``normedu``, ``scipy``, ``importlib`` ... are out; a file the answer writes cannot be
  imported either;
- names a construct of :data:`BANNED` (as a name, an attribute or an imported name), or a
  dunder attribute or name other than :data:`DUNDERS_ALLOWED`: each reaches code or objects
  by a string, or by reflection, where no honest answer needs to;
- reads a name that a course cell bound to a module outside the allow-list
  (``from normedu.grading import layernorm as grade`` in a test cell makes ``grade``), or one
  of IPython's output history (``Out``, ``_3``, ...).

A violating cell is replaced, in the copy the kernel runs, by a stub (:func:`stub`) that
defines the cell's functions and classes as functions that raise :class:`AnswerPolicyError`
with the construct and its line, so its tests fail with that sentence; the graded notebook
keeps the student's code, and the submission is flagged (``tampered``, with a note).

The limit: the policy sees constructs, not intent. A student who copies the reference's
source text into an answer passes it: that is plagiarism, for a person to see, not a
shortcut the grader can. And it is a deny-list over Python on top of an import allow-list,
not a sandbox: the sandbox (:mod:`.sandbox`) and the trusted test cells (:mod:`.trusted`)
still stand beneath it.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

#: Standard modules any answer may import: arithmetic and containers, nothing that reaches
#: other code, files or processes.
SAFE_STDLIB = (
    "math",
    "cmath",
    "functools",
    "itertools",
    "operator",
    "typing",
    "collections",
    "dataclasses",
    "numbers",
)

#: Modules any cell may import although no solution does: a student who plots an answer to
#: look at it (a cell of their own with ``import matplotlib.pyplot as plt``) has done nothing
#: wrong, and no plotting call computes a normalization or reaches the checks. Refusing it
#: would flag an honest hand-in as tampered.
SAFE_EXTRA = ("matplotlib",)

#: Names no answer needs, as a name, an attribute or an imported name, with why.
BANNED: dict[str, str] = {
    # code or modules reached by a string
    "__import__": "imports a module named by a string",
    "importlib": "imports a module named by a string",
    "exec": "runs code built as a string",
    "eval": "runs code built as a string",
    "compile": "builds code from a string (also numpy.f2py.compile)",
    "get_type_hints": "evaluates strings as code",
    "ForwardRef": "evaluates strings as code",
    "help": "imports a module named by a string",
    "breakpoint": "opens a debugger that runs any statement",
    # attributes and namespaces reached by a string
    "getattr": "reads an attribute named by a string (no solution needs it)",
    "setattr": "replaces an attribute named by a string",
    "delattr": "removes an attribute named by a string",
    "attrgetter": "reads an attribute named by a string",
    "methodcaller": "calls a method named by a string",
    "globals": "reads or rewrites a module's namespace",
    "locals": "reads a namespace",
    "vars": "reads or rewrites a namespace",
    "builtins": "reaches the builtins that this policy bans",
    # reflection: other modules, objects and frames of the process
    "sys": "reaches every loaded module (sys.modules)",
    "gc": "reaches every object of the process",
    "inspect": "reaches frames, globals and source of other code",
    "ctypes": "reaches the process's memory",
    "ctypeslib": "reaches the process's memory",
    "get_ipython": "reaches the kernel's shell: it runs any code and holds the notebook",
    "f_back": "walks up to the grading code's frames",
    "f_globals": "reads the globals of other code",
    "f_locals": "reads the locals of other code",
    "f_builtins": "reaches the builtins that this policy bans",
    "gi_frame": "reaches a frame, then the grading code's",
    "cr_frame": "reaches a frame, then the grading code's",
    "ag_frame": "reaches a frame, then the grading code's",
    "tb_frame": "reaches a frame, then the grading code's",
    # files and processes
    "open": "reads or writes files: a written module is an import the allow-list refuses",
    "load": "numpy.load/pickle.load rebuild any importable function from bytes",
    "loads": "pickle.loads rebuilds any importable function from bytes",
    "read_array": "rebuilds objects from pickled bytes",
    "os": "runs programs and reaches the file system",
    "subprocess": "runs programs (the reference, for one)",
    "system": "runs programs (the reference, for one)",
    "popen": "runs programs (the reference, for one)",
    "f2py": "compiles and imports code",
}
#: Dunder names and attributes an answer may use; every other ``__x__`` is reflection
#: (``__dict__``, ``__globals__``, ``__code__``, ``__closure__``, ``__class__``, ``__mro__``,
#: ``__bases__``, ``__subclasses__``, ``__builtins__``, ``__loader__`` ...).
DUNDERS_ALLOWED = frozenset({"__init__", "__name__", "__doc__", "__call__", "__main__"})
#: IPython's input and output history: values the course's cells left behind.
_HISTORY = re.compile(r"^(In|Out|_oh|_ih|_dh|_ii|_iii|_i|__|___|_|_i?\d+)$")
_DUNDER = re.compile(r"^__\w+__$")


class AnswerPolicyError(Exception):
    """Raised in the kernel, in place of an answer cell that the policy refused."""


@dataclass(frozen=True)
class Violation:
    """One construct of a cell that the policy refuses: where (1-based line), what, why."""

    line: int
    construct: str
    why: str


def _top(module: str) -> str:
    return module.split(".")[0]


_TRANSFORMER = []


def python_of(source: str) -> str:
    """``source`` as the kernel compiles it: IPython's magics and shell escapes rewritten
    into the calls they make (``get_ipython().run_line_magic(...)``)."""
    if not any(mark in source for mark in "%!?"):  # what each of IPython's rewrites needs
        return source
    try:
        if not _TRANSFORMER:
            from IPython.core.inputtransformer2 import TransformerManager

            _TRANSFORMER.append(TransformerManager())
        return _TRANSFORMER[0].transform_cell(source)
    except Exception:  # noqa: BLE001 - IPython absent or the cell malformed: the text as is
        return source


def _answer_sources(nb) -> list[str]:
    return [
        "".join(c["source"]) if isinstance(c.get("source"), list) else str(c.get("source", ""))
        for c in nb["cells"]
        if c.get("cell_type") == "code"
        and isinstance(c.get("metadata", {}).get("nbgrader"), dict)
        and c["metadata"]["nbgrader"].get("solution")
    ]


def allowed_modules(solution: str | Path) -> frozenset[str]:
    """The top-level modules the answers of an assignment may import: those its solution
    notebook's answer cells import, :data:`SAFE_STDLIB` and :data:`SAFE_EXTRA`."""
    nb = json.loads(Path(solution).read_text(encoding="utf-8"))
    allowed = {*SAFE_STDLIB, *SAFE_EXTRA}
    for source in _answer_sources(nb):
        try:
            tree = ast.parse(python_of(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                allowed |= {_top(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                allowed.add(_top(node.module))
    return frozenset(allowed)


def course_module_names(sources: list[str], allowed: frozenset[str]) -> frozenset[str]:
    """Names the course's own cells (``sources``) bind to imports outside ``allowed``."""
    names = set()
    for source in sources:
        try:
            tree = ast.parse(python_of(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if _top(a.name) not in allowed:
                        names.add(a.asname or _top(a.name))
            elif isinstance(node, ast.ImportFrom) and (
                node.level or _top(node.module or "") not in allowed
            ):
                names |= {a.asname or a.name for a in node.names}
    return frozenset(names)


def violations(
    source: str, allowed: frozenset[str], course_names: frozenset[str] = frozenset()
) -> list[Violation]:
    """What the cell ``source`` uses that the policy refuses (see the module docstring), in
    the order of the source; empty for a cell that does not parse."""
    try:
        tree = ast.parse(python_of(source))
    except (SyntaxError, ValueError):
        return []
    bound = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    found: list[Violation] = []
    ends: dict[int, int] = {}
    only = "a module this assignment's answers may not import"

    def name_use(node, name: str) -> None:
        if name in BANNED:
            found.append(Violation(node.lineno, name, BANNED[name]))
        elif _DUNDER.match(name) and name not in DUNDERS_ALLOWED:
            found.append(Violation(node.lineno, name, "reflection: reaches other code's objects"))
        else:
            return
        ends[id(found[-1])] = getattr(node, "end_col_offset", 0) or 0

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _top(a.name) not in allowed:
                    found.append(Violation(node.lineno, a.name, only))
                for part in a.name.split(".")[1:]:  # numpy.ctypeslib
                    name_use(node, part)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.level or _top(module) not in allowed:
                found.append(Violation(node.lineno, module, only))
            for part in (node.module or "").split(".")[1:]:
                name_use(node, part)
            for a in node.names:
                name_use(node, a.name)
        elif isinstance(node, ast.Attribute):
            name_use(node, node.attr)
        elif isinstance(node, ast.Name):
            name_use(node, node.id)
            if isinstance(node.ctx, ast.Load):
                if node.id in course_names:
                    why = "a module the course's own cells imported, not one an answer may use"
                    found.append(Violation(node.lineno, node.id, why))
                elif _HISTORY.match(node.id) and node.id not in bound:
                    why = "IPython's history holds what other cells left behind"
                    found.append(Violation(node.lineno, node.id, why))
    # In reading order: by line, then where the construct ends (``a.b.c``: ``b`` before ``c``).
    found.sort(key=lambda v: (v.line, ends.get(id(v), 0)))
    return list(dict.fromkeys(found))


def message(label: str, violation: Violation, allowed: frozenset[str]) -> str:
    """The sentence a student and the instructor read."""
    return (
        f"{label}, line {violation.line}: `{violation.construct}` ({violation.why}). "
        f"Answers may import only {', '.join(sorted(allowed))}, and not reach code by strings "
        "or reflection: the library's own implementation is not an answer, and earns no points"
    )


def stub(source: str, text: str) -> str:
    """The code the kernel runs in place of a refused cell: each function and class the cell
    defines at its top level becomes a function raising :class:`AnswerPolicyError` with
    ``text``, then the cell itself raises it."""
    try:
        tree = ast.parse(python_of(source))
        names = [
            n.name
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
        names += [
            t.id
            for n in tree.body
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name)
        ]
    except (SyntaxError, ValueError):
        names = []
    lines = [
        "# Not run: the answer policy refused this cell (normedu.course.policy).",
        "class AnswerPolicyError(Exception):",
        "    pass",
        "",
        f"_normedu_policy = {text!r}",
    ]
    for name in dict.fromkeys(names):
        lines += [
            "",
            f"def {name}(*args, **kwargs):",
            "    raise AnswerPolicyError(_normedu_policy)",
        ]
    lines += ["", "raise AnswerPolicyError(_normedu_policy)", ""]
    return "\n".join(lines)


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _normal(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _restored(cell) -> bool:
    """A cell nbgrader restores from the gradebook (a test cell, a locked cell)."""
    meta = cell.get("metadata", {}).get("nbgrader")
    return (
        isinstance(meta, dict)
        and not meta.get("solution")
        and bool(meta.get("grade") or meta.get("locked"))
    )


def course_sources(*notebooks) -> set[str]:
    """The code cells of the course's own notebooks (the release, the solution) that are no
    answer: a hand-in's cell with the same text is the course's, not the student's."""
    return {
        _normal(_source(c))
        for nb in notebooks
        if nb is not None
        for c in nb["cells"]
        if c.get("cell_type") == "code"
        and not (c.get("metadata", {}).get("nbgrader") or {}).get("solution")
    }


def police(nb, allowed: frozenset[str], course: set[str]) -> dict[int, str]:
    """``{cell index: sentence}`` for each cell of the sanitized notebook ``nb`` that the
    student wrote and the policy refuses (the first violation of the cell; see
    :func:`violations`). ``course``: :func:`course_sources`."""
    mine, theirs = [], []
    for index, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        if _restored(cell) or _normal(_source(cell)) in course:
            theirs.append(_source(cell))
        else:
            mine.append(index)
    names = course_module_names(theirs, allowed)
    refused = {}
    for index in mine:
        cell = nb["cells"][index]
        found = violations(_source(cell), allowed, names)
        if found:
            meta = cell.get("metadata", {}).get("nbgrader") or {}
            label = (
                f"answer cell `{meta['grade_id']}`"
                if meta.get("solution") and meta.get("grade_id")
                else f"cell {index} (not a cell of the release)"
            )
            refused[index] = message(label, found[0], allowed)
    return refused
