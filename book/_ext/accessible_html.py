"""Names and roles that the theme's and docutils' HTML leave out, for screen-reader users.

An axe-core audit (WCAG 2.1 A/AA) of the built book found, on top of what the page text can fix:

- pydata-sphinx-theme 0.17 writes each expand/collapse toggle of the sidebar as a ``<summary>``
  holding only a decorative chevron (``role="presentation"``), so a screen reader announces an
  unnamed "disclosure triangle" on every page (axe ``summary-name``, serious). The theme builds
  the sidebar when the page template calls ``generate_toctree_html``; that function is wrapped
  so each such ``<summary>`` gets ``aria-label="Pages under <the link it belongs to>"``.
- docutils writes a citation list as ``<div role="list">`` whose entries carry
  ``role="doc-biblioentry"``: deprecated in DPUB-ARIA 1.1, and not a ``listitem``, so the list
  has no items for assistive technology (axe ``aria-required-children``, critical, and
  ``aria-deprecated-role``). The entries become ``role="listitem"``.

The theme's clipping of inline formulas and long inline code on narrow screens is fixed in
``assets/normedu.css``; the animation slider's label in ``normedu.plots.layernorm``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from sphinx.application import Sphinx

#: docutils' role for a citation entry (HTML5 writer, ``visit_citation``).
BIBLIOENTRY = re.compile(r'\brole="doc-biblioentry"')


def name_sidebar_toggles(soup: Any) -> None:
    """Give every ``<summary>`` without text of a theme-built toctree an ``aria-label``.

    ``soup`` is the BeautifulSoup tree the theme returns. A summary that holds a part caption
    already has a name (its text) and is left alone.
    """
    for summary in soup.select("li.has-children > details > summary"):
        if summary.get_text(strip=True) or summary.get("aria-label"):
            continue
        link = summary.find_parent("li").find("a", recursive=False)
        title = link.get_text(" ", strip=True) if link else ""
        summary["aria-label"] = f"Pages under {title}" if title else "Pages in this section"


def label_sidebar_toggles(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Wrap the theme's ``generate_toctree_html`` (set per page at priority 500)."""
    generate = context.get("generate_toctree_html")
    if generate is None or getattr(generate, "names_toggles", False):
        return

    @functools.wraps(generate)
    def generate_named(kind: str, *args: Any, **kwargs: Any) -> Any:
        soup = generate(kind, *args, **kwargs)
        if kind == "sidebar" and hasattr(soup, "select"):
            name_sidebar_toggles(soup)
        return soup

    generate_named.names_toggles = True
    context["generate_toctree_html"] = generate_named


def citations_as_list_items(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """``role="doc-biblioentry"`` -> ``role="listitem"`` in the page body."""
    body = context.get("body")
    if body and BIBLIOENTRY.search(body):
        context["body"] = BIBLIOENTRY.sub('role="listitem"', body)


def setup(app: Sphinx) -> dict[str, Any]:
    # After pydata-sphinx-theme puts generate_toctree_html into the context (priority 500).
    app.connect("html-page-context", label_sidebar_toggles, priority=600)
    app.connect("html-page-context", citations_as_list_items)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
