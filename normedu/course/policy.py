"""The answer policy: how a hand-in's own cells run in the grading kernel, and what is noted.

It no longer decides what an answer may use: the grading kernel's reach does
(:mod:`.reach`: no reference, no library's norm, whatever the code writes), and the grade is
decided on the trusted side from the values the student's functions return (:mod:`.trusted`).
An answer may import the standard library, NumPy, SciPy, Matplotlib, ``__future__``, use type
hints, literal ``getattr``, helper functions and classes, prints, plots and IPython's magics.

Before anything of a hand-in runs, the grading parent reads every code cell the student wrote
(each answer cell, and any cell added or edited outside them; the course's own cells,
restored from the gradebook or unchanged from the release, are left alone) and

- **rewrites its magics and shell lines** (:func:`grading_source`): a line magic or shell
  line (``%timeit f(x)``, ``!python --version``, ``x = !ls``, ``f?``) runs as ``None`` with a
  comment, on the same line, so the rest of the cell still defines its functions and line
  numbers stay right; a cell magic that only measures or captures (``%%time``, ``%%timeit``,
  ``%%capture``, ``%%prun``) runs its body once; any other cell magic (``%%bash``,
  ``%%writefile`` ...) is skipped whole. The kernel runs the rewritten cell (the job's
  ``replace``); the graded notebook keeps the student's. A magic that cannot run in the
  sandbox therefore never costs an answer's points, nor minutes of ``%timeit``.
- **notes for review** (:func:`review_notes`) the constructs an honest answer rarely needs
  and interference does (:data:`REVIEW`: reflection into other code's frames or the whole
  process, IPython's execution hooks, torch's C bindings): a note "needs review: ... line N"
  for the instructor, which takes no point and sets no flag. Whether a kernel actually
  interfered is decided elsewhere, from evidence (:mod:`.trusted`, :mod:`.forged`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

#: Constructs noted for the instructor's review, with why (names, attributes or imports).
REVIEW: dict[str, str] = {
    "gc": "reaches every object of the process",
    "ctypes": "reaches the process's memory",
    "f_back": "walks up to other code's frames",
    "f_globals": "reads the globals of other code",
    "tb_frame": "reaches a frame, then other code's",
    "gi_frame": "reaches a frame, then other code's",
    "__subclasses__": "reflection over every class of the process",
    "__globals__": "reads the globals of other code",
    "__builtins__": "reaches and may replace the builtins",
    "set_custom_exc": "changes how IPython reports errors (the test cells' too)",
    "input_transformers_cleanup": "rewrites the cells IPython runs (the test cells too)",
    "input_transformers_post": "rewrites the cells IPython runs (the test cells too)",
    "ast_transformers": "rewrites the cells IPython runs (the test cells too)",
    "_VariableFunctions": "torch's C bindings, where a library norm still lives",
    "_jit_get_operation": "torch's dispatcher, where a library norm still lives",
}
#: Cell magics whose body is Python that runs once without them (they only time or capture).
RUN_BODY = ("time", "timeit", "capture", "prun")
#: A line IPython rewrote into one of its calls (a line magic, a shell line, ``?``).
_IPYTHON_CALL = re.compile(
    r"^(?P<lead>\s*(?:[\w.\[\], ]+\s*=\s*)?)get_ipython\(\)\."
    r"(?:run_line_magic|system|getoutput)\(.*\)\s*$"
)


@dataclass(frozen=True)
class Finding:
    """One construct of a cell noted for review: where (1-based line), what, why."""

    line: int
    construct: str
    why: str


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


def grading_source(source: str) -> str | None:
    """The cell as a grading kernel runs it (see the module docstring), or None when it has
    no magic and no shell line (it runs as written)."""
    lines = source.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = (lines[first].lstrip()[2:].split(maxsplit=1) or [""])[0]
        note = f"# skipped while grading: {lines[first].strip()}"
        if name in RUN_BODY:
            body = "\n".join([*lines[:first], note, *lines[first + 1 :]])
            return grading_source(body) or body
        return "".join(line + "\n" for line in ["pass  " + note] + ["" for _ in lines[1:]])
    python = python_of(source)
    if python == source:
        return None
    out, changed = [], False
    plines = python.splitlines()
    if len(plines) != len(lines):  # a rewrite that joined lines: run nothing of it
        return "pass  # skipped while grading: IPython syntax in this cell"
    for original, line in zip(lines, plines, strict=True):
        match = _IPYTHON_CALL.match(line)
        if match:
            lead = match.group("lead")
            out.append(f"{lead}None  # skipped while grading: {original.strip()}"[:400])
            changed = True
        else:
            out.append(line)
    return "\n".join(out) + "\n" if changed else None


def review_notes(source: str) -> list[Finding]:
    """The constructs of :data:`REVIEW` in the cell ``source``, in reading order; empty for a
    cell that does not parse."""
    try:
        tree = ast.parse(grading_source(source) or source)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Import):
            names = [part for a in node.names for part in a.name.split(".")]
        elif isinstance(node, ast.ImportFrom):
            names = [*(node.module or "").split("."), *(a.name for a in node.names)]
        for name in names:
            if name in REVIEW:
                found.append(Finding(node.lineno, name, REVIEW[name]))
    found.sort(key=lambda f: f.line)
    return list(dict.fromkeys(found))


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


def police(nb, course: set[str]) -> tuple[dict[int, str], list[str]]:
    """For the sanitized notebook ``nb``: ``({cell index: source the kernel runs}, notes)``:
    the cells the student wrote that hold magics or shell lines, rewritten
    (:func:`grading_source`), and a "needs review" note per construct of :data:`REVIEW`.
    ``course``: :func:`course_sources`."""
    replace: dict[int, str] = {}
    notes: list[str] = []
    for index, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        source = _source(cell)
        if _restored(cell) or _normal(source) in course:
            continue
        rewritten = grading_source(source)
        if rewritten is not None:
            replace[index] = rewritten
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        label = (
            f"answer cell `{meta['grade_id']}`"
            if meta.get("solution") and meta.get("grade_id")
            else f"cell {index} (not a cell of the release)"
        )
        for f in review_notes(source):
            notes.append(
                f"needs review: {label}, line {f.line}: `{f.construct}` ({f.why}); "
                "graded on what its functions return, no points taken"
            )
    return replace, notes
