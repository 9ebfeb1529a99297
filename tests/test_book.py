"""The book: it builds with warnings as errors, math is served locally, and every chapter also
runs as a plain notebook outside the build (what a student does after `make lab`)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import jupytext
import pytest
import yaml
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent


def toc_files() -> list[str]:
    """Every document in _toc.yml, in reading order (root first)."""
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                files.append(e["file"])
            walk(e.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return files


def notebook_pages() -> list[str]:
    """Pages of the toc that hold code cells (MyST notebooks)."""
    return [f for f in toc_files() if "```{code-cell}" in (REPO / f"{f}.md").read_text()]


def test_toc_pages_exist_and_code_pages_are_myst_notebooks():
    files = toc_files()
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


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_book_builds_without_warnings_and_with_local_mathjax(book_html):
    index = book_html / "index.html"
    assert index.exists()
    assert (book_html / "_static" / "mathjax" / "tex-mml-chtml.js").exists()
    pages_with_math = 0
    for f in toc_files():
        page = book_html / f"{f}.html"
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
    reports = (
        list((book_html / "reports").glob("**/*.err.log"))
        if (book_html / "reports").exists()
        else []
    )
    assert not reports, f"cells failed: {[p.name for p in reports]}"


@pytest.mark.slow
@pytest.mark.parametrize("page", notebook_pages())
def test_chapter_runs_as_a_plain_notebook(page, tmp_path, monkeypatch):
    """Convert with jupytext and execute with nbclient, outside the book build."""
    monkeypatch.setenv("NORMEDU_LEDGER_DIR", str(tmp_path / "ledger"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    src = REPO / f"{page}.md"
    nb = jupytext.read(src)
    assert any(c.cell_type == "code" for c in nb.cells)
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(src.parent)}}
    ).execute()
    elapsed = time.perf_counter() - start
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
    print(f"{page}: executed in {elapsed:.1f} s")
