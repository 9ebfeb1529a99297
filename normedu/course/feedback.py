"""``normedu feedback``: one HTML page per student, hidden tests kept hidden.

nbgrader's ``generate_feedback`` renders each autograded notebook with the course
configuration's feedback steps (:data:`normedu.course.config.FEEDBACK_PREPROCESSORS`):
:class:`~normedu.course.nbgrader_bridge.StudentTracebacks` removes the frames inside the
grading code (and the grading machine's paths) and shortens the error of a cell that holds
hidden tests to ``ename: evalue`` (a traceback quotes the failing source line, which would
reveal the hidden test), then nbgrader's ``ClearHiddenTests`` removes the hidden regions from
the shown source. Every page then gets a banner with the submission's status and
notes; a submission that could not be graded gets a page that says why.

The pages show the hand-in inert (:mod:`normedu.course.inert`, set on nbgrader's
``HTMLExporter`` by the course configuration: no student script, one line saying what was
left out), and each carries a Content-Security-Policy whose nonce only the page's own MathJax
scripts hold (:func:`_with_policy`).
"""

from __future__ import annotations

import html
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import status as st
from .checks import expected_cells
from .config import Course, ensure_alembic, silence_nbgrader_warnings

_MATHJAX_BLOCK = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
_TOC_ENTRY = re.compile(r'<a href="#(?P<id>[^"]+)">Test cell</a>')
#: Where the feedback pages find MathJax: one copy beside the students' folders.
MATHJAX_DIR = "_mathjax"


def _offline_math(text: str, course: Course, nonce: str) -> str:
    """Load the course's vendored MathJax 3 (``assets/mathjax``, copied once to
    ``feedback/_mathjax``) instead of nbgrader's CDN MathJax 2, so math renders offline; its
    scripts carry the page's ``nonce`` (the page's policy runs no other script). MathJax's
    ``ui/safe`` extension keeps ``\\href{javascript:...}`` in a formula from making a link."""
    vendored = course.root / "assets" / "mathjax"
    if not (vendored / "tex-mml-chtml.js").is_file():
        # A course without the vendored copy keeps nbgrader's CDN MathJax, whose two scripts
        # (in the template's head, before any hand-in content) get the nonce.
        return _MATHJAX_BLOCK.sub(
            lambda m: m.group(0).replace("<script", f'<script nonce="{nonce}"'), text, count=1
        )
    target = course.root / course.feedback / MATHJAX_DIR
    if not (target / "tex-mml-chtml.js").is_file():
        shutil.copytree(vendored, target, dirs_exist_ok=True)
    # feedback/<student>/<assignment>/<notebook>.html -> feedback/_mathjax/
    script = (
        f'<script nonce="{nonce}">window.MathJax = {{loader: {{load: ["ui/safe"]}}, '
        "tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], processEscapes: true}};</script>\n"
        f'<script nonce="{nonce}" defer src="../../{MATHJAX_DIR}/tex-mml-chtml.js"></script>'
    )
    return _MATHJAX_BLOCK.sub(lambda _: script, text, count=1)


_HEAD = re.compile(r"<head[^>]*>", re.I)


def _with_policy(text: str, course: Course | None) -> str:
    """The page with its Content-Security-Policy (:func:`normedu.course.inert.csp`) first in
    its head, and its own scripts (MathJax, when ``course`` is given) allowed by nonce."""
    from .inert import csp, page_nonce  # bleach and nbconvert: only when a page is written

    nonce = page_nonce(text)
    if course is not None:
        text = _offline_math(text, course, nonce)
    meta = f'<meta http-equiv="Content-Security-Policy" content="{csp(nonce)}">'
    head = _HEAD.search(text)
    if head is None:
        raise ValueError("feedback page without a <head>: cannot set its security policy")
    return text[: head.end()] + "\n" + meta + text[head.end() :]


def cell_labels(course: Course, assignment: str, notebook: str) -> dict[str, str]:
    """``{grade_id: "grade_id: what it tests"}`` from each test cell's first comment line."""
    labels = {}
    for cell in expected_cells(course.db_url, assignment, notebook):
        if not cell.is_test:
            continue
        first = next(iter(cell.source.strip().splitlines()), "")
        what = first.lstrip("#").strip() if first.lstrip().startswith("#") else ""
        labels[cell.grade_id] = f"{cell.grade_id}: {what}" if what else cell.grade_id
    return labels


def _name_tests(text: str, labels: dict[str, str]) -> str:
    """nbgrader's table of contents calls every test "Test cell": name each one."""

    def label(match: re.Match) -> str:
        gid = match.group("id")
        return f'<a href="#{gid}">{html.escape(labels.get(gid, gid))}</a>'

    return _TOC_ENTRY.sub(label, text)


#: Output lines wrap at the page's width: nbgrader's template keeps each output line on one
#: line (boxes 1,046 px wide held lines up to 1,993 px), so "Likely cause: ..." at the end of
#: a failing test's message was off-screen.
WRAP_STYLE = (
    "<style>div.output_area pre, div.output_subarea pre, .jp-OutputArea-output pre, "
    "div.output_text pre {white-space: pre-wrap !important; overflow-wrap: anywhere;}</style>"
)


def _note_html(note: str) -> str:
    """A note, with `code` spans shown as code and the answer's own errors in bold."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(note))
    return f"<b>{text}</b>" if "<code>" in text and " in <code>" in text else text


def _banner(verdict: st.Verdict) -> str:
    items = "".join(f"<li>{_note_html(n)}</li>" for n in verdict.notes)
    tampered = (
        "<p><b>Test cells were changed or deleted</b>: the originals were graded.</p>"
        if verdict.tampered
        else ""
    )
    return (
        '<div style="border:2px solid #0072B2;padding:0.6em 1em;margin:1em;font-family:sans-serif">'
        f"<p><b>Status:</b> {html.escape(verdict.status)}</p>{tampered}"
        f"{'<ul>' + items + '</ul>' if items else ''}</div>"
    )


def _finish(course: Course, text: str, verdict: st.Verdict | None, labels: dict) -> str:
    """nbgrader's feedback page made normedu's: offline math, named tests, wrapped output
    lines and the status box (none without a verdict: a page of a stock nbgrader grade)."""
    text = _name_tests(text, labels)
    text = text.replace("</head>", WRAP_STYLE + "</head>", 1)
    head, sep, tail = text.partition("<body")
    if sep and verdict is not None:
        close = tail.index(">") + 1
        text = head + sep + tail[:close] + _banner(verdict) + tail[close:]
    return _with_policy(text, course)


def formgrader_hook(assignment: str, student: str, notebooks: list[str]) -> None:
    """nbgrader's ``GenerateFeedback.post_convert_hook`` (set in the course configuration):
    Formgrader's *Generate Feedback* button and stock ``nbgrader generate_feedback`` then
    finish each page as ``normedu feedback`` does (status box, offline math, named tests)
    instead of leaving nbgrader's bare page. nbgrader calls it once per student, from the
    course root, with the autograded notebooks (``autograded/<student>/<a>/<nb>.ipynb``)."""
    course = Course.at(Path.cwd())
    for source in map(Path, notebooks):
        who, which = source.parent.parent.name, source.parent.name
        page = course.feedback_dir(who, which) / f"{source.stem}.html"
        if not page.exists() or WRAP_STYLE in page.read_text():
            continue  # not written by this run, or already finished
        verdict = st.load(course, which, who)
        labels = cell_labels(course, which, source.stem)
        page.write_text(_finish(course, page.read_text(), verdict, labels))


def _ungradable_page(verdict: st.Verdict, assignment: str) -> str:
    return _with_policy(
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(assignment)}: feedback"
        f"</title></head><body><h1>{html.escape(assignment)}</h1>"
        "<p>Your submission could not be graded. Nothing in it was run.</p>"
        f"{_banner(verdict)}<p>Hand in the notebook file (<code>.ipynb</code>) of this assignment, "
        "saved from Jupyter.</p></body></html>",
        None,
    )


@dataclass
class FeedbackReport:
    """``pages``: ``{student: page}`` of every graded student asked for; ``written``: the
    students whose page changed and was written (the others were left as they were)."""

    pages: dict[str, Path] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)


def feedback(course: Course, assignment: str, students: list[str] | None = None) -> dict[str, Path]:
    """Write ``feedback/<student>/<a>/<nb>.html`` for every graded student (or ``students``).
    Returns ``{student: page}``; see :func:`write_feedback`."""
    return write_feedback(course, assignment, students).pages


def _render(course: Course, assignment: str, runnable: list[str], scratch: Path) -> None:
    """nbgrader's ``generate_feedback`` of ``runnable`` into the folder ``scratch``."""
    from nbgrader.converters import GenerateFeedback
    from nbgrader.utils import capture_log, temp_attrs

    everyone = {p.name for p in (course.root / course.autograded).iterdir() if p.is_dir()}
    # The course configuration's feedback steps (hidden tests and grading-code tracebacks
    # removed): the same as stock `nbgrader generate_feedback` from the course root.
    # nbgrader joins folders with os.path.join: an absolute feedback folder wins.
    # Without the course's post-convert hook: the pages are finished below, once.
    api = course.api(
        HTMLExporter={"template_name": "feedback"}, GenerateFeedback={"post_convert_hook": None}
    )
    exclude = ",".join(sorted(everyone - set(runnable)))
    with temp_attrs(
        api.coursedir,
        assignment_id=assignment,
        student_id="*",
        student_id_exclude=exclude,
        feedback_directory=str(scratch),
    ):
        app = GenerateFeedback(coursedir=api.coursedir, parent=api)
        app.force = True
        result = capture_log(app)
    if not result.get("success"):
        raise RuntimeError(f"nbgrader generate_feedback failed:\n{result.get('log', '')[-4000:]}")


def write_feedback(
    course: Course, assignment: str, students: list[str] | None = None
) -> FeedbackReport:
    """Render the feedback of every graded student (or ``students``) and write the pages
    whose content changed: after one student's re-grade, only their page is rewritten (the
    others keep their files, and their modification times)."""
    silence_nbgrader_warnings()
    ensure_alembic()
    (notebook,) = course.notebooks(assignment)[:1]
    verdicts = st.load_all(course, assignment)
    if students is not None:
        unknown = sorted(set(students) - set(verdicts))
        if unknown:
            raise ValueError(f"no graded submission of {assignment!r} for {unknown}")
        verdicts = {s: v for s, v in verdicts.items() if s in set(students)}
    runnable = sorted(s for s, v in verdicts.items() if st.kind(v.status) not in st.NOT_RUN)
    report = FeedbackReport()
    labels = cell_labels(course, assignment, notebook) if runnable else {}
    with tempfile.TemporaryDirectory(prefix="normedu-feedback-") as tmp:
        scratch = Path(tmp)
        if runnable:
            _render(course, assignment, runnable, scratch)
        for student, verdict in sorted(verdicts.items()):
            page = course.feedback_dir(student, assignment) / f"{notebook}.html"
            rendered = scratch / student / assignment / f"{notebook}.html"
            if st.kind(verdict.status) in st.NOT_RUN:
                text = _ungradable_page(verdict, assignment)
            elif rendered.exists():
                text = _finish(course, rendered.read_text(), verdict, labels)
            else:
                continue
            if not page.exists() or page.read_text() != text:
                page.parent.mkdir(parents=True, exist_ok=True)
                page.write_text(text)
                report.written.append(student)
            report.pages[student] = page
    return report
