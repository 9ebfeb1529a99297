"""Static checks of the built website: no leaked solutions, no broken links, a clean build.

They read ``_build/html`` (or ``$NORMEDU_SITE_DIR``, see ``site_helpers.site_dir``) without a
browser. The checkers themselves are tested first on small planted sites, so a checker that
finds nothing cannot pass for a site that is clean.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import site_helpers
from site_helpers import (
    REPO,
    LinkIndex,
    find_leaks,
    is_local,
    require_chromium,
    secret_needles,
    site_dir,
    toc_pages,
)

# --------------------------------------------------------------------------------------------
# The checkers, on planted sites (fast, no build)
# --------------------------------------------------------------------------------------------


def _notebook(cells: list[tuple[str, str]]) -> str:
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": t,
                    "metadata": {},
                    "source": s,
                    "outputs": [],
                    "execution_count": None,
                }
                if t == "code"
                else {"cell_type": t, "metadata": {}, "source": s}
                for t, s in cells
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, list[tuple[str, str]]]:
    """A course with one solution and one hidden test, and an empty site folder."""
    (tmp_path / "solutions" / "a1").mkdir(parents=True)
    (tmp_path / "exercises" / "a1").mkdir(parents=True)
    solution = (
        "def layer_norm(x, eps=1e-5):\n"
        "    ### BEGIN SOLUTION\n"
        "    mu = x.mean(axis=-1, keepdims=True)\n"
        "    return (x - mu) / np.sqrt(x.var(axis=-1, keepdims=True) + eps)\n"
        "    ### END SOLUTION\n"
    )
    hidden = (
        "assert check(layer_norm)\n"
        "### BEGIN HIDDEN TESTS\n"
        "assert np.allclose(layer_norm(np.eye(3)).sum(axis=1), 0.0, atol=1e-6)\n"
        "### END HIDDEN TESTS\n"
    )
    (tmp_path / "solutions" / "a1" / "a1.ipynb").write_text(
        _notebook([("code", solution), ("code", hidden)])
    )
    released = "def layer_norm(x, eps=1e-5):\n    raise NotImplementedError()\n"
    (tmp_path / "exercises" / "a1" / "a1.ipynb").write_text(
        _notebook([("code", released), ("code", "assert check(layer_norm)\n")])
    )
    site = tmp_path / "html"
    site.mkdir()
    return site, secret_needles(tmp_path / "solutions")


def test_needles_are_solution_and_hidden_lines_only(planted):
    _, needles = planted
    lines = {n for _, n in needles}
    assert "mu = x.mean(axis=-1, keepdims=True)" in lines
    assert "assert np.allclose(layer_norm(np.eye(3)).sum(axis=1), 0.0, atol=1e-6)" in lines
    # Released code is public; markers are searched for separately.
    assert not any("NotImplementedError" in n or "BEGIN" in n for n in lines)


def test_leak_search_finds_highlighted_solution_code(planted):
    site, needles = planted
    # Pygments splits code into spans and escapes quotes: the search must see through that.
    (site / "page.html").write_text(
        '<pre><span class="n">mu</span> <span class="o">=</span> <span class="n">x</span>'
        '<span class="o">.</span><span class="n">mean</span><span class="p">(</span>'
        'axis<span class="o">=-</span>1, keepdims<span class="o">=</span>True)</pre>'
    )
    (site / "clean.html").write_text("<p>LayerNorm subtracts the mean.</p>")
    leaks = find_leaks(site, needles)
    assert any(x.startswith("page.html: line from solutions/a1/a1.ipynb") for x in leaks), leaks
    assert not any(x.startswith("clean.html") for x in leaks)


def test_leak_search_finds_markers_and_hidden_tests_in_notebooks(planted):
    site, needles = planted
    hidden = "assert np.allclose(layer_norm(np.eye(3)).sum(axis=1), 0.0, atol=1e-6)\n"
    (site / "nb.ipynb").write_text(_notebook([("code", "### BEGIN HIDDEN TESTS\n" + hidden)]))
    leaks = find_leaks(site, needles)
    assert any("marker 'BEGIN HIDDEN TESTS'" in x for x in leaks), leaks
    assert any("np.eye(3)" in x for x in leaks), leaks


def test_markers_leak_on_every_page_even_one_that_explains_them(planted):
    site, needles = planted
    (site / "_sources" / "book").mkdir(parents=True)
    (site / "guide.html").write_text("<p>Solutions go between <code>### BEGIN SOLUTION</code></p>")
    (site / "_sources" / "book" / "guide.md").write_text("### END HIDDEN TESTS")
    leaks = sorted(find_leaks(site, needles))
    assert leaks == [
        "_sources/book/guide.md: nbgrader marker 'END HIDDEN TESTS'",
        "guide.html: nbgrader marker 'BEGIN SOLUTION'",
    ], leaks


def test_link_checker_finds_missing_pages_and_anchors(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="sub/a.html#intro">ok</a> <a href="sub/a.html#nowhere">bad anchor</a>'
        '<a href="gone.html">bad page</a> <a href="https://example.org/x">outside</a>'
        '<img src="img.png"> <a href="#top" id="top">self</a>'
    )
    (tmp_path / "sub" / "a.html").write_text(
        '<h1 id="intro">A</h1><a href="../index.html#top">back</a>'
    )
    report = LinkIndex(tmp_path).check()
    broken = {(page, url) for page, url, _ in report.broken}
    assert broken == {
        ("index.html", "sub/a.html#nowhere"),
        ("index.html", "gone.html"),
        ("index.html", "img.png"),
    }
    assert report.external == [("index.html", "https://example.org/x")]


def test_toc_walk_covers_nested_sections(tmp_path: Path, monkeypatch):
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n"
        "  - caption: A\n    chapters:\n      - file: book/a.md\n"
        "        sections:\n          - file: book/a1\n"
        "  - caption: B\n    chapters:\n      - file: book/b\n"
    )
    monkeypatch.setattr(site_helpers, "REPO", tmp_path)
    monkeypatch.delenv("NORMEDU_SITE_TOC", raising=False)
    site_helpers.toc_pages.cache_clear()
    try:
        assert site_helpers.toc_pages() == ("book/intro", "book/a", "book/a1", "book/b")
    finally:
        site_helpers.toc_pages.cache_clear()


def test_only_loopback_counts_as_local():
    assert is_local("http://127.0.0.1:8000/_static/x.js")
    assert is_local("data:image/png;base64,AAAA")
    assert not is_local("https://cdn.jsdelivr.net/npm/mathjax@3")
    assert not is_local("http://localhost:8888/lab")  # not the test server: counts as leaving
    assert not is_local("https://127.0.0.1.nip.io/x")


def test_missing_chromium_skips_locally_and_fails_in_ci(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(site_helpers, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        require_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_chromium()


def _notebook_buttons():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "notebook_buttons", REPO / "book" / "_ext" / "notebook_buttons.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("repo", "kept"),
    [
        ("", False),
        ("https://github.com/executablebooks/jupyter-book", False),  # Jupyter Book's default
        ("https://github.com/someone/normedu", True),
    ],
)
def test_cloud_launch_buttons_need_a_repository(repo, kept):
    from types import SimpleNamespace

    ext = _notebook_buttons()
    launch = {"binderhub_url": "https://mybinder.org", "local_jupyterlab_url": "http://x:8888"}
    config = SimpleNamespace(html_theme_options={"repository_url": repo, "launch_buttons": launch})
    ext.drop_cloud_buttons_without_repository(None, config)
    assert ("binderhub_url" in launch) is kept
    assert launch["local_jupyterlab_url"] == "http://x:8888"


def test_bibliography_plugins_are_looked_up_once_per_build(monkeypatch):
    # book/_ext/bibtex_plugins.py: each entry-point scan (milliseconds) runs once, and the
    # lookups still answer as pybtex and sphinxcontrib-bibtex would on their own.
    import importlib.util

    import pybtex.plugin
    import sphinxcontrib.bibtex.plugin as sb_plugin
    from pybtex.style.formatting.plain import Style

    scans = []

    def counted(real):
        def scan(**where):
            scans.append(tuple(sorted(where.items())))
            return real(**where)

        return scan

    monkeypatch.setattr(pybtex.plugin, "entry_points", counted(pybtex.plugin.entry_points))
    monkeypatch.setattr(sb_plugin, "_entry_points", counted(sb_plugin._entry_points))
    spec = importlib.util.spec_from_file_location(
        "bibtex_plugins", REPO / "book" / "_ext" / "bibtex_plugins.py"
    )
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    ext.setup(None)

    for _ in range(3):
        assert pybtex.plugin.find_plugin("pybtex.style.formatting", "plain") is Style
        style = sb_plugin.find_plugin("sphinxcontrib.bibtex.style.referencing", "author_year")
        with pytest.raises(pybtex.plugin.PluginNotFound):
            pybtex.plugin.find_plugin("pybtex.style.formatting", "no-such-style")
    assert style.__name__ == "AuthorYearReferenceStyle"
    # Both libraries scanned (their answers did not come from a run-time registry) ...
    groups = {dict(s)["group"] for s in scans}
    assert {"pybtex.style.formatting", "sphinxcontrib.bibtex.style.referencing"} <= groups
    assert len(scans) == len(set(scans)), scans  # ... and every distinct scan ran once


def test_cdn_font_awesome_link_is_stripped():
    ext = _notebook_buttons()
    body = (
        '<p>before</p>\n<link rel="stylesheet"\n'
        'href="https://maxcdn.bootstrapcdn.com/font-awesome/4.4.0/css/font-awesome.min.css">'
        '<div class="animation"></div><link rel="stylesheet" href="../_static/local.css">'
    )
    context = {"body": body}
    ext.strip_cdn_links(None, "p", "page.html", context, None)
    assert "bootstrapcdn" not in context["body"]
    assert '<div class="animation">' in context["body"]
    assert "../_static/local.css" in context["body"]


# --------------------------------------------------------------------------------------------
# The real site
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(request) -> Path:
    return site_dir(request)


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_every_toc_page_is_built(site):
    missing = [d for d in toc_pages() if not (site / f"{d}.html").exists()]
    assert not missing, f"pages listed in _toc.yml but not built: {missing}"


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_no_solutions_or_hidden_tests_on_the_site(site):
    needles = secret_needles(REPO / "solutions")
    assert needles or not list((REPO / "solutions").rglob("*.ipynb")), "no solution lines found"
    leaks = find_leaks(site, needles)
    assert not leaks, "solution code or hidden tests reached the website:\n" + "\n".join(leaks)


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_no_broken_internal_links_or_anchors(site):
    report = LinkIndex(site).check()
    # External links are listed for a person to review, never fetched (the build is offline).
    listing = site.parent / "external-links.txt"
    listing.write_text("".join(f"{page}\t{url}\n" for page, url in sorted(set(report.external))))
    assert report.checked > 0
    assert not report.broken, "broken internal links:\n" + "\n".join(
        f"{page}: {url} ({why})" for page, url, why in report.broken
    )


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_build_is_warning_free(request):
    if os.environ.get("NORMEDU_SITE_DIR"):
        pytest.skip("NORMEDU_SITE_DIR is set: the build log belongs to that build, not this run")
    build = request.getfixturevalue("book_build")
    log = build.stdout + build.stderr
    # Sphinx's own "WARNING:"/"ERROR:" lines; kernels log "[IPKernelApp] WARNING | ..." to
    # stderr during execution, which is not a build warning.
    warnings = [line for line in log.splitlines() if re.search(r"\b(WARNING|ERROR):", line)]
    assert build.returncode == 0 and not warnings, "\n".join(warnings[:40]) or log[-4000:]
