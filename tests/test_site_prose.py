"""What a student reads on the built site: no build talk, real citations, a glossary, alt text.

Static checks of the rendered HTML (no browser). The prose of a page is its article body
without the code cells' source and without literal outputs (printed text, tracebacks): what a
reader reads as sentences, including Markdown that a cell displays. The extractor is tested
first on small planted pages, so a check that finds nothing cannot pass for a clean site.

The phrases a reader must never meet are listed once, in :data:`BANNED_PHRASES`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from site_helpers import REPO, site_dir, toc_pages

#: Build and source talk that must not reach a reader's prose (matched case-insensitively,
#: whitespace collapsed). "seed" alone is fine: a random seed is part of the lesson.
BANNED_PHRASES = (
    "seed article",
    "seed notes",
    "course article",
    "course notes",
    "lost in extraction",
    "NORMEDU_",
    "--store",
    "preset",
    "regenerate",
)
#: ``_toc.yml`` parts whose pages are chapters: each needs "Further reading" and glossary links.
CHAPTER_PARTS = ("Chapters", "Normalization since 2020", "Going further")
#: Parts written for instructors: they may name commands, presets and stored results.
INSTRUCTOR_PARTS = ("Teaching with normedu",)
#: Section titles that count as a chapter's list of sources.
READING_TITLES = ("Further reading", "References")
#: Terms the glossary must define (issue 13).
REQUIRED_TERMS = (
    "internal covariate shift",
    "running statistics",
    "all-reduce",
    "Welford's algorithm",
    "Xavier initialization",
    "Kaiming initialization",
    "mean-field theory",
    "warm-up",
    "AdaBN",
    "read-for-ownership",
    "memory bandwidth",
    "fused kernel",
)
GLOSSARY = "book/glossary"
REFERENCES = "book/references"
LEDGER = "book/claims_ledger"


# --------------------------------------------------------------------------------------------
# The extractor
# --------------------------------------------------------------------------------------------

#: Elements that hold no prose: a code cell's source, and outputs shown as literal text.
_SKIP_CLASSES = {"cell_input", "output"}
_VOID = {"img", "br", "hr", "input", "meta", "link", "source", "wbr", "col", "area", "base"}


@dataclass
class Page:
    """What :func:`read_page` found in one HTML page."""

    prose: str = ""
    #: ``alt`` of every ``<img>`` on the page (``None``: no attribute), with its ``src``.
    images: list[tuple[str, str | None]] = field(default_factory=list)
    #: hrefs of the links in the article body.
    links: list[str] = field(default_factory=list)
    #: hrefs of the citation links (sphinxcontrib-bibtex) in the article body.
    citations: list[str] = field(default_factory=list)
    #: ids of the bibliography entries the page holds.
    entries: set[str] = field(default_factory=set)
    #: text of the section headings (h2) of the article.
    sections: list[str] = field(default_factory=list)
    #: ids of the glossary terms the page defines (``term-...``).
    terms: set[str] = field(default_factory=set)
    #: tables of the article: rows of cells, each cell ``(text, [hrefs])``; header row first.
    tables: list[list[list[tuple[str, list[str]]]]] = field(default_factory=list)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self.prose: list[str] = []
        self.article = 0  # depth inside <article class="bd-article">
        self.skip: list[str] = []  # open tags of the element being skipped (stack)
        self.cite = 0  # depth inside <span class="bibtex-citation">
        self.heading: list[str] | None = None
        self.cell: tuple[list[str], list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        d = dict(attrs)
        classes = set((d.get("class") or "").split())
        if tag == "img":
            self.page.images.append((d.get("src") or "", d.get("alt")))
        if tag == "article" and "bd-article" in classes:
            self.article = 1
            return
        if not self.article or tag in _VOID:
            return
        self.article += 1
        if self.skip:
            self.skip.append(tag)
            return
        if tag in ("script", "style") or classes & _SKIP_CLASSES:
            self.skip.append(tag)
            return
        if tag == "span" and "bibtex-citation" in classes:
            self.cite = self.article
        if tag == "a" and d.get("href"):
            self.page.links.append(d["href"])
            if self.cite:
                self.page.citations.append(d["href"])
            if self.cell is not None:
                self.cell[1].append(d["href"])
        # A bibliography entry: docutils' <div class="citation" role="doc-biblioentry">,
        # which the accessible_html extension turns into role="listitem".
        if "citation" in classes and d.get("role") in ("listitem", "doc-biblioentry"):
            if d.get("id"):
                self.page.entries.add(d["id"])
        if tag == "dt" and (d.get("id") or "").startswith("term-"):
            self.page.terms.add(d["id"])
        if tag == "h2":
            self.heading = []
        if tag == "table":
            self.page.tables.append([])
        elif tag == "tr" and self.page.tables:
            self.page.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = ([], [])

    def handle_endtag(self, tag: str) -> None:
        if not self.article or tag in _VOID:
            return
        self.article -= 1
        if self.skip:
            self.skip.pop()
            return
        if self.cite and self.article < self.cite:
            self.cite = 0
        if tag == "h2" and self.heading is not None:
            # Without the headerlink's "#" and the section number of a numbered part ("7.12. ").
            title = squash("".join(self.heading)).rstrip("#").strip()
            self.page.sections.append(re.sub(r"^(\d+\.)+\s*", "", title))
            self.heading = None
        if tag in ("td", "th") and self.cell is not None:
            if self.page.tables and self.page.tables[-1]:
                text, hrefs = self.cell
                self.page.tables[-1][-1].append((squash("".join(text)), hrefs))
            self.cell = None
        if tag in ("p", "div", "li", "dt", "dd", "td", "th", "tr", "h1", "h2", "h3", "h4"):
            self.prose.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.article or self.skip:
            return
        self.prose.append(data)
        if self.heading is not None:
            self.heading.append(data)
        if self.cell is not None:
            self.cell[0].append(data)


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def read_page(html: str) -> Page:
    """Parse one built page (see :class:`Page`)."""
    reader = _Reader()
    reader.feed(html)
    reader.close()
    reader.page.prose = squash("".join(reader.prose))
    return reader.page


def banned_in(prose: str) -> list[str]:
    """The phrases of :data:`BANNED_PHRASES` that occur in ``prose``.

    Sphinx's smart quotes turn ``--`` into an en dash in prose; both spellings count.
    """
    text = squash(prose).lower().replace("\u2013", "--").replace("\u2014", "--")
    return [p for p in BANNED_PHRASES if p.lower() in text]


_HASH = re.compile(r"^[0-9a-f]{12,}$", re.IGNORECASE)
# A file name or path is one token: "fig.png", "../_images/abc.png". A slash inside a sentence
# ("falls as 1/sqrt(m)") is mathematics, not a path.
_FILE = re.compile(r"^\S*(\.(png|jpe?g|svg|gif|webp)|[/\\]\S*)$", re.IGNORECASE)


def alt_problem(alt: str | None) -> str | None:
    """Why ``alt`` is not meaningful alt text, or ``None`` when it is.

    Meaningful: at least three words that say what the image shows; not empty, not a file
    name, not a content hash (what myst-nb writes when a figure cell has no alt metadata).
    """
    if alt is None:
        return "no alt attribute"
    text = squash(alt)
    if not text:
        return "empty alt text"
    if _HASH.match(text) or _FILE.search(text):
        return f"alt text is a file name or hash: {text!r}"
    if len(text.split()) < 3:
        return f"alt text too short to say what the image shows: {text!r}"
    return None


# --------------------------------------------------------------------------------------------
# The table of contents
# --------------------------------------------------------------------------------------------


def toc_parts() -> dict[str, list[str]]:
    """``{caption: [docname, ...]}`` from ``_toc.yml`` (or ``$NORMEDU_SITE_TOC``)."""
    toc_file = Path(os.environ.get("NORMEDU_SITE_TOC") or REPO / "_toc.yml")
    toc = yaml.safe_load(toc_file.read_text())

    def walk(entries: list[dict]) -> list[str]:
        out = []
        for e in entries:
            if "file" in e:
                out.append(re.sub(r"\.(md|ipynb|rst)$", "", e["file"]))
            out += walk(e.get("chapters", []) + e.get("sections", []))
        return out

    return {p.get("caption", ""): walk(p.get("chapters", [])) for p in toc.get("parts", [])}


def chapter_pages() -> list[str]:
    parts = toc_parts()
    return [d for caption in CHAPTER_PARTS for d in parts.get(caption, [])]


def reader_pages() -> list[str]:
    """Every page of the book except those written for instructors."""
    parts = toc_parts()
    teaching = {d for caption in INSTRUCTOR_PARTS for d in parts.get(caption, [])}
    return [d for d in toc_pages() if d not in teaching]


def _target(docname: str, href: str) -> str:
    """The docname an internal ``href`` on page ``docname`` points at ('' for external)."""
    if re.match(r"^[a-z]+:", href) or href.startswith("#"):
        return "" if not href.startswith("#") else docname
    path = href.split("#", 1)[0]
    parts = docname.split("/")[:-1]
    for piece in path.split("/"):
        if piece == "..":
            parts = parts[:-1]
        elif piece not in ("", "."):
            parts.append(piece)
    return re.sub(r"\.html$", "", "/".join(parts))


# --------------------------------------------------------------------------------------------
# The checks, on planted pages (fast, no build)
# --------------------------------------------------------------------------------------------

PLANTED = """
<html><body>
<nav><a href="glossary.html">Glossary</a> the seed article in the sidebar</nav>
<article class="bd-article"><section>
<h1>Chapter<a class="headerlink" href="#c">#</a></h1>
<p>We fix a random seed so that every run agrees. {prose}</p>
<div class="cell docutils container">
<div class="cell_input docutils container"><pre>NORMEDU_PRESET = "cpu"  # --store</pre></div>
<div class="cell_output docutils container">
<div class="output stream highlight-myst-ansi notranslate"><pre>regenerate with --store</pre></div>
<p>{markdown_output}</p>
<img alt="{alt}" src="../_images/abc.png" />
</div></div>
<p>See <span class="bibtex-citation" id="id1">[<a class="reference internal"
 href="references.html#id7">Ba et al., 2016</a>]</span> and the
<a class="reference internal" href="glossary.html#term-fused-kernel">fused kernel</a>.</p>
<table><thead><tr><th>Claim</th><th>Source</th></tr></thead>
<tbody><tr><td>LN is invariant</td><td><a href="references.html#id7">Ba</a></td></tr></tbody>
</table>
<section id="further-reading"><h2><span class="section-number">7.12. </span>Further reading<a
 class="headerlink" href="#f">#</a></h2>
</section></section></article>
<img alt="Logo of the course, a bell curve" src="_static/logo.svg"></body></html>
"""


def _planted(prose: str = "", markdown_output: str = "", alt: str = "x") -> Page:
    return read_page(PLANTED.format(prose=prose, markdown_output=markdown_output, alt=alt))


def test_clean_prose_passes_and_code_and_outputs_are_not_prose():
    page = _planted(alt="Line plot of the activation std per layer")
    assert "random seed" in page.prose
    # The phrases in the code cell, the printed output and the sidebar are not prose.
    assert banned_in(page.prose) == [], page.prose


@pytest.mark.parametrize(
    ("prose", "found"),
    [
        ("As the Seed Notes say, BatchNorm breaks.", ["seed notes"]),
        ("the course\n   article states", ["course article"]),
        ("run it with the cpu preset", ["preset"]),
        (
            "regenerate it: <code>python -m normedu.experiments --store</code>",
            ["--store", "regenerate"],
        ),
        ("run with \u2013store", ["--store"]),  # smart quotes turned -- into an en dash
        ("set NORMEDU_LEDGER_DIR", ["NORMEDU_"]),
        ("a table lost in extraction", ["lost in extraction"]),
    ],
)
def test_planted_phrase_in_prose_is_found(prose, found):
    hits = banned_in(_planted(prose=prose).prose)
    assert hits == found, hits


def test_markdown_that_a_cell_displays_is_prose():
    assert banned_in(_planted(markdown_output="the quick preset ran").prose) == ["preset"]


@pytest.mark.parametrize(
    ("alt", "ok"),
    [
        ("Line plot: activation std per layer shrinks ten-fold without normalization", True),
        ("", False),
        ("3f2a9c0b1d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4", False),
        ("fig_drift.png", False),
        ("../_images/abc.png", False),
        ("figure", False),
        ("Line plot: the error of the mean falls as 1/sqrt(m) for local BN", True),
    ],
)
def test_alt_text_must_say_what_the_image_shows(alt, ok):
    page = _planted(alt=alt)
    problems = [alt_problem(a) for _, a in page.images]
    assert page.images[-1][1] == "Logo of the course, a bell curve"  # outside the article too
    assert (problems[0] is None) is ok, problems
    assert alt_problem(None) == "no alt attribute"


def test_sections_links_citations_and_tables_are_read():
    page = _planted()
    assert page.sections == ["Further reading"]
    assert "glossary.html#term-fused-kernel" in page.links
    assert "glossary.html" not in page.links  # the sidebar's link is not the chapter's
    assert page.citations == ["references.html#id7"]
    assert page.tables == [
        [
            [("Claim", []), ("Source", [])],
            [("LN is invariant", []), ("Ba", ["references.html#id7"])],
        ]
    ]


def test_link_targets_resolve_relative_to_the_page():
    assert _target("book/drift", "glossary.html#term-x") == "book/glossary"
    assert _target("book/exercises/drift", "../references.html#id3") == "book/references"
    assert _target("book/drift", "https://arxiv.org/abs/1607.06450") == ""
    assert _target("book/drift", "#local") == "book/drift"


def test_toc_parts_are_read_by_caption(tmp_path: Path, monkeypatch):
    toc = tmp_path / "toc.yml"
    toc.write_text(
        "format: jb-book\nroot: book/intro\nparts:\n"
        "  - caption: Chapters\n    chapters:\n      - file: book/a.md\n"
        "  - caption: Exercises\n    chapters:\n      - file: book/exercises/index\n"
        "        sections:\n          - file: book/exercises/a\n"
    )
    monkeypatch.setenv("NORMEDU_SITE_TOC", str(toc))
    assert toc_parts() == {
        "Chapters": ["book/a"],
        "Exercises": ["book/exercises/index", "book/exercises/a"],
    }


# --------------------------------------------------------------------------------------------
# The real site
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(request) -> Path:
    return site_dir(request)


@pytest.fixture(scope="module")
def pages(site) -> dict[str, Page]:
    """Every built page of the book, parsed once."""
    return {
        d: read_page((site / f"{d}.html").read_text(encoding="utf-8"))
        for d in toc_pages()
        if (site / f"{d}.html").exists()
    }


@pytest.mark.parametrize("docname", reader_pages())
@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_reader_prose_has_no_build_talk(pages, docname):
    assert docname in pages, f"{docname} was not built"
    hits = banned_in(pages[docname].prose)
    assert not hits, f"{docname}: a reader meets {hits} in the prose"


@pytest.mark.parametrize("docname", chapter_pages())
@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_chapter_has_further_reading_and_links_the_glossary(pages, docname):
    page = pages[docname]
    assert any(s in READING_TITLES for s in page.sections), (
        f"{docname}: no section titled {' or '.join(READING_TITLES)}; sections: {page.sections}"
    )
    assert any(_target(docname, h) == GLOSSARY for h in page.links), (
        f"{docname} links no glossary term (use {{term}}`...` at a term's first use)"
    )


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_glossary_defines_the_required_terms(pages):
    assert GLOSSARY in pages, "the glossary page is missing"
    ids = {t.lower() for t in pages[GLOSSARY].terms}
    wanted = {t: "term-" + re.sub(r"[^a-z0-9]+", "-", t.lower()) for t in REQUIRED_TERMS}
    missing = [t for t, i in wanted.items() if i not in ids]
    assert not missing, f"the glossary lacks {missing}; it defines {sorted(ids)}"


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_references_page_lists_every_cited_work(pages):
    assert REFERENCES in pages, "the References page is missing"
    entries = pages[REFERENCES].entries
    assert entries, "the References page lists no work"
    cited, elsewhere = set(), []
    for docname, page in pages.items():
        for href in page.citations:
            if _target(docname, href) != REFERENCES:
                elsewhere.append(f"{docname}: {href}")
            cited.add(href.split("#", 1)[-1])
    assert cited, "no page cites a work"
    assert not elsewhere, "citations that do not point at the References page:\n" + "\n".join(
        elsewhere
    )
    assert cited <= entries, f"cited but not listed on the References page: {cited - entries}"


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_every_image_has_meaningful_alt_text(site):
    bad = []
    for p in sorted(site.rglob("*.html")):
        rel = p.relative_to(site).as_posix()
        if rel.startswith(("_static/", "reports/")):
            continue
        for src, alt in read_page(p.read_text(encoding="utf-8", errors="replace")).images:
            why = alt_problem(alt)
            if why:
                bad.append(f"{rel}: {src[:60]}: {why}")
    assert not bad, f"{len(bad)} images without meaningful alt text:\n" + "\n".join(bad)


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_ledger_sources_link_to_references_or_chapters(pages):
    if LEDGER not in toc_pages():
        pytest.skip("this build has no claims ledger")
    page = pages[LEDGER]
    chapters = set(toc_pages())
    rows, bad = 0, []
    for table in page.tables:
        head = [text for text, _ in table[0]] if table else []
        if "Source" not in head:
            continue
        col = head.index("Source")
        for row in table[1:]:
            rows += 1
            text, hrefs = row[col]
            targets = {_target(LEDGER, h) for h in hrefs}
            if not targets & (chapters | {REFERENCES}):
                bad.append(f"{row[0][0][:60]!r}: source {text!r}")
    assert rows, "the claims ledger shows no claim with a Source column"
    assert not bad, "claims whose source links neither a reference nor a chapter:\n" + "\n".join(
        bad
    )
