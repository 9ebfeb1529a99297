"""Shared machinery for the website tests (``test_site.py`` and ``test_site_static.py``).

- :func:`toc_pages` lists the book's pages in reading order, straight from ``_toc.yml``, so a new
  chapter is covered without touching the tests.
- :func:`site_dir` picks the built site: ``$NORMEDU_SITE_DIR`` when set (a developer's own
  ``--path-output`` build), otherwise the session's ``book_html`` fixture (``_build/html``).
- :func:`serve` serves a folder on 127.0.0.1 on an ephemeral port from a background thread.
- :func:`require_chromium` skips without Debian's Chromium, except under ``CI=true`` where a
  missing browser is a failure.
- :func:`launch_context` starts headless Chromium with a fresh profile and the flags that keep it
  from phoning home, so every request the test sees comes from the page itself; with a
  :func:`dead_port` as its proxy, every request for another host fails inside Chromium.
- :class:`LinkIndex` and :func:`find_leaks` are the offline link checker and the solution-leak
  search used by the static checks.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
INSTALL_HINT = (
    "install the Debian package chromium (apt-get install -y chromium) to run the browser tests"
)
#: The desktop window every page is loaded in.
VIEWPORT = {"width": 1280, "height": 900}
#: Flags from the project NOTES: no sandbox (containers), and none of Chromium's own background
#: traffic (component updates, sync, QUIC probes) so that any outside request is the page's.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--metrics-recording-only",
    "--no-default-browser-check",
]


# --------------------------------------------------------------------------------------------
# The book's pages and configuration
# --------------------------------------------------------------------------------------------


def _walk_toc(entries: list[dict]) -> Iterator[str]:
    for entry in entries:
        if "file" in entry:
            yield entry["file"]
        # jb-book: parts > chapters > sections, any depth.
        for key in ("parts", "chapters", "sections"):
            yield from _walk_toc(entry.get(key, []))


def toc_docnames(toc_file: Path) -> tuple[str, ...]:
    """Docnames of a table of contents in reading order, root first, suffixes dropped."""
    toc = yaml.safe_load(Path(toc_file).read_text())
    names = [toc["root"], *_walk_toc(toc.get("parts", []) + toc.get("chapters", []))]
    return tuple(re.sub(r"\.(md|ipynb|rst)$", "", n) for n in names)


@functools.cache
def toc_pages() -> tuple[str, ...]:
    """Docnames in reading order, e.g. ``("book/intro", "book/drift", ...)``, from ``_toc.yml``.

    File suffixes are dropped, as Sphinx does; the root comes first. ``$NORMEDU_SITE_TOC`` names
    another table of contents, for a site built with ``jupyter-book build --toc <file>``.
    """
    return toc_docnames(Path(os.environ.get("NORMEDU_SITE_TOC") or REPO / "_toc.yml"))


@functools.cache
def book_config() -> dict:
    """The parsed ``_config.yml``."""
    return yaml.safe_load((REPO / "_config.yml").read_text())


def source_path(docname: str) -> Path:
    """The source file of a docname (``.md`` or ``.ipynb``)."""
    for suffix in (".md", ".ipynb", ".rst"):
        p = REPO / f"{docname}{suffix}"
        if p.exists():
            return p
    raise FileNotFoundError(f"no source for {docname!r} listed in _toc.yml")


def is_notebook_page(docname: str) -> bool:
    """True when the page is a notebook (a MyST notebook has a ``kernelspec`` in its header)."""
    try:
        p = source_path(docname)
    except FileNotFoundError:
        return False  # reported by test_every_toc_page_is_built, not as a collection error
    if p.suffix == ".ipynb":
        return True
    head = p.read_text().split("\n---", 1)[0]
    return p.read_text().startswith("---") and "kernelspec:" in head


def is_exercise_page(docname: str) -> bool:
    """Exercise pages are ``book/exercises/<assignment>``; the index lists them."""
    parts = docname.split("/")
    return len(parts) >= 3 and parts[-2] == "exercises" and parts[-1] != "index"


def site_dir(request: pytest.FixtureRequest) -> Path:
    """The built HTML to test: ``$NORMEDU_SITE_DIR`` if set, else the ``book_html`` fixture.

    ``NORMEDU_SITE_DIR`` may name either the ``html`` folder or a ``--path-output`` folder
    (``<out>/_build/html``).
    """
    env = os.environ.get("NORMEDU_SITE_DIR")
    if not env:
        return request.getfixturevalue("book_html")
    p = Path(env)
    if (p / "_build" / "html").is_dir():
        p = p / "_build" / "html"
    if not (p / "index.html").exists():
        raise FileNotFoundError(f"NORMEDU_SITE_DIR={env!r} holds no built site (no index.html)")
    return p


def page_file(site: Path, docname: str) -> Path:
    return site / f"{docname}.html"


# --------------------------------------------------------------------------------------------
# Serving and the browser
# --------------------------------------------------------------------------------------------


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 (stdlib signature)
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on ``http://127.0.0.1:<free port>/`` while the block runs.

    Yields the base URL (with a trailing slash).
    """
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def require_chromium() -> None:
    """Skip (or, under ``CI=true``, fail) when Chromium or Playwright is missing."""
    problem = None
    if not CHROMIUM.exists():
        problem = f"{CHROMIUM} not found: {INSTALL_HINT}"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the Python package playwright is missing: pip install -e '.[dev]'"
    if problem is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the browser tests cannot run: {problem}")
    pytest.skip(problem)


def is_local(url: str) -> bool:
    """True for requests that stay on this machine (127.0.0.1) or carry no host (data:, blob:)."""
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about", "chrome-error"):
        return True
    return parts.hostname == "127.0.0.1"


def launch_context(playwright, user_data_dir: Path, *, dark: bool = False, dead_proxy: int = 0):
    """A persistent Chromium context with a fresh profile, 1280x900, light or dark theme.

    ``dead_proxy``: a port on 127.0.0.1 where nothing listens (see :func:`dead_port`). Every
    request not for 127.0.0.1 then goes to that proxy and fails
    (``net::ERR_PROXY_CONNECTION_FAILED``) inside Chromium, so nothing leaves the machine,
    without stopping each request in the test process to decide (as a Playwright route
    does: several CPU-seconds over the site's pages).
    """
    extra = {}
    if dead_proxy:
        extra["proxy"] = {"server": f"http://127.0.0.1:{dead_proxy}", "bypass": "127.0.0.1"}
    return playwright.chromium.launch_persistent_context(
        str(user_data_dir),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_ARGS,
        viewport=VIEWPORT,
        color_scheme="dark" if dark else "light",
        service_workers="block",
        **extra,
    )


@contextlib.contextmanager
def dead_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections while the context lasts: the socket is
    bound, so no other process can take the port, but never listens."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# --------------------------------------------------------------------------------------------
# Offline link checker
# --------------------------------------------------------------------------------------------

_LINK_ATTRS = {"a": "href", "link": "href", "img": "src", "script": "src", "iframe": "src"}


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []  # (tag, url)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        d = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if d.get(key):
                self.ids.add(d[key])
        attr = _LINK_ATTRS.get(tag)
        if attr and d.get(attr):
            self.links.append((tag, d[attr]))


@dataclass
class LinkReport:
    """What :meth:`LinkIndex.check` found. ``broken`` and ``external`` hold ``(page, url)``."""

    checked: int = 0
    broken: list[tuple[str, str, str]] = field(default_factory=list)  # (page, url, why)
    external: list[tuple[str, str]] = field(default_factory=list)


class LinkIndex:
    """Every HTML file under ``site`` with its anchors and outgoing links, parsed once."""

    def __init__(self, site: Path) -> None:
        self.site = site
        self.pages: dict[str, _PageParser] = {}
        for p in sorted(site.rglob("*.html")):
            rel = p.relative_to(site).as_posix()
            if rel.startswith(("_static/", "reports/")):
                continue  # theme templates and build logs, not pages
            parser = _PageParser()
            parser.feed(p.read_text(encoding="utf-8", errors="replace"))
            self.pages[rel] = parser

    def _anchors(self, rel: str) -> set[str]:
        if rel not in self.pages:
            parser = _PageParser()
            parser.feed((self.site / rel).read_text(encoding="utf-8", errors="replace"))
            self.pages[rel] = parser
        return self.pages[rel].ids

    def check(self) -> LinkReport:
        """Resolve every internal link and anchor; list external ones without fetching them."""
        report = LinkReport()
        base = "http://site.invalid/"
        for rel, parser in list(self.pages.items()):
            for tag, url in parser.links:
                report.checked += 1
                parts = urlsplit(url)
                if parts.scheme in ("javascript", "data", "mailto", "tel"):
                    continue
                if parts.scheme or parts.netloc:
                    report.external.append((rel, url))
                    continue
                target = urlsplit(urljoin(base + rel, url))
                path = unquote(target.path)[1:] or "index.html"
                file = self.site / path
                if file.is_dir():
                    file = file / "index.html"
                    path = f"{path.rstrip('/')}/index.html"
                if not file.is_file():
                    report.broken.append((rel, url, "missing file"))
                    continue
                frag = unquote(target.fragment)
                if tag == "a" and frag and file.suffix == ".html":
                    if frag not in self._anchors(path):
                        report.broken.append((rel, url, f"no anchor #{frag} in {path}"))
        return report


# --------------------------------------------------------------------------------------------
# Leak search: solutions and hidden tests must never reach the website
# --------------------------------------------------------------------------------------------

#: nbgrader's delimiters. Their presence anywhere in the site means a source notebook leaked.
NBGRADER_MARKERS = (
    "BEGIN SOLUTION",
    "END SOLUTION",
    "BEGIN HIDDEN TESTS",
    "END HIDDEN TESTS",
)

_TEXT_SUFFIXES = {".html", ".js", ".txt", ".md", ".ipynb", ".py", ".json", ".css", ".svg"}
#: A line shorter than this (after whitespace is collapsed) is too generic to call a leak
#: (``return out``, ``x = x.T``); longer solution lines are distinctive enough to search for.
MIN_NEEDLE = 28


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def squash(text: str) -> str:
    """Collapse whitespace runs to one space so code matches across highlighting and wrapping."""
    return re.sub(r"\s+", " ", text).strip()


def site_texts(site: Path) -> Iterator[tuple[str, str]]:
    """``(relative path, searchable text)`` for every text file of the site.

    HTML is reduced to its text (highlighted code is split into many ``<span>``s, so a raw
    search would miss it) and kept raw as well (attributes, inline scripts).
    """
    for p in sorted(site.rglob("*")):
        if not p.is_file() or p.suffix not in _TEXT_SUFFIXES:
            continue
        rel = p.relative_to(site).as_posix()
        if rel.startswith("_static/mathjax/"):
            continue  # vendored third-party code, megabytes, never holds course content
        raw = p.read_text(encoding="utf-8", errors="replace")
        if p.suffix == ".html":
            ex = _TextExtractor()
            ex.feed(raw)
            yield rel, squash("".join(ex.parts)) + "\n" + squash(raw)
        elif p.suffix == ".ipynb":
            # Notebook JSON escapes newlines and quotes: search the decoded cell sources too.
            try:
                nb = json.loads(raw)
                cells = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", []))
            except (ValueError, AttributeError):
                cells = ""
            yield rel, squash(raw) + "\n" + squash(cells)
        else:
            yield rel, squash(raw)


def _between(source: str, begin: str, end: str) -> list[str]:
    blocks, inside = [], None
    for line in source.splitlines():
        if begin in line:
            inside = []
        elif end in line and inside is not None:
            blocks.append("\n".join(inside))
            inside = None
        elif inside is not None:
            inside.append(line)
    return blocks


def secret_needles(solutions: Path) -> list[tuple[str, str]]:
    """Distinctive lines of every solution body and hidden test in ``solutions/**/*.ipynb``.

    Returns ``(where, line)`` pairs; ``where`` names the notebook and cell. Lines that also
    appear in the released student notebooks (``exercises/``) are not secret and are dropped.
    """
    released = ""
    for nb_path in sorted((solutions.parent / "exercises").rglob("*.ipynb")):
        nb = json.loads(nb_path.read_text())
        released += "\n".join(squash("".join(c.get("source", ""))) for c in nb["cells"])
    needles: list[tuple[str, str]] = []
    for nb_path in sorted(solutions.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in nb_path.parts:
            continue
        nb = json.loads(nb_path.read_text())
        for i, cell in enumerate(nb.get("cells", [])):
            src = "".join(cell.get("source", ""))
            blocks = _between(src, "BEGIN SOLUTION", "END SOLUTION")
            blocks += _between(src, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
            for block in blocks:
                for line in block.splitlines():
                    s = squash(line)
                    if len(s) >= MIN_NEEDLE and s not in released:
                        needles.append((f"{nb_path.relative_to(solutions.parent)} cell {i}", s))
    return needles


def find_leaks(site: Path, needles: list[tuple[str, str]]) -> list[str]:
    """Every place in the site where an nbgrader marker or a secret line occurs.

    No page is exempt: the pages that explain the course workflow describe the markers in
    words, so a marker anywhere in the site means a source notebook leaked.
    """
    found = []
    for rel, text in site_texts(site):
        for marker in NBGRADER_MARKERS:
            if marker in text:
                found.append(f"{rel}: nbgrader marker {marker!r}")
        for where, needle in needles:
            if needle in text:
                found.append(f"{rel}: line from {where}: {needle!r}")
    return found
