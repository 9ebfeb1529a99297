"""Accessibility checks for the browser tests (``test_site.py``): axe-core and reflow at 375 px.

- :func:`run_axe` runs axe-core in the page. axe-core comes from the Python package
  ``axe-playwright-python`` (its bundled ``axe.min.js``, injected into the page: no CDN); the
  rules are WCAG 2.0 and 2.1, levels A and AA (:data:`AXE_TAGS`), or just the rules named.
- :func:`text_styles` and :class:`StyleCover` decide where the colour rules run. A colour
  rule's verdict on a piece of text depends only on its style: its colour, the background
  behind it, its size and weight (axe's "large text" threshold), its shadow and opacity, and
  for a link the colour of the text around it. Every page's text styles are read (cheap:
  one pass of ``getComputedStyle``); the colour rules (:data:`COLOUR_RULES`, the costliest
  of axe's: about half its time on a long page) run on a page only if it shows a style that
  no page checked before, in that theme. So every style of the site is checked in both themes,
  once, on the first page that has it.
- :func:`failures` turns axe's critical and serious violations into one line per element,
  naming the rule, what it asks, and the element (CSS selector and a snippet of its HTML).
- :func:`reflow` reads, at the tab's current size, whether the page scrolls sideways (and which
  elements stick out past the right edge) and which elements cut their content off: an element
  that clips (``overflow-x: hidden`` or ``clip``) content wider than itself, as the theme did
  with inline formulas. WCAG 1.4.10 asks for no sideways scrolling at 320 CSS px.
"""

from __future__ import annotations

import threading

#: axe-core tags: WCAG 2.0 and 2.1, levels A and AA.
AXE_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")
#: The rules whose result depends on the theme's colours: run again in the dark theme.
COLOUR_RULES = ("color-contrast", "link-in-text-block")
#: The rule that needs the stylesheets' text (WCAG 1.3.4: no CSS locks the orientation).
CSSOM_RULE = "css-orientation-lock"
#: Impacts that fail a test; "moderate" and "minor" findings are reported by axe but pass.
FAILING_IMPACTS = ("critical", "serious")
#: A phone held upright (WCAG's reflow width is 320 CSS px; 375 is the common phone width).
NARROW = {"width": 375, "height": 800}


def _axe_js(context: str) -> str:
    """An async function of ``options`` that runs axe on ``context`` and returns its
    violations, trimmed to what the tests report."""
    return (
        "async (options) => {\n"
        f"  const result = await axe.run({context}, options);\n"
        "  return result.violations.map(v => ({\n"
        "    id: v.id, impact: v.impact, help: v.help,\n"
        "    nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 160)})),\n"
        "  }));\n"
        "}"
    )


_RUN_AXE_JS = _axe_js("document")
#: axe on the marked elements only (:func:`run_colour_rules`).
_RUN_AXE_IN_JS = _axe_js("{include: [['[data-normedu-style-check]']]}")


def run_axe(
    page, rules: tuple[str, ...] = (), *, skip: tuple[str, ...] = (), preload: bool = False
) -> list[dict]:
    """axe-core's violations on the page now: ``[{id, impact, help, nodes: [{target, html}]}]``.

    ``rules``: run only these rules; by default every rule tagged :data:`AXE_TAGS`, less those
    in ``skip``. Only violations are returned (axe's passes would double the data sent back
    for nothing).

    ``preload``: let axe fetch every stylesheet again for the one rule that reads the CSS text
    (:data:`CSSOM_RULE`). Off by default: axe puts each fetched sheet back into the page as a
    ``<style>``, so the theme's ``@import "../basic.css"`` (in ``_static/styles/theme.css``)
    then resolves against the page, and the 404 it earns would count as the page's own failed
    request. The site's CSS is the same on every page: one page checks it
    (``test_css_allows_both_orientations``).
    """
    from axe_playwright_python.base import AXE_SCRIPT

    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_SCRIPT)
    only = {"type": "rule", "values": list(rules)} if rules else {"type": "tag", "values": AXE_TAGS}
    options = {"runOnly": only, "resultTypes": ["violations"], "preload": preload}
    if skip:
        options["rules"] = {rule: {"enabled": False} for rule in skip}
    return page.evaluate(_RUN_AXE_JS, options)


_TEXT_STYLES_JS = """
() => {
  // style -> the first element that shows it, kept for run_colour_rules.
  const first = new Map();
  const visible = (e) => e.getClientRects().length > 0;
  // The background behind an element's text: the first of it and its ancestors whose colour is
  // not transparent, the first background image or gradient on the way (axe then reads the
  // pixels' colours), and the product of their opacities. Each element's is its own style
  // over its parent's, kept per element: one getComputedStyle per element, not one per
  // ancestor of every element with text (MathJax's output nests deep).
  const behind = new Map();
  const backdrop = (a) => {
    if (!a) return {bg: 'none', image: 'none', opacity: 1};
    let b = behind.get(a);
    if (b) return b;
    const up = backdrop(a.parentElement), as = getComputedStyle(a), c = as.backgroundColor;
    b = {
      bg: c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent' ? c : up.bg,
      image: as.backgroundImage !== 'none' ? as.backgroundImage.slice(0, 60) : up.image,
      opacity: Number(as.opacity) * up.opacity,
    };
    behind.set(a, b);
    return b;
  };
  for (const e of document.body.querySelectorAll('*')) {
    const ownText = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!ownText || !visible(e)) continue;
    const s = getComputedStyle(e);
    const {bg, image, opacity} = backdrop(e);
    const parent = e.parentElement;
    const around = e.tagName === 'A' && parent ? getComputedStyle(parent).color : '';
    const style = [s.color, bg, image, opacity.toFixed(2), s.fontSize, s.fontWeight,
                   s.textShadow, s.textDecorationLine, around].join('|');
    if (!first.has(style)) first.set(style, e);
  }
  window.__normeduStyles = first;
  return [...first.keys()];
}
"""

_MARK_JS = """
(styles) => {
  document.querySelectorAll('[data-normedu-style-check]')
    .forEach(e => e.removeAttribute('data-normedu-style-check'));
  const marked = [];
  for (const style of styles) {
    const e = (window.__normeduStyles || new Map()).get(style);
    if (e && e.isConnected) { e.setAttribute('data-normedu-style-check', ''); marked.push(style); }
  }
  return marked;
}
"""


def text_styles(page) -> set[str]:
    """Every distinct style of text on the page now (see the module docstring), one string
    each; the page remembers the first element of each for :func:`run_colour_rules`."""
    return set(page.evaluate(_TEXT_STYLES_JS))


def run_colour_rules(page, styles: set[str]) -> tuple[list[dict], set[str]]:
    """axe's :data:`COLOUR_RULES` on the first element of each of ``styles`` (read by the
    last :func:`text_styles` on this page): each new style once, rather than every element
    of the page. Returns the violations (as :func:`run_axe` does) and the styles whose element
    was found and checked: a style whose element left the page is not counted as checked."""
    from axe_playwright_python.base import AXE_SCRIPT

    marked = set(page.evaluate(_MARK_JS, sorted(styles)))
    if not marked:
        return [], marked
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_SCRIPT)
    only = {"type": "rule", "values": list(COLOUR_RULES)}
    options = {"runOnly": only, "resultTypes": ["violations"]}
    found = page.evaluate(_RUN_AXE_IN_JS, options)
    page.evaluate(_MARK_JS, [])
    return found, marked


class StyleCover:
    """The text styles whose colour rules have run, per theme; shared by the tabs that visit
    the site's pages at once (a lock keeps the sets whole)."""

    def __init__(self) -> None:
        self.checked: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def claim(self, theme: str, styles: set[str]) -> set[str]:
        """The styles of ``styles`` not checked yet in ``theme`` (empty: none): the caller
        runs the colour rules on them (:func:`run_colour_rules`), and they count as checked
        from now."""
        with self._lock:
            seen = self.checked.setdefault(theme, set())
            new = styles - seen
            seen |= new
            return new


def failures(violations: list[dict]) -> list[str]:
    """One line per element of each critical or serious violation."""
    return [
        f"{v['id']} ({v['impact']}: {v['help']}) at {n['target']}: {n['html']}"
        for v in violations
        if v["impact"] in FAILING_IMPACTS
        for n in v["nodes"]
    ]


_REFLOW_JS = """
async () => {
  // The new viewport size is laid out by the next frame.
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const what = (e) => {
    const cls = [...e.classList].slice(0, 2).map(c => '.' + c).join('');
    const text = (e.textContent || '').replace(/\\s+/g, ' ').trim().slice(0, 60);
    return `<${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}${cls}> "${text}"`;
  };
  const all = [...document.body.querySelectorAll('*')];
  const cut = [];
  for (const e of all) {
    if (e.scrollWidth <= e.clientWidth + 1 || e.clientWidth === 0) continue;
    // MathJax's glyph parts clip on purpose (stretchy delimiters are drawn that way).
    if (e.closest('mjx-container')) continue;
    const style = getComputedStyle(e);
    // Visually hidden text for screen readers is clipped to nothing on purpose.
    if (!['hidden', 'clip'].includes(style.overflowX) || style.clip !== 'auto') continue;
    cut.push(`${what(e)}: ${e.scrollWidth}px of content in ${e.clientWidth}px`);
  }
  const pageWidth = document.scrollingElement.scrollWidth;
  const beyond = [];
  if (pageWidth > innerWidth) {
    const past = (e) => e.getBoundingClientRect().right > innerWidth + 1;
    // Inside a box that scrolls or clips (a display formula, a table's scroll container) an
    // element past the edge does not widen the page.
    const contained = (e) => {
      for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
        if (getComputedStyle(a).overflowX !== 'visible') return true;
      }
      return false;
    };
    for (const e of all) {
      // The innermost elements past the edge, with their parent (an inline element's block).
      if (past(e) && ![...e.children].some(past) && !contained(e)) beyond.push(
        `${what(e)} in ${what(e.parentElement)}: right edge at ` +
        `${Math.round(e.getBoundingClientRect().right)}px`);
    }
  }
  return {pageWidth, viewportWidth: innerWidth, cut, beyond: beyond.slice(0, 8)};
}
"""


def reflow(page) -> dict:
    """``{pageWidth, viewportWidth, cut: [...], beyond: [...]}`` at the tab's current size."""
    return page.evaluate(_REFLOW_JS)


def reflow_problems(result: dict) -> list[str]:
    """What :func:`reflow` found wrong, one line each (empty when the page reflows)."""
    problems = [f"cut off: {c}" for c in result["cut"]]
    if result["pageWidth"] > result["viewportWidth"]:
        problems.insert(
            0,
            f"the page scrolls sideways ({result['pageWidth']}px > {result['viewportWidth']}px); "
            "past the edge: " + "; ".join(result["beyond"]),
        )
    return problems
