"""The class report as one HTML page (:func:`render`): inert, offline, accessible.

- Inert by construction: every string that comes from a student (ids, the messages their
  code raised, a status's detail) goes through :func:`_e` (``html.escape``, quotes too), the
  page has no script at all, and its Content-Security-Policy allows no script, no request
  and no frame: only its own inline style and its ``data:`` images.
- Offline: the figures (:mod:`normedu.plots.course_report`) are PNGs embedded as ``data:``
  URLs; no font, stylesheet or script is fetched.
- Accessible: each figure's ``alt`` text states what it shows, from the same numbers (and
  each has a table of those numbers); tables have captions and column headers; text wraps
  anywhere, so nothing scrolls sideways on a 375 px phone.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import TYPE_CHECKING

from .report import Cause, ClassReport, records, score_bands, summarize

if TYPE_CHECKING:
    from .config import Course

__all__ = ["render", "histogram_alt", "pass_alt", "write_report"]

#: Shown where a list of students is long: the first names, the rest behind "show all".
SHORT_LIST = 8

#: No script, request, frame or form: only the page's own style and its ``data:`` images.
#: (``frame-ancestors`` would be ignored in a ``<meta>``, with a console warning.)
CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'"
)

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;
background:#fff;margin:0;line-height:1.45}
main{max-width:62rem;margin:0 auto;padding:1rem}
h1{font-size:1.6rem}h2{font-size:1.3rem;margin-top:2rem}
table{border-collapse:collapse;width:100%;margin:.5rem 0 1rem}
caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid #b0b0b0;padding:.3rem .45rem;text-align:left;vertical-align:top}
th{background:#eef2f6}
td,th,p,li,figcaption{overflow-wrap:anywhere}
summary{overflow-wrap:normal}
td.n{text-align:right;white-space:nowrap}
img{max-width:100%;height:auto}
figure{margin:1rem 0}
figcaption{color:#404040;font-size:.95rem}
.cells{color:#404040;font-size:.9rem}
""".strip()


def _e(text: object) -> str:
    """Any text, escaped for HTML content and attributes: nothing in it becomes markup."""
    return html.escape(str(text), quote=True)


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _png(fig) -> str:
    """A Matplotlib figure as a ``data:`` URL (PNG)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _people(students: list[str]) -> str:
    """Students' ids, escaped; a long list folds behind a ``<details>``."""
    if not students:
        return "none"
    names = ", ".join(_e(s) for s in students)
    if len(students) <= SHORT_LIST:
        return names
    return f"<details><summary>all {len(students)} students</summary>{names}</details>"


def histogram_alt(report: ClassReport) -> str:
    """What the score histogram shows, in words."""
    scores, top = report.scores, report.max_score
    bands = "; ".join(f"{lo:g}–{hi:g}: {n}" for lo, hi, n in score_bands(scores, top))
    full = sum(s >= top - 1e-9 for s in scores)
    zero = sum(s <= 1e-9 for s in scores)
    return (
        f"Histogram of the total scores of {len(scores)} graded hand-ins, out of {top:g} "
        f"points: median {report.median:g}, mean {report.mean:.1f}; {full} with full marks, "
        f"{zero} with 0. Students per score band: {bands}."
    )


def pass_alt(report: ClassReport) -> str:
    """What the pass-share chart shows, in words."""
    parts = "; ".join(f"{c.grade_id} {_pct(c.share)} ({c.passed} of {c.of})" for c in report.cells)
    return (
        f"Bar chart of the share of the {len(report.graded)} graded hand-ins that passed each "
        f"test cell: {parts}."
    )


def _table(caption: str, head: list[str], rows: list[list[str]], numeric=()) -> str:
    """A table; ``rows`` hold HTML already escaped; columns in ``numeric`` align right."""
    ths = "".join(f'<th scope="col">{_e(h)}</th>' for h in head)
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=n' if i in numeric else ''}>{v}</td>" for i, v in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><caption>{_e(caption)}</caption><thead><tr>{ths}</tr></thead>{body}</table>"


def _figure(fig, alt: str, caption: str, width: int = 700) -> str:
    height = round(fig.get_figheight() * 100)
    return (
        f'<figure><img src="{_png(fig)}" alt="{_e(alt)}" width="{width}" height="{height}">'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def _scores(report: ClassReport) -> str:
    from ..plots.course_report import score_histogram

    bands = score_bands(report.scores, report.max_score)
    rows = [[f"{lo:g} to {hi:g}", str(n)] for lo, hi, n in bands]
    return (
        '<section aria-labelledby="scores"><h2 id="scores">Scores</h2>'
        f"<p>{len(report.graded)} graded hand-ins of {report.students} students: median "
        f"{report.median:g} and mean {report.mean:.1f} of {report.max_score:g} points.</p>"
        + _figure(
            score_histogram(bands, report.max_score),
            histogram_alt(report),
            "Students per score band (a band holds its low end; the last also full marks).",
        )
        + "<details><summary>The numbers behind the histogram</summary>"
        + _table("Students per score band", ["score", "students"], rows, numeric=(1,))
        + "</details></section>"
    )


def _cells(report: ClassReport) -> str:
    from ..plots.course_report import pass_shares

    rows = [
        [_e(c.grade_id), f"{c.points:g}", f"{c.passed} of {c.of}", _pct(c.share)]
        for c in report.cells
    ]
    fig = pass_shares([c.grade_id for c in report.cells], [c.share for c in report.cells])
    return (
        '<section aria-labelledby="cells"><h2 id="cells">Test cells</h2>'
        + _figure(fig, pass_alt(report), "Share of the graded hand-ins with each cell's points.")
        + _table(
            "Full points per test cell, of the graded hand-ins",
            ["test cell", "points", "passed", "share"],
            rows,
            numeric=(1, 2, 3),
        )
        + "</section>"
    )


def _cause_cell(cause: Cause) -> str:
    cells = ", ".join(_e(c) for c in cause.cells)
    return f'{_e(cause.text)}<div class="cells">in {cells}</div>'


def _causes(report: ClassReport) -> str:
    rows = [
        [str(c.count), _pct(c.share), _cause_cell(c), _people(c.students)] for c in report.causes
    ]
    table = (
        _table(
            "Causes named by the grader, most common first",
            ["students", "share", "the message they saw", "who"],
            rows,
            numeric=(0, 1),
        )
        if rows
        else "<p>No failure named a cause.</p>"
    )
    un = report.unnamed
    if un is None:
        unnamed = "<p>None: every failure named its cause.</p>"
    else:
        detail = [[_e(s), _e(g), _e(m)] for s, g, m in un.examples]
        unnamed = (
            f"<p><strong>{un.count} students ({_pct(un.share)})</strong> had a result that "
            "did not match the reference, with no cause named: a mistake the catalogue does "
            "not know yet. Look at these hand-ins.</p>"
            + _table(
                "Failures with no cause named", ["student", "test cell", "what they saw"], detail
            )
        )
    return (
        '<section aria-labelledby="causes"><h2 id="causes">Mistakes by cause</h2>'
        f"<p>Shares are of the {len(report.graded)} graded hand-ins; a student who made "
        "two mistakes counts under both.</p>"
        + table
        + '<h3 id="unnamed">Did not match, no cause named</h3>'
        + unnamed
        + "</section>"
    )


def _flags(report: ClassReport) -> str:
    flags = [[_e(name), str(len(who)), _people(who)] for name, who in report.flags.items()]
    statuses = [[_e(s), str(len(who)), _people(who)] for s, who in report.statuses.items()]
    return (
        '<section aria-labelledby="flags"><h2 id="flags">Flags</h2>'
        + _table("Students to look at", ["flag", "students", "who"], flags, numeric=(1,))
        + _table("Every student by status", ["status", "students", "who"], statuses, numeric=(1,))
        + "</section>"
    )


def render(report: ClassReport) -> str:
    """The whole page (see the module docstring)."""
    title = f"{report.assignment}: class report"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>"
        f"<body><main><h1>{_e(title)}</h1>"
        + _scores(report)
        + _cells(report)
        + _causes(report)
        + _flags(report)
        + "</main></body></html>\n"
    )


def write_report(course: Course, assignment: str, path: str | Path) -> ClassReport:
    """Write the report page of ``assignment`` to ``path``; returns what it shows."""
    tests, people = records(course, assignment)
    report = summarize(assignment, tests, people)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(report), encoding="utf-8")
    return report
