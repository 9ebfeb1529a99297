"""The website as readers see it: headless Chromium against the built site on 127.0.0.1.

Every page listed in ``_toc.yml`` is visited once, in reading order (a module
fixture records what the browser saw); the tests below then assert on that record, one test
per page and concern, so a failure names the page and the problem. The light theme (every
page) and the dark theme (one page of each kind: it is one stylesheet) are checked from the
colours the browser computed; with ``NORMEDU_SCREENSHOTS=1`` every page is also photographed
in both themes into ``_build/screenshots/`` for a person to look at (and the pictures are
checked not blank). On the same visit, axe-core audits every page against WCAG 2.1 A and AA
(every rule but the colour ones on every page; the colour rules, in both themes, on the
first element of each style of text the site shows: ``site_a11y.StyleCover``) and the page
is laid out at a phone's 375 px to check that nothing scrolls sideways or is cut off
(``site_a11y.py``). Two tabs visit the pages at once.

Without ``/usr/bin/chromium`` these tests skip (under ``CI=true`` they fail). During
development, point them at your own build with ``NORMEDU_SITE_DIR=/tmp/<you>-build``.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin

import pytest
from site_a11y import (
    COLOUR_RULES,
    CSSOM_RULE,
    NARROW,
    StyleCover,
    failures,
    reflow,
    reflow_problems,
    run_axe,
    run_colour_rules,
    text_styles,
)
from site_helpers import (
    REPO,
    VIEWPORT,
    book_config,
    dead_port,
    is_exercise_page,
    is_local,
    is_notebook_page,
    launch_context,
    require_chromium,
    serve,
    site_dir,
    source_path,
    toc_pages,
)

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("book")]

PAGES = toc_pages()
NOTEBOOK_PAGES = [d for d in PAGES if is_notebook_page(d)]
EXERCISE_PAGES = [d for d in PAGES if is_exercise_page(d)]
#: The page that must carry the LayerNorm animation.
ANIMATION_PAGE = "book/layernorm"

#: What the page reports about itself once MathJax is done; see ``PageVisit``.
PROBE_JS = """
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  const article = document.querySelector('.bd-article') || document.body;
  const imgs = [...article.querySelectorAll('img')];
  // Figures below the fold may be lazy: load them all, then read their sizes.
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.complete ? null :
    new Promise(r => { i.addEventListener('load', r); i.addEventListener('error', r); })));
  // Visible prose only: code, outputs shown as code, and typeset math are not prose.
  const prose = article.cloneNode(true);
  prose.querySelectorAll('pre, code, .highlight, mjx-container, script, style, .math')
       .forEach(e => e.remove());
  const mathNodes = (sel) => [...article.querySelectorAll(sel)];
  return {
    displayMath: mathNodes('div.math').length,
    displayTypeset: mathNodes('div.math').filter(e => e.querySelector('mjx-container')).length,
    inlineMath: mathNodes('span.math').length,
    inlineTypeset: mathNodes('span.math').filter(e => e.querySelector('mjx-container')).length,
    untypeset: mathNodes('div.math, span.math')
      .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80)),
    proseText: prose.innerText,
    images: imgs.map(i => [i.getAttribute('src') ? i.getAttribute('src').slice(0, 80) : i.id,
                           i.naturalWidth]),
    // A figure that reached the page as its text repr instead of an image.
    figuresAsText: (article.innerText.match(/<(Figure|Animation) size [^>]*>/g) || []),
    animations: article.querySelectorAll('.animation').length,
    sidebar: [...document.querySelectorAll('nav.bd-docs-nav a.reference')].map(a => a.href),
    prev: [...document.querySelectorAll('.prev-next-area a.left-prev')].map(a => a.href),
    next: [...document.querySelectorAll('.prev-next-area a.right-next')].map(a => a.href),
    notebookDownload: [...document.querySelectorAll('a.btn-download-notebook-button')]
      .map(a => a.href),
    sourceDownload: [...document.querySelectorAll('a.btn-download-source-button')]
      .map(a => a.href),
    launch: [...document.querySelectorAll('.dropdown-launch-buttons a')]
      .map(a => [a.textContent.trim(), a.getAttribute('href')]),
    articleNotebooks: [...article.querySelectorAll('a[href]')]
      .map(a => a.href).filter(h => /\\.ipynb($|[?#])/.test(h)),
    // A table may scroll inside the theme's scroll container; it must not stick out of the
    // text column (onto the table of contents).
    wideTables: [...article.querySelectorAll('table')]
      .map(t => t.closest('.pst-scrollable-table-container') || t)
      .filter(t => t.getBoundingClientRect().right > article.getBoundingClientRect().right + 2)
      .length,
    scrollingTables: [...article.querySelectorAll('.pst-scrollable-table-container')]
      .filter(c => c.scrollWidth > c.clientWidth + 2).length,
    pageWidth: document.documentElement.scrollWidth,
    viewportWidth: window.innerWidth,
  };
}
"""

#: The colours a reader sees: the page background (the first opaque one of body and html) and
#: the article's text, as ``[r, g, b]``.
COLOURS_JS = """
() => {
  const rgb = (el, prop) => (getComputedStyle(el)[prop].match(/[\\d.]+/g) || []).map(Number);
  const opaque = [document.body, document.documentElement]
    .map(e => rgb(e, 'backgroundColor')).filter(c => c.length === 3 || c[3] > 0);
  const article = document.querySelector('.bd-article') || document.body;
  return {background: (opaque[0] || [255, 255, 255]).slice(0, 3),
          text: rgb(article, 'color').slice(0, 3),
          textLength: article.innerText.trim().length};
}
"""

#: Screenshots are for a person to look at; no test needs them, so they cost time only on request.
SCREENSHOTS = os.environ.get("NORMEDU_SCREENSHOTS", "") not in ("", "0")

#: Pages whose dark-theme colours are read (every page is switched to the dark theme for axe's
#: colour rules): the theme's colours are the same stylesheet on every page, so one page of
#: each kind proves them (the root page, the first notebook page after it, the first exercise
#: page); with screenshots, every page, for the person who looks.
DARK_PAGES = (
    PAGES
    if SCREENSHOTS
    else [*PAGES[:1], *[d for d in NOTEBOOK_PAGES if d not in PAGES[:1]][:1], *EXERCISE_PAGES[:1]]
)

#: Whole pages; JPEG because long pages encode two to three times faster than PNG.
SHOT = {"full_page": True, "type": "jpeg", "quality": 85}

RAW_TEX = ("$$", "\\frac", "\\begin{", "\\[", "\\(", "\\mathbf", "\\sqrt")


@dataclass
class PageVisit:
    """What Chromium saw on one page (light theme load; the dark pass adds its screenshot)."""

    url: str
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    probe: dict = field(default_factory=dict)
    animation_steps: list[tuple[str, str]] = field(default_factory=list)
    colours: dict[str, dict] = field(default_factory=dict)  # theme -> COLOURS_JS result
    axe: dict[str, list[dict]] = field(default_factory=dict)  # theme -> site_a11y.run_axe
    narrow: dict = field(default_factory=dict)  # site_a11y.reflow at 375 px
    styles: dict[str, set[str]] = field(default_factory=dict)  # theme -> site_a11y.text_styles
    # theme -> the styles whose colour rules ran on this page (first seen here)
    colour_checked: dict[str, set[str]] = field(default_factory=dict)
    screenshots: dict[str, Path] = field(default_factory=dict)  # only with NORMEDU_SCREENSHOTS


@pytest.fixture(scope="module")
def site(request) -> Path:
    require_chromium()  # before the build: no point building a site nobody can look at
    return site_dir(request)


@pytest.fixture(scope="module")
def browser(site):
    """``(context, base_url, external)``: a fresh Chromium profile on the site served from
    127.0.0.1; ``external`` collects every request for anywhere else, which the dead proxy
    (:func:`site_helpers.launch_context`) refuses: nothing leaves the machine."""
    from playwright.sync_api import sync_playwright

    profile = Path(tempfile.mkdtemp(prefix="normedu-chromium-"))
    with serve(site) as base, dead_port() as port, sync_playwright() as pw:
        context = launch_context(pw, profile, dead_proxy=port)
        context.set_default_timeout(30_000)
        external: list[str] = []

        def record(request):
            if not is_local(request.url):
                external.append(request.url)

        context.on("request", record)
        try:
            yield context, base, external
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


class ReaderTab:
    """One tab for every visit, as a reader who follows links. A new tab per page costs a new
    renderer process that compiles the theme's and MathJax's scripts again: 40 against 25
    CPU-s over the site's pages. The tab's listeners record into ``visit``, the
    :class:`PageVisit` of the page being loaded now."""

    def __init__(self, context):
        self.visit = PageVisit(url="")
        self.page = page = context.new_page()
        page.on("request", lambda r: self.visit.requests.append(r.url))
        page.on("console", lambda m: m.type == "error" and self.visit.console_errors.append(m.text))
        page.on("pageerror", lambda e: self.visit.console_errors.append(f"uncaught: {e}"))
        page.on("requestfailed", lambda r: self.visit.failed.append(f"{r.url} ({r.failure})"))
        page.on(
            "response",
            lambda r: r.status >= 400 and self.visit.failed.append(f"{r.url} (HTTP {r.status})"),
        )


def _visit(tab: ReaderTab, base: str, docname: str, shots: Path, cover: StyleCover) -> PageVisit:
    """Load ``docname`` in ``tab`` and record what it saw."""
    page = tab.page
    visit = tab.visit = PageVisit(url=urljoin(base, f"{docname}.html"))
    page.goto(visit.url, wait_until="load")  # light theme, full width: _leave reset both
    # The probe waits for MathJax, its web fonts and every image, so every request the page
    # makes on its own has been answered when it returns.
    visit.probe = page.evaluate(PROBE_JS)
    visit.colours["light"] = page.evaluate(COLOURS_JS)

    slug = docname.replace("/", "__")
    if SCREENSHOTS:
        visit.screenshots["light"] = shots / f"{slug}-light.jpg"
        page.screenshot(path=visit.screenshots["light"], **SHOT)

    for i in range(visit.probe["animations"]):
        anim = page.locator(".bd-article .animation").nth(i)
        img = anim.locator("img").first
        before = img.get_attribute("src") or ""
        anim.locator('button[title="Next frame"]').click()
        after = img.get_attribute("src") or ""
        visit.animation_steps.append((before[-40:], after[-40:]))
    # Every rule but the colour ones on every page; the colour rules on the first element of
    # each style of text that no page has shown yet in this theme (site_a11y.StyleCover).
    visit.axe["light"] = run_axe(page, skip=COLOUR_RULES)
    visit.styles["light"] = text_styles(page)
    found, visit.colour_checked["light"] = run_colour_rules(
        page, cover.claim("light", visit.styles["light"])
    )
    visit.axe["light"] += found

    # The theme follows the system preference ("auto"): switch it like a reader's OS would.
    page.emulate_media(color_scheme="dark")
    page.wait_for_function("document.documentElement.dataset.theme === 'dark'")
    # Colours read mid-transition are neither theme's: wait for the theme's CSS transitions
    # (a fixed pause was too short on a busy machine: axe read the search box half-way).
    page.wait_for_function("document.getAnimations().every(a => a.playState !== 'running')")
    visit.styles["dark"] = text_styles(page)
    visit.axe["dark"], visit.colour_checked["dark"] = run_colour_rules(
        page, cover.claim("dark", visit.styles["dark"])
    )
    if docname in DARK_PAGES:
        visit.colours["dark"] = page.evaluate(COLOURS_JS)
        if SCREENSHOTS:
            visit.screenshots["dark"] = shots / f"{slug}-dark.jpg"
            page.screenshot(path=visit.screenshots["dark"], **SHOT)

    page.set_viewport_size(NARROW)
    visit.narrow = reflow(page)
    _leave(tab)
    return visit


def _leave(tab: ReaderTab) -> None:
    """Back to the light theme and the full width on an empty page: switched on the page just
    checked, each would lay it out and style it once more for nothing (about 10 CPU-s over
    the site)."""
    tab.visit = PageVisit(url="about:blank")  # what the blank page does is nobody's visit
    tab.page.goto("about:blank")
    tab.page.emulate_media(color_scheme="light")
    tab.page.set_viewport_size(VIEWPORT)


@pytest.fixture(scope="module")
def reader(browser) -> Iterator[ReaderTab]:
    """The reader's tab: the page visits, then the tests that follow links and search."""
    tab = ReaderTab(browser[0])
    yield tab
    tab.page.close()


@pytest.fixture(scope="module")
def visits(site, browser, reader) -> dict[str, PageVisit]:
    """Every ``_toc.yml`` page visited once, by two tabs at once.

    The reader's tab and a second browser (its own Playwright, in a thread) take the pages in
    reading order from one queue. Nearly all the work is Chromium's (layout, MathJax, axe), in
    its own processes: two at once use both cores of a two-core machine, where one tab left
    one idle at the end of the test run.
    """
    from playwright.sync_api import sync_playwright
    from tqdm.auto import tqdm

    context, base, external = browser
    shots = site.parent / "screenshots"
    # Overwrite in place rather than clear the folder: a second xdist worker may be writing.
    if SCREENSHOTS:
        shots.mkdir(parents=True, exist_ok=True)
    todo: queue.SimpleQueue[str] = queue.SimpleQueue()
    for docname in PAGES:
        todo.put(docname)
    seen: dict[str, PageVisit] = {}
    cover = StyleCover()
    progress = tqdm(total=len(PAGES), desc="pages", leave=False)

    def work(tab: ReaderTab) -> None:
        while True:
            try:
                docname = todo.get_nowait()
            except queue.Empty:
                return
            seen[docname] = _visit(tab, base, docname, shots, cover)
            progress.update()

    def second_tab() -> None:
        profile = Path(tempfile.mkdtemp(prefix="normedu-chromium-"))
        try:
            with dead_port() as port, sync_playwright() as pw:
                other = launch_context(pw, profile, dead_proxy=port)
                other.on("request", lambda r: is_local(r.url) or external.append(r.url))
                try:
                    work(ReaderTab(other))
                finally:
                    other.close()
        finally:
            shutil.rmtree(profile, ignore_errors=True)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        helper = pool.submit(second_tab)
        work(reader)
        helper.result()  # re-raises what went wrong in the second tab
    progress.close()
    seen = {d: seen[d] for d in PAGES}
    reader.visit = PageVisit(url="")  # what the tab sees from here on belongs to no page
    if not SCREENSHOTS:
        return seen
    # A summary next to the screenshots, for the person who looks at them.
    summary = {
        d: {
            "requests": len(v.requests),
            "non_local_requests": sorted({u for u in v.requests if not is_local(u)}),
            "console_errors": v.console_errors,
            "failed_requests": v.failed,
            "images": len(v.probe["images"]),
            "display_math": v.probe["displayMath"],
            "animations": v.probe["animations"],
            "tables_that_scroll": v.probe["scrollingTables"],
            "screenshots": {k: p.name for k, p in v.screenshots.items()},
        }
        for d, v in seen.items()
    }
    (shots / "summary.json").write_text(json.dumps(summary, indent=1))
    return seen


# --------------------------------------------------------------------------------------------
# Loads cleanly and offline
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("docname", PAGES)
def test_page_loads_without_errors(visits, docname):
    v = visits[docname]
    assert v.requests, f"{v.url}: the browser made no request at all"
    assert not v.console_errors, f"{v.url}: console errors:\n" + "\n".join(v.console_errors)
    failed = [f for f in v.failed if is_local(f.split(" ")[0])]
    assert not failed, f"{v.url}: failed requests:\n" + "\n".join(failed)


@pytest.mark.parametrize("docname", PAGES)
def test_no_request_leaves_the_machine(visits, docname):
    v = visits[docname]
    outside = sorted({u for u in v.requests if not is_local(u)})
    assert not outside, f"{v.url} requested non-local URLs:\n" + "\n".join(outside)


def test_request_guard_sees_outside_requests(browser):
    """The recorder above must be able to fail: a page that fetches a CDN file is caught, and
    the request is refused by the dead proxy rather than sent."""
    context, base, external = browser
    seen: list[str] = []
    refused: list[str] = []
    page = context.new_page()
    page.on("request", lambda r: seen.append(r.url))
    page.on("requestfailed", lambda r: refused.append(f"{r.url} {r.failure}"))
    page.goto(_doc_url(base, PAGES[0]))
    status = page.evaluate(
        "() => fetch('https://cdn.jsdelivr.net/npm/mathjax@3').then(r => r.status, e => 'error')"
    )
    page.close()
    cdn = "https://cdn.jsdelivr.net/npm/mathjax@3"
    assert [u for u in seen if not is_local(u)] == [cdn]
    assert cdn in external
    assert status == "error" and refused == [f"{cdn} net::ERR_PROXY_CONNECTION_FAILED"]


# --------------------------------------------------------------------------------------------
# Math and figures
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("docname", PAGES)
def test_math_is_typeset(visits, docname):
    p = visits[docname].probe
    assert p["displayTypeset"] == p["displayMath"] and p["inlineTypeset"] == p["inlineMath"], (
        f"{docname}: {p['displayMath'] - p['displayTypeset']} display and "
        f"{p['inlineMath'] - p['inlineTypeset']} inline equations not typeset: {p['untypeset']}"
    )
    raw = [t for t in RAW_TEX if t in p["proseText"]]
    if raw:
        at = p["proseText"].find(raw[0])
        context = p["proseText"][max(0, at - 60) : at + 60]
        pytest.fail(f"{docname}: raw TeX {raw} left in the visible text: ...{context!r}...")


def test_math_speech_works_offline(visits, browser):
    """MathJax's accessibility explorer (speech for screen readers) loads only vendored files.

    The explorer is switched on the way MathJax remembers a reader's menu choice (local
    storage), since switching it on live from the menu blanks the math in MathJax 3.2.2
    (upstream bug mathjax/MathJax#3124).
    """
    with_math = [d for d in PAGES if visits[d].probe["displayMath"]]
    if not with_math:
        pytest.skip("no page has display math")
    context, base, _ = browser
    page = context.new_page()
    requests, bad = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("response", lambda r: r.status >= 400 and bad.append(f"{r.url} ({r.status})"))
    page.on("requestfailed", lambda r: bad.append(f"{r.url} ({r.failure})"))
    page.add_init_script(
        "localStorage.setItem('MathJax-Menu-Settings', JSON.stringify({explorer: true}))"
    )
    page.goto(_doc_url(base, with_math[0]))
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => document.querySelector('[data-semantic-speech]')")
    speech = page.get_attribute("[data-semantic-speech]", "data-semantic-speech")
    page.evaluate("() => localStorage.removeItem('MathJax-Menu-Settings')")
    page.close()
    assert any("sre/mathmaps/en.json" in u for u in requests), "speech rules were not loaded"
    assert not bad and all(is_local(u) for u in requests), bad or requests
    assert speech and len(speech.split()) > 2, f"no speech text: {speech!r}"


@pytest.mark.parametrize("docname", PAGES)
def test_every_image_loads(visits, docname):
    broken = [src for src, width in visits[docname].probe["images"] if not width]
    assert not broken, f"{docname}: images that did not load: {broken}"
    as_text = visits[docname].probe["figuresAsText"]
    assert not as_text, (
        f"{docname}: figures shown as text, not images: {as_text} (a detached matplotlib "
        "Figure needs `%matplotlib inline` in the kernel to display as PNG)"
    )


@pytest.mark.parametrize("docname", PAGES)
def test_animation_controls_step_the_frames(visits, docname):
    v = visits[docname]
    if docname == ANIMATION_PAGE:
        assert v.probe["animations"] >= 1, f"{docname}: the LayerNorm animation is missing"
    if not v.probe["animations"]:
        return
    for i, (before, after) in enumerate(v.animation_steps):
        assert before and after and before != after, (
            f"{docname}: animation {i}: 'Next frame' did not change the frame"
        )


# --------------------------------------------------------------------------------------------
# Navigation and search
# --------------------------------------------------------------------------------------------


def _doc_url(base: str, docname: str) -> str:
    return urljoin(base, f"{docname}.html")


@pytest.mark.parametrize("docname", PAGES)
def test_sidebar_lists_every_page_in_order(visits, browser, docname):
    _, base, _ = browser
    sidebar = [u.split("#")[0] for u in visits[docname].probe["sidebar"]]
    # The current page links to itself as "#": put it back in its place.
    sidebar = [u or _doc_url(base, docname) for u in sidebar]
    sidebar = [_doc_url(base, docname) if u == visits[docname].url else u for u in sidebar]
    deduped = list(dict.fromkeys(sidebar))
    assert deduped == [_doc_url(base, d) for d in PAGES], f"{docname}: sidebar differs from _toc"


@pytest.mark.parametrize("i", range(len(PAGES)), ids=list(PAGES))
def test_previous_and_next_links(visits, browser, i):
    _, base, _ = browser
    p = visits[PAGES[i]].probe
    want_prev = [_doc_url(base, PAGES[i - 1])] if i > 0 else []
    want_next = [_doc_url(base, PAGES[i + 1])] if i + 1 < len(PAGES) else []
    assert p["prev"] == want_prev, f"{PAGES[i]}: previous link"
    assert p["next"] == want_next, f"{PAGES[i]}: next link"


def test_clicking_next_walks_the_book(browser, reader):
    _, base, _ = browser
    page = reader.page
    page.goto(_doc_url(base, PAGES[0]))
    for want in PAGES[1:3]:
        page.locator(".prev-next-area a.right-next").click()
        page.wait_for_url(_doc_url(base, want))


def test_search_finds_rmsnorm_on_its_chapter(browser, reader):
    _, base, _ = browser
    page = reader.page
    page.goto(urljoin(base, "search.html?q=RMSNorm"))
    summary = page.locator("#search-results .search-summary")
    summary.wait_for()
    page.wait_for_function(
        "() => /finished|did not match/i.test("
        "document.querySelector('#search-results .search-summary').textContent)"
    )
    hits = page.eval_on_selector_all(
        "#search-results ul.search li",
        "lis => lis.map(li => [li.querySelector('a').href,"
        " (li.querySelector('p.context') || {textContent: ''}).textContent])",
    )
    assert _doc_url(base, "book/rmsnorm") in [url for url, _ in hits], f"found {hits}"
    # Snippets show the page's words, not its button labels (assets/normedu-search.js): the
    # theme's download menu reads ".ipynb .md .pdf"; an assignment page's own link to its
    # notebook ("Download the notebook (qknorm.ipynb)") is the page's words.
    chrome = [text for _, text in hits if ".pdf" in text or re.search(r"\.ipynb\s+\.md", text)]
    assert not chrome, f"search snippets start with the page's menu text: {chrome}"


# --------------------------------------------------------------------------------------------
# Downloads and launch buttons
# --------------------------------------------------------------------------------------------


def _fetch_json(context, url: str) -> dict:
    resp = context.request.get(url)
    assert resp.ok, f"{url}: HTTP {resp.status}"
    return json.loads(resp.body())


@pytest.mark.parametrize("docname", NOTEBOOK_PAGES)
def test_chapter_offers_its_notebook(visits, browser, docname):
    context, _, _ = browser
    p = visits[docname].probe
    assert len(p["notebookDownload"]) == 1, f"{docname}: no .ipynb in the download menu"
    nb = _fetch_json(context, p["notebookDownload"][0])
    assert nb["nbformat"] == 4 and nb["cells"], f"{docname}: the .ipynb is not a notebook"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), f"{docname}: the .ipynb is not executed"
    assert p["sourceDownload"] and p["sourceDownload"][0].endswith(source_path(docname).suffix)


@pytest.mark.parametrize("docname", NOTEBOOK_PAGES)
def test_launch_buttons_follow_config(visits, docname):
    cfg = book_config()
    launch, repo = cfg.get("launch_buttons", {}), cfg.get("repository", {})
    buttons = dict(visits[docname].probe["launch"])
    local = (launch.get("local_jupyterlab_url") or "").rstrip("/")
    if local:
        prefix = (repo.get("path_to_book") or "").strip("/")
        rel = source_path(docname).relative_to(REPO).as_posix()
        rel = f"{prefix}/{rel}" if prefix else rel
        assert buttons.get("JupyterLab (local)") == f"{local}/lab/tree/{rel}", buttons
    placeholder = ("", "https://github.com/executablebooks/jupyter-book")
    has_repo = (repo.get("url") or "").rstrip("/") not in placeholder
    if has_repo and launch.get("binderhub_url"):
        assert "Binder" in buttons, f"{docname}: Binder configured but no Binder button"
    else:
        assert "Binder" not in buttons and "Colab" not in buttons, (
            f"{docname}: cloud launch buttons without a repository URL point at a wrong repo"
        )


@pytest.mark.parametrize(
    "docname",
    EXERCISE_PAGES
    or [pytest.param(None, marks=pytest.mark.skip(reason="_toc.yml lists no exercise pages"))],
)
def test_exercise_page_links_student_notebook(visits, browser, docname):
    context, _, _ = browser
    links = visits[docname].probe["articleNotebooks"]
    assert links, f"{docname}: no link to the student notebook (.ipynb) in the page"
    for url in links:
        assert is_local(url), f"{docname}: the student notebook should be served by the site: {url}"
        nb = _fetch_json(context, url)
        assert nb["nbformat"] == 4, url


# --------------------------------------------------------------------------------------------
# Themes, screenshots and layout
# --------------------------------------------------------------------------------------------


def _luminance(rgb: list[float]) -> float:
    """Perceived brightness 0-255 (ITU-R BT.601 weights, as PIL's greyscale conversion)."""
    r, g, b = rgb
    return 0.299 * r + 0.587 * g + 0.114 * b


@pytest.mark.parametrize("docname", PAGES)
def test_light_and_dark_themes_show_readable_text(visits, docname):
    """The page has text, and its text contrasts with the background; on :data:`DARK_PAGES`
    the dark theme applies too."""
    colours = visits[docname].colours
    assert colours["light"]["textLength"] > 0, f"{docname}: the article shows no text"
    bg = {theme: _luminance(c["background"]) for theme, c in colours.items()}
    assert bg["light"] > 128, f"{docname}: background brightness {bg} in the light theme"
    if docname in DARK_PAGES:
        assert bg["dark"] < 128, (
            f"{docname}: background brightness {bg}: the dark theme did not apply"
        )
    for theme, c in colours.items():
        contrast = abs(_luminance(c["text"]) - bg[theme])
        assert contrast > 100, f"{docname}: {theme} theme text barely differs from its background"


@pytest.mark.parametrize(
    "docname",
    PAGES
    if SCREENSHOTS
    else [pytest.param(None, marks=pytest.mark.skip(reason="screenshots: NORMEDU_SCREENSHOTS=1"))],
)
def test_screenshots_are_not_blank(visits, docname):
    from PIL import Image, ImageStat

    brightness = {}
    for theme, path in visits[docname].screenshots.items():
        with Image.open(path) as im:
            gray = im.convert("L")
            stat = ImageStat.Stat(gray)
            colours = len(gray.getcolors(maxcolors=256) or range(256))
        assert stat.stddev[0] > 5 and colours > 16, f"{path} looks blank"
        brightness[theme] = stat.mean[0]
    assert brightness["light"] > 128 > brightness["dark"], (
        f"{docname}: mean brightness {brightness}: the dark theme did not apply"
    )


@pytest.mark.parametrize("docname", PAGES)
def test_nothing_overflows_the_page(visits, docname):
    p = visits[docname].probe
    assert p["pageWidth"] <= p["viewportWidth"], (
        f"{docname}: the page scrolls sideways ({p['pageWidth']}px > {p['viewportWidth']}px)"
    )
    assert not p["wideTables"], f"{docname}: {p['wideTables']} tables stick out of the text"


# --------------------------------------------------------------------------------------------
# Accessibility: axe-core and reflow on a phone
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("docname", PAGES)
def test_axe_finds_nothing_serious(visits, docname):
    """WCAG 2.1 A and AA by axe-core: no critical or serious violation, every rule in the light
    theme and the colour rules (contrast) in the dark one."""
    found = [
        f"{theme} theme: {line}"
        for theme, violations in visits[docname].axe.items()
        for line in failures(violations)
    ]
    assert not found, f"{docname}: axe-core finds\n" + "\n".join(found)


@pytest.mark.parametrize("docname", PAGES)
def test_page_reflows_on_a_phone(visits, docname):
    """At 375 px nothing scrolls the page sideways and nothing is cut off (WCAG 1.4.10)."""
    problems = reflow_problems(visits[docname].narrow)
    assert not problems, f"{docname} at {NARROW['width']}px:\n" + "\n".join(problems)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_colour_rules_saw_every_text_style(visits, theme):
    """Every style of text on the site had the colour rules run on an element of it in
    ``theme`` (a style whose element could not be found again is not counted)."""
    everywhere = set().union(*(v.styles[theme] for v in visits.values()))
    checked = set().union(*(v.colour_checked[theme] for v in visits.values()))
    assert everywhere, f"no text style was read in the {theme} theme"
    missed = everywhere - checked
    assert not missed, f"{len(missed)} text styles never checked in the {theme} theme: {missed}"


def test_css_allows_both_orientations(browser, reader):
    """axe's one rule that reads the stylesheets' text, on one page (the site's CSS is the same
    on every page); the 404 of axe's own stylesheet fetch (site_a11y.run_axe) is not the page's."""
    _, base, _ = browser
    reader.page.goto(_doc_url(base, PAGES[0]))
    found = failures(run_axe(reader.page, (CSSOM_RULE,), preload=True))
    assert not found, "\n".join(found)


#: A page with one of each fault the two checks above look for.
FAULTY_PAGE = """<!DOCTYPE html><html lang="en"><head><title>faults</title></head><body><main>
<h1>Faults</h1>
<details><summary></summary><p>a toggle without a name</p></details>
<input type="range">
<p style="color: #999; background: #fff">grey on white</p>
<p style="width: 200px">inline <span id="clipped" style="display: inline-block; max-width: 100%;
  overflow: hidden; white-space: nowrap">a formula wider than its column, clipped</span></p>
<p><code>an_identifier_that_is_far_too_long_for_a_phone_screen_and_never_breaks</code></p>
</main></body></html>"""


def test_accessibility_checks_can_fail(reader):
    """The axe and reflow checks catch a fault of each kind they are meant for."""
    page = reader.page
    # The colour rules would run on this page after a site without its grey text.
    page.set_content(FAULTY_PAGE.replace('style="color: #999; background: #fff"', ""))
    cover = StyleCover()
    assert cover.claim("light", text_styles(page)) and not cover.claim("light", text_styles(page))
    page.set_content(FAULTY_PAGE)
    new = cover.claim("light", text_styles(page))
    assert new, "a new colour of text went unnoticed"
    # ... and the colour rules on the first element of each new style find the grey text.
    found, checked = run_colour_rules(page, new)
    only_new = "\n".join(failures(found))
    assert checked == new and "color-contrast (" in only_new and "grey on white" in only_new
    found = failures(run_axe(page))
    page.emulate_media(color_scheme="dark")
    dark = "\n".join(failures(run_axe(page, COLOUR_RULES)))
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(NARROW)
    problems = reflow_problems(reflow(page))
    page.set_viewport_size(VIEWPORT)
    for rule, element in [("summary-name", "summary"), ("label", "input"), ("color-contrast", "p")]:
        assert any(f.startswith(f"{rule} (") and f": <{element}" in f for f in found), found
    assert "color-contrast (" in dark and "link-in-text-block" not in dark, dark
    assert problems[0].startswith("the page scrolls sideways") and "<code>" in problems[0]
    assert any('<span#clipped> "a formula' in p for p in problems[1:]), problems
