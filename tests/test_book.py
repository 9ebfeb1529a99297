"""The book: it builds with warnings as errors, math is served locally, and every chapter runs
as a plain notebook (what a student does after `make lab`).

The build executes each page once per run; the tests below read what it executed
(``_build/html/_sources/<page>.ipynb``, the notebook readers download) instead of running the
pages again.
"""

from __future__ import annotations

import re

import jupytext
import nbformat
import pytest
from site_helpers import REPO, site_dir, source_path, toc_docnames, toc_pages


def notebook_pages() -> list[str]:
    """Pages of the toc that hold code cells (MyST notebooks), in reading order."""
    return [f for f in toc_pages() if "```{code-cell}" in source_path(f).read_text()]


def test_toc_pages_exist_and_code_pages_are_myst_notebooks():
    files = toc_docnames(REPO / "_toc.yml")
    assert len(files) == len(set(files)), "a page is listed twice in _toc.yml"
    code_pages = 0
    for f in files:
        text = (REPO / f"{f}.md").read_text()
        if "```{code-cell}" not in text:
            continue  # a plain Markdown page needs no kernel
        code_pages += 1
        assert text.startswith("---\njupytext:"), f"{f}.md has code cells but no jupytext header"
        assert "format_name: myst" in text and "name: python3" in text, f
    assert code_pages >= 7, f"only {code_pages} pages hold code: the chapters are missing"


@pytest.fixture(scope="module")
def site(request):
    return site_dir(request)


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_book_builds_without_warnings_and_with_local_mathjax(site):
    index = site / "index.html"
    assert index.exists()
    assert (site / "_static" / "mathjax" / "tex-mml-chtml.js").exists()
    pages_with_math = 0
    for f in toc_pages():
        page = site / f"{f}.html"
        assert page.exists(), f"{f} was not built"
        html = page.read_text()
        scripts = re.findall(r'<script[^>]+src="([^"]+)"', html)
        if 'class="math' in html:  # Sphinx adds MathJax only to pages with math
            assert any(s.split("?")[0].endswith("mathjax/tex-mml-chtml.js") for s in scripts), (
                f"{f}: MathJax not loaded"
            )
            pages_with_math += 1
        remote = [s for s in scripts if s.startswith(("http:", "https:", "//"))]
        assert not remote, f"{f} loads scripts from the internet: {remote}"
    assert pages_with_math > 0, "no page has math: the MathJax check checked nothing"
    reports = list((site / "reports").glob("**/*.err.log")) if (site / "reports").exists() else []
    assert not reports, f"cells failed: {[p.name for p in reports]}"


def _code(nb) -> list[str]:
    return [c.source.strip() for c in nb.cells if c.cell_type == "code"]


@pytest.mark.slow
@pytest.mark.xdist_group("book")
@pytest.mark.parametrize("page", notebook_pages())
def test_chapter_runs_as_a_plain_notebook(page, site):
    """The page as jupytext reads it (JupyterLab's *Jupytext Notebook*, or ``jupytext --to
    ipynb``) is exactly the code the build executed, and every cell of it ran without an error.

    The build executes with the same kernel (``python3``) in the page's folder, so this is the
    student's run without running the page a second time.
    """
    executed = nbformat.read(site / "_sources" / f"{page}.ipynb", as_version=4)
    student = jupytext.read(source_path(page))
    assert _code(student), f"{page}: no code cells"
    assert _code(student) == _code(executed), (
        f"{page}: jupytext and the book build read different code cells from the page"
    )
    code = [c for c in executed.cells if c.cell_type == "code"]
    not_run = [i for i, c in enumerate(code) if not c.get("execution_count")]
    assert not not_run, f"{page}: code cells {not_run} were not executed by the build"
    errors = [
        f"cell {i}: {o.get('ename')}: {o.get('evalue')}"
        for i, c in enumerate(code)
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{page}: " + "; ".join(errors)


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_every_page_runs_within_its_cpu_budget(site):
    """Each page the build executes in parallel (every code page but the ones that run last)
    has its kernel's CPU time recorded, within the budget of a chapter."""
    import runpy

    from normedu.build_costs import CPU_BUDGET, execution_costs

    last = runpy.run_path(str(REPO / "book" / "_ext" / "ledger_last.py"))["LAST"]

    costs = {c.docname: c for c in execution_costs(site.parent / ".jupyter_cache")}
    pages = [p for p in notebook_pages() if p not in last]
    missing = [p for p in pages if p not in costs or costs[p].cpu_seconds is None]
    assert not missing, f"no CPU time recorded for {missing}"
    over = {p: round(costs[p].cpu_seconds, 1) for p in pages if costs[p].cpu_seconds > CPU_BUDGET}
    assert not over, f"pages over {CPU_BUDGET} CPU-s: {over}"


#: TeX that must not reach a reader as text (the browser test lists the same on built pages).
RAW_TEX = re.compile(r"\$\$|\\frac|\\sqrt|\\begin\{")


@pytest.mark.parametrize("page", toc_pages())
def test_every_formula_parses_as_math(page):
    """Each page's Markdown, parsed as the book parses it (MyST with dollarmath and amsmath),
    leaves no TeX outside its math nodes: a display formula that cannot interrupt a paragraph
    in a list item, or a line of inline math starting with "+ ", shows as raw TeX otherwise.
    Code cells and directive bodies (admonitions, dropdowns) are not parsed here; the browser
    test checks the built pages whole."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    extensions = {"dollarmath", "amsmath", "colon_fence", "deflist", "substitution"}
    md = create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)
    html = md.render(source_path(page).read_text())
    html = re.sub(r"<pre.*?</pre>", "", html, flags=re.S)  # code cells, directive bodies
    text = re.sub(r'<(div|span) class="math[^"]*">.*?</\1>', "", html, flags=re.S)
    text = re.sub(r"<[^>]+>", "", text)
    raw = [text[max(0, m.start() - 60) : m.end() + 20] for m in RAW_TEX.finditer(text)]
    assert not raw, f"{page}: TeX left outside math: {raw[:3]}"
