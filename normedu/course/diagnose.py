"""Why a graded notebook's answers failed, in one line each, for the status box and the CSV.

A syntax error in an answer cell, or an exception raised inside one of the student's own
functions, otherwise shows only deep in the feedback page, under a test that merely reports
that the function was missing or raised. :func:`answer_errors` reads an executed notebook:

- ``syntax error in `groupnorm_forward` (line 12)``: an answer cell that does not compile;
  the function is the last ``def`` at or above the line (line numbers count in the cell, as
  Jupyter shows them);
- ``NotImplementedError in `groupnorm_backward```: the innermost frame of a traceback that
  lies in a function the answer cells define.

Works on plain and context IPython tracebacks (``Cell In[3], line 2 in f`` / ``..., in f(x)``).
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)", re.M)
_CELL_FRAME = re.compile(r"Cell In\[\d+\], line (\d+)(?:,)? in ([A-Za-z_]\w*)")
_CELL_LINE = re.compile(r"Cell In\[\d+\], line (\d+)")
#: The same, as the trusted side of grading writes it (:func:`.trusted._error_output`).
_TRUSTED_FRAME = re.compile(r"(\w+) raised in `([A-Za-z_]\w*)`, line \d+ of its cell")
_SYNTAX = ("SyntaxError", "IndentationError", "TabError")


def _is_answer(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("solution"))


def _errors(cell):
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _function_at(source: str, line: int) -> str | None:
    """The last function defined at or above ``line`` (1-based) of ``source``."""
    names = [m.group(1) for m in _DEF.finditer("\n".join(source.splitlines()[:line]))]
    return names[-1] if names else None


def answer_errors(nb) -> list[str]:
    """One line per syntax error in an answer cell and per exception raised in a function
    the answer cells define, in notebook order, each once."""
    own = {name for cell in nb.cells if _is_answer(cell) for name in _DEF.findall(cell.source)}
    found: list[str] = []
    for cell in nb.cells:
        for out in _errors(cell):
            text = _ANSI.sub("", "".join(out.get("traceback", [])))
            ename = out.get("ename", "")
            if ename in _SYNTAX and _is_answer(cell):
                lines = _CELL_LINE.findall(text) or re.findall(r"line (\d+)", out.get("evalue", ""))
                line = int(lines[-1]) if lines else 0
                func = _function_at(cell.source, line) if line else None
                where = f"`{func}`" if func else "an answer cell"
                found.append(f"syntax error in {where}" + (f" (line {line})" if line else ""))
                continue
            frames = [f for _, f in _CELL_FRAME.findall(text) if f in own]
            if frames:
                found.append(f"{ename} in `{frames[-1]}`")
                continue
            raised = [(e, f) for e, f in _TRUSTED_FRAME.findall(text) if f in own]
            if raised:
                found.append(f"{raised[-1][0]} in `{raised[-1][1]}`")
    return list(dict.fromkeys(found))
