"""Hand-ins shown inert (issue 47), without a browser: :mod:`normedu.course.inert`.

The sanitizer's output is read back with a parser of its own (the standard library's), and
judged by what would run in a browser: a script-capable element, an event handler, a URL that
is not http(s), mailto, an anchor or (for an image) a data URL of an image, a style that may
fetch. Honest content is checked against what the student wrote. The browser test is
``test_lab.py::test_formgrader_and_feedback_show_hand_ins_inert``.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from handin_injections import (
    FORMULA,
    MARKDOWN_VECTORS,
    MORE_VECTORS,
    OUTPUT_CODE,
    TABLE,
    WIDGET_STATE,
    png_base64,
    svg_attachment_cell,
)
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from normedu.course.config import Course
from normedu.course.inert import NOTE, InertHandIn, _clean, clean_html, render_markdown

#: What can run script or fetch in a page, whatever else a sanitizer keeps.
ACTIVE_TAGS = set(
    "script iframe frame frameset object embed applet svg math style base meta link form "
    "input button textarea select noscript template portal audio video source".split()
)
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "srcdoc", "xlink:href"}


class _Page(HTMLParser):
    """Every element with its attributes (entities decoded, as a browser reads them)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    handle_startendtag = handle_starttag


def elements(text: str) -> list[tuple[str, dict[str, str]]]:
    page = _Page()
    page.feed(text)
    page.close()
    return page.elements


def dangers(text: str) -> list[str]:
    """What in ``text`` could run script or fetch without a click."""
    found = []
    for tag, attrs in elements(text):
        if tag in ACTIVE_TAGS:
            found.append(f"<{tag} {sorted(attrs.items())}>")
        for name, value in attrs.items():
            url = re.sub(r"[\x00-\x20]", "", value).lower()
            if name.startswith("on"):
                found.append(f"<{tag} {name}>")
            elif name in URL_ATTRIBUTES and not (
                url.startswith(("http://", "https://", "mailto:", "#"))
                or (tag == "img" and re.match(r"data:image/(png|jpeg|gif|svg\+xml);", url))
            ):
                found.append(f"<{tag} {name}={value[:30]!r}>")
            elif name == "style" and re.search(r"url|expression|import", url):
                found.append(f"<{tag} style={value!r}>")
    return found


@pytest.mark.parametrize("name", sorted(MARKDOWN_VECTORS))
def test_markdown_vector_is_inert_and_said(name):
    markup = MARKDOWN_VECTORS[name]
    raw = render_markdown(f"Before {markup} after")
    removed = Counter()
    shown = clean_html(raw, removed)
    assert dangers(raw), f"{name}: the vector is harmless even unsanitized: {raw}"
    assert dangers(shown) == [], shown
    # The vector's code survives as text at most (a title is text too).
    kept = [f"{k}={v}" for _, attrs in elements(shown) for k, v in attrs.items() if k != "title"]
    assert "pwned" not in str(kept), kept
    assert "Before" in shown  # the text before it stays
    assert sum(removed.values()) >= 1, f"{name}: removed but not counted"
    assert _clean(shown) == (shown, ())  # idempotent (uncached): a template cleans twice


@pytest.mark.parametrize("name", sorted(MORE_VECTORS))
def test_more_vectors_leave_nothing_that_runs(name):
    # These need a browser to show they are dangerous at all (the browser test shows it);
    # here: nothing in what is shown can run or fetch, and their code is text at most.
    shown = clean_html(render_markdown(f"Before {MORE_VECTORS[name]} after"))
    assert dangers(shown) == [], shown
    kept = [f"{k}={v}" for _, attrs in elements(shown) for k, v in attrs.items() if k != "title"]
    assert "pwned" not in str(kept) and "javascript" not in str(kept).lower(), kept


def test_what_remains_of_links_and_handlers():
    # Each one hand-checked: the harmless part stays, the active part goes.
    cases = {
        '<details open ontoggle="x()">d</details>': "<details open>d</details>",
        '<a href="JaVaScRiPt:x()">grade me</a>': "<a>grade me</a>",
        '<a href="https://example.org/x?a=1&amp;b=2">ok</a>': (
            '<a href="https://example.org/x?a=1&amp;b=2">ok</a>'
        ),
        '<p style="color: red; position: fixed">c</p>': '<p style="color: red;">c</p>',
        '<img src="data:image/png;base64,AAAA" width="5 onerror=x()">': (
            '<img src="data:image/png;base64,AAAA">'
        ),
        "a &lt;script&gt; b": "a &lt;script&gt; b",
        '<marquee onstart="x()">m</marquee>': "m",
    }
    for given, expected in cases.items():
        assert clean_html(given) == expected, given


def test_honest_markdown_keeps_formulas_tables_images_and_code():
    png = png_base64()
    source = (
        f"# Centering\n\n{FORMULA}\n\n{TABLE}\n\n![plot](attachment:plot.png)\n\n"
        "```python\nx - x.mean(axis=1)\n```\n\n[the paper](https://arxiv.org/abs/1607.06450)"
    )
    removed = Counter()
    shown = clean_html(render_markdown(source, {"plot.png": {"image/png": png}}), removed)
    assert removed == Counter()
    assert FORMULA.split(" and")[0] in html.unescape(shown)  # the display formula, verbatim
    assert r"$\sigma_i > 0$" in html.unescape(shown)
    tags = [tag for tag, _ in elements(shown)]
    assert tags.count("td") == 2 and tags.count("th") == 2 and "h1" in tags
    (img,) = [a for t, a in elements(shown) if t == "img"]
    assert img["src"] == f"data:image/png;base64,{png}" and img["alt"] == "plot"
    assert "x - x.mean(axis=1)" in html.unescape(re.sub(r"<[^>]+>", "", shown))
    assert '<a href="https://arxiv.org/abs/1607.06450">the paper</a>' in shown
    # The heading's anchor still leads to it (both renamed: no clash with the page's ids).
    heading = dict(elements(shown))["h1"]["id"]
    assert f'href="#{heading}"' in shown and heading != "Centering"


def test_pandas_table_stays_a_table():
    frame = (
        "<div><style scoped>.dataframe tbody tr th {vertical-align: top;}</style>"
        '<table border="1" class="dataframe"><thead><tr style="text-align: right;">'
        "<th></th><th>mean</th></tr></thead><tbody><tr><th>0</th><td>1.5</td></tr>"
        "</tbody></table></div>"
    )
    shown = clean_html(frame)
    assert "vertical-align" not in shown  # the style sheet goes, with its text
    assert shown.endswith(frame[frame.index("<table") :])


def _notebook(png: str) -> nbformat.NotebookNode:
    """A notebook with one of each kind of output, dangerous and honest."""
    code = new_code_cell("Shown()")
    code.outputs = [
        new_output(
            "execute_result",
            data={
                "text/plain": "Shown()",
                "text/html": "<b>bold</b><script>pwned()</script>",
                "application/javascript": "pwned()",
                "text/markdown": "<img src=x onerror=pwned()>",
            },
            execution_count=1,
        ),
        new_output(
            "display_data",
            data={"application/vnd.jupyter.widget-view+json": {"model_id": "x"}, "text/plain": "w"},
        ),
        new_output(
            "display_data",
            data={"image/png": png, "text/plain": "<Figure>"},
            metadata={"image/png": {"width": "1 onerror=pwned()", "height": 40}},
        ),
    ]
    raw = nbformat.v4.new_raw_cell("<script>pwned()</script>raw", metadata={})
    raw.metadata["raw_mimetype"] = "text/html"
    nb = new_notebook(
        cells=[new_markdown_cell("intro"), code, raw, svg_attachment_cell()],
        metadata={"widgets": WIDGET_STATE},
    )
    # Not in nbformat's schema (a notebook with it is not written), but in the template.
    code.outputs[2]["svg_filename"] = '"><script>pwned()</script>'
    return nb


def test_preprocessor_cleans_outputs_and_says_what_in_one_line():
    png = png_base64()
    named = {"first_name": "<img src=x onerror=pwned()>", "last_name": "Doe"}
    nb, resources = InertHandIn().preprocess(_notebook(png), named)
    assert resources["first_name"] == "&lt;img src=x onerror=pwned()&gt;"  # Formgrader's header
    note, _, code, raw, _ = nb.cells
    assert note.source.startswith(f"**{NOTE}:**") and "\n" not in note.source
    removed = resources["normedu"]["removed"]
    assert removed["JavaScript output"] == 1 and removed["widget"] == 1
    assert removed["widget state"] == 1 and removed["script"] == 2  # html output, raw cell
    # nbconvert writes an SVG attachment's text where base64 belongs: no image, no script.
    assert removed["unsafe URL"] == 2  # that one, and the Markdown output's src=x
    for what in ("1 JavaScript output", "1 widget,", "1 widget state", "2 scripts"):
        assert what in note.source, note.source
    result, widget, image = code.outputs
    assert set(result.data) == {"text/plain", "text/html", "text/markdown"}
    assert result.data["text/html"] == "<b>bold</b>"
    assert set(widget.data) == {"text/plain"}
    assert image.data["image/png"] == png and image.metadata == {"image/png": {"height": 40}}
    assert "svg_filename" not in image
    assert raw.source == "raw" and "widgets" not in nb.metadata


def test_nothing_removed_means_no_note():
    nb = new_notebook(cells=[new_markdown_cell(f"{FORMULA}\n\n{TABLE}"), new_code_cell("1")])
    out, resources = InertHandIn().preprocess(nb, {})
    assert len(out.cells) == 2 and resources["normedu"]["removed"] == {}


@pytest.mark.parametrize("template", ["formgrade", "classic"])
def test_course_exporter_shows_every_vector_inert(tmp_path, template):
    """The course configuration's HTMLExporter, with Formgrader's grading template and
    nbconvert's classic one (nbgrader's feedback template extends it): the page holds no
    script, handler or frame but the template's own (those of an honest notebook's page),
    and the file it was made from is unchanged."""
    from importlib.util import find_spec

    from nbconvert.exporters import HTMLExporter

    # Formgrader's templates, found without importing nbgrader (seconds of imports).
    (package,) = find_spec("nbgrader").submodule_search_locations
    templates = Path(package) / "server_extensions" / "formgrader" / "templates"

    vectors = {**MARKDOWN_VECTORS, **MORE_VECTORS}
    cells = [new_markdown_cell(f"{n}: {v}") for n, v in vectors.items()]
    code = new_code_cell(OUTPUT_CODE)
    nb = _notebook(png_base64())
    nb.cells[1:1] = [*cells, code]
    del nb.cells[-3].outputs[2]["svg_filename"]
    path = tmp_path / "hand-in.ipynb"
    nbformat.write(nb, path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    config = Course(root=tmp_path).nbgrader_config()
    config.HTMLExporter.template_name = template
    config.HTMLExporter.extra_template_basedirs = [str(templates)]
    exporter = HTMLExporter(config=config)
    resources = {"base_url": "", "index": 0, "total": 1}
    page, _ = exporter.from_filename(str(path), resources=resources)
    honest = new_notebook(cells=[new_markdown_cell(FORMULA)])
    template_own, _ = exporter.from_notebook_node(honest, resources=resources)
    assert dangers(template_own)  # the template's own scripts: found, and the only ones
    assert dangers(page) == dangers(template_own)
    assert page.count(NOTE) == 1
    assert "grade me" in page  # the links' text stays
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_feedback_page_policy_allows_only_its_own_scripts(tmp_path):
    from normedu.course.feedback import _finish

    course = Course(root=tmp_path)
    (tmp_path / "assets" / "mathjax").mkdir(parents=True)
    (tmp_path / "assets" / "mathjax" / "tex-mml-chtml.js").write_text("// MathJax")
    nbgrader_page = (
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset='utf-8'>\n<!-- Load mathjax -->"
        '<script src="https://cdn/MathJax.js"></script><!-- End of mathjax configuration -->'
        "</head><body><p>$x$</p></body></html>"
    )
    page = _finish(course, nbgrader_page, None, {})
    assert page == _finish(course, nbgrader_page, None, {})  # same page, same nonce
    head = page[page.index("<head>") + len("<head>") :].lstrip()
    match = re.match(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', head)
    assert match, head[:200]  # first in the head: it governs every script after it
    policy = dict(p.strip().split(" ", 1) for p in match.group(1).split(";"))
    nonce = re.fullmatch(r"'nonce-([A-Za-z0-9+/=]{16,})' 'strict-dynamic'", policy["script-src"])
    assert nonce and "unsafe-inline" not in policy["script-src"]
    assert policy["connect-src"] == "'none'" and policy["base-uri"] == "'none'"
    scripts = re.findall(r"<script[^>]*>", page)
    assert len(scripts) == 2 and all(f'nonce="{nonce.group(1)}"' in s for s in scripts)
    assert "cdn" not in page and "ui/safe" in page
    assert Path(tmp_path / "feedback" / "_mathjax" / "tex-mml-chtml.js").is_file()
