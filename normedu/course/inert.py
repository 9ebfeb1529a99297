"""Hand-ins shown inert: what a person opens from a hand-in runs none of the student's script.

Formgrader's grading view is served from the Jupyter server's own origin, where a script can
call the server's REST API with the instructor's login (read the hidden tests, change grades,
open a terminal); feedback pages are opened by students and instructors and may be uploaded to
an LMS. Both are made by nbconvert's ``HTMLExporter`` from the autograded notebook, so the
course configuration (:meth:`normedu.course.config.Course.nbgrader_config`) sets, for every
``HTMLExporter``:

- ``sanitize_html = True``: nbconvert's templates then leave out JavaScript outputs, widget
  views and the notebook's widget state, and pass raw cells, HTML and Markdown outputs through
  the ``clean_html`` filter;
- the filters ``clean_html`` (:func:`clean_html_filter`) and ``markdown2html``
  (:class:`InertMarkdown`: nbconvert's own Markdown rendering, attachments included, then
  :func:`clean_html`): Formgrader's template renders Markdown cells without ``clean_html``, and
  Markdown syntax makes HTML of its own (``[x](javascript:...)`` is a ``javascript:`` link),
  so the *rendered* HTML is what is cleaned;
- the preprocessor :class:`InertHandIn`: keeps only output types that are shown without
  script, cleans their HTML and metadata (an image's ``width`` lands unquoted in the page),
  removes widget state, escapes the student's names (Formgrader's header writes them
  unescaped), and puts ONE line at the top saying what was left out.

:func:`clean_html` is an allow-list, not a deny-list: HTML is parsed the way a browser parses
it (html5lib, as vendored by bleach), and only the elements in :data:`ALLOWED_TAGS` with the
attributes in :data:`ALLOWED_ATTRIBUTES` survive; links may only go to ``http``, ``https``,
``mailto`` or an anchor, images only come from ``data:image/...`` URLs (an ``<img>`` never runs
an SVG's script), inline styles keep a few layout properties and never a URL. Everything else
is unwrapped (its text kept) or, for elements whose content is code or a document of its own
(:data:`DROPPED`), removed with its content. bleach's own ``Cleaner`` then cleans the result
again with the same lists (defence in depth: two sanitizers must both fail).

Only what is displayed is cleaned: the notebook on disk is never written here.
"""

from __future__ import annotations

import base64
import html
import re
from collections import Counter

import bleach
from bleach import html5lib_shim
from bleach.css_sanitizer import CSSSanitizer
from jinja2 import pass_context
from nbconvert.preprocessors import Preprocessor
from traitlets.config import Configurable

#: Elements kept (HTML namespace only): text, lists, tables, images, code, headings.
ALLOWED_TAGS = frozenset(
    "a abbr b bdi bdo blockquote br caption center cite code col colgroup dd del details dfn "
    "div dl dt em figcaption figure h1 h2 h3 h4 h5 h6 hr i img ins kbd li mark ol p pre q rp "
    "rt ruby s samp small span strike strong sub summary sup table tbody td tfoot th thead tr "
    "tt u ul var wbr".split()
)
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_CELL = ("align", "valign", "colspan", "rowspan", "scope")
#: Attributes kept, per element ("*": on every kept element). URLs, styles, ids and classes
#: are checked further (:func:`_attribute`).
ALLOWED_ATTRIBUTES = {
    "*": ("title", "lang", "dir", "class", "style"),
    "a": ("href",),
    "img": ("src", "alt", "width", "height"),
    "td": _CELL,
    "th": _CELL,
    "table": ("border", "align"),
    "ol": ("start", "type"),
    "li": ("value",),
    "details": ("open",),
    "col": ("span",),
    "colgroup": ("span",),
    **{h: ("id",) for h in _HEADINGS},
}
#: CSS properties an inline style may keep (none of them takes a URL).
ALLOWED_CSS = frozenset(
    "color background-color text-align vertical-align font-weight font-style font-size "
    "font-family text-decoration white-space width height max-width min-width line-height "
    "letter-spacing margin margin-top margin-right margin-bottom margin-left padding "
    "padding-top padding-right padding-bottom padding-left border border-top border-right "
    "border-bottom border-left border-color border-width border-style border-collapse "
    "border-spacing list-style-type".split()
)
_CSS_UNSAFE = re.compile(r"url\s*\(|image|expression|\\|@|javascript|behavior|binding", re.I)
_CSS = CSSSanitizer(allowed_css_properties=ALLOWED_CSS, allowed_svg_properties=frozenset())

#: Elements removed WITH their content, by what the one-line note calls them. Their content is
#: code (script, style), a document or object of its own (frames, objects), a control that can
#: submit or navigate (forms), page-level settings (base, meta), or foreign markup (SVG,
#: MathML: where mutation-XSS shapes live). Any other element not in ALLOWED_TAGS is unwrapped.
DROPPED = {
    "script": ("script",),
    "frame or embedded object": (
        "iframe frame frameset object embed applet param portal fencedframe"
    ).split(),
    "style sheet": ("style",),
    "page-level tag": "base meta link title head".split(),
    "form or control": (
        "form input button select option optgroup textarea datalist output keygen"
    ).split(),
    "media element": "audio video source track canvas picture map area".split(),
    "inline SVG or MathML block": ("svg", "math"),
    "raw-text block": "noscript noembed noframes xmp plaintext template slot".split(),
}
_DROP = {tag: what for what, tags in DROPPED.items() for tag in tags}
_HTML_NS = (None, "http://www.w3.org/1999/xhtml")
_PAGE_TAG = re.compile(r"<(html|head|body)[\s/>]", re.I)

#: Schemes a link may use (an anchor ``#...`` too); images only come from these data URLs.
LINK_SCHEMES = ("http://", "https://", "mailto:")
_IMAGE_URL = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,[a-z0-9+/=]*", re.I)
#: Heading ids and anchor links of a hand-in get this prefix: a hand-in's element can never
#: take the id of one of the page's own (Formgrader finds its score boxes by id).
ID_PREFIX = "hand-in-"
_ID = re.compile(r"[\w.:-]{1,200}")
#: Classes kept: the Markdown renderer's and pygments' (short names), pandas' tables.
_CLASS = re.compile(
    r"(anchor-link|highlight|hll|dataframe|math|(language|lang)-[\w+-]{1,40}|[a-z]{1,2}[a-z0-9]?)"
)
_NUMBER = re.compile(r"\d{1,5}(\.\d{1,3})?(%|px)?")
#: Browsers drop ASCII whitespace and control characters around and inside URL schemes.
_URL_JUNK = re.compile(r"[\x00-\x20\x7f]+")

EVENT_HANDLER = "event handler"
UNSAFE_URL = "unsafe URL"  # a link or image source
UNSAFE_STYLE = "unsafe inline style"
OTHER = "other tag or attribute"


def _url_ok(value: str, *, image: bool) -> bool:
    url = _URL_JUNK.sub("", value)
    if image:
        return _IMAGE_URL.fullmatch(url) is not None
    return url.startswith("#") or url.lower().startswith(LINK_SCHEMES)


def _attribute(tag: str, name: str, value: str, removed: Counter) -> str | None:
    """The attribute's value to keep, or None (and why, counted in ``removed``)."""
    if name.startswith("on"):
        removed[EVENT_HANDLER] += 1
        return None
    if name not in ALLOWED_ATTRIBUTES.get(tag, ()) and name not in ALLOWED_ATTRIBUTES["*"]:
        removed[UNSAFE_URL if name in _URL_ATTRIBUTES else OTHER] += 1
        return None
    if name in ("href", "src"):
        if _url_ok(value, image=name == "src"):
            url = _URL_JUNK.sub("", value) if name == "src" else value.strip()
            if url.startswith("#") and not url.startswith("#" + ID_PREFIX):
                return "#" + ID_PREFIX + url[1:]
            return url
        removed[UNSAFE_URL] += 1
        return None
    if name == "style":
        css = _CSS.sanitize_css(value)
        if _CSS_UNSAFE.search(css) or css.count(":") < value.count(":"):
            removed[UNSAFE_STYLE] += 1  # a declaration left out, or one that may fetch
        return None if _CSS_UNSAFE.search(css) else css or None
    if name == "id":
        if not _ID.fullmatch(value):
            return None
        return value if value.startswith(ID_PREFIX) else ID_PREFIX + value
    if name == "class":
        return " ".join(c for c in value.split() if _CLASS.fullmatch(c)) or None
    if name in ("width", "height", "border", "span", "colspan", "rowspan", "start", "value"):
        if _NUMBER.fullmatch(value.strip()):
            return value
        removed[OTHER] += 1
        return None
    return value


#: Attributes that hold URLs in some element: removing one is said as an unsafe URL.
_URL_ATTRIBUTES = frozenset(
    "href src srcset srcdoc action formaction data codebase poster background xlink:href "
    "ping lowsrc dynsrc".split()
)


class _Inert(html5lib_shim.Filter):
    """The allow-list over html5lib's token stream (balanced: it comes from a tree)."""

    def __init__(self, source, removed: Counter):
        super().__init__(source)
        self.removed = removed

    def __iter__(self):
        skip = 0  # depth inside an element removed with its content
        unwrapped = []  # per open element: whether its tags were left out
        for token in super().__iter__():
            kind = token["type"]
            if kind in ("StartTag", "EmptyTag", "EndTag"):
                tag = token["name"].lower()
                if skip:
                    skip += {"StartTag": 1, "EndTag": -1}.get(kind, 0)
                    continue
                if kind == "EndTag":
                    if not unwrapped.pop():
                        yield token
                    continue
                foreign = token.get("namespace") not in _HTML_NS
                if tag in _DROP or (foreign and tag not in ALLOWED_TAGS):
                    self.removed[_DROP.get(tag, "inline SVG or MathML block")] += 1
                    skip = 1 if kind == "StartTag" else 0
                    continue
                keep = tag in ALLOWED_TAGS and not foreign
                if not keep:
                    self.removed[OTHER] += 1
                if kind == "StartTag":
                    unwrapped.append(not keep)
                if keep:
                    yield self._clean_tag(token, tag)
            elif skip or kind == "Doctype":
                continue
            elif kind == "Comment":
                continue  # comments are dropped silently: they never show
            else:
                yield token

    def _clean_tag(self, token: dict, tag: str) -> dict:
        data = {}
        for (ns, name), value in token["data"].items():
            full = f"{ns}:{name}" if ns else name
            kept = _attribute(tag, full.lower(), value, self.removed)
            if kept is not None:
                data[(None, full.lower())] = kept
        return {**token, "name": tag, "namespace": None, "data": data}


#: html5lib's own parser (the one bleach vendors), as a browser parses; bleach's tokenizer
#: keeps entities and text that looks like a broken tag unparsed, which a browser would not.
_PARSER = html5lib_shim.HTMLParser(namespaceHTMLElements=False)
_WALKER = html5lib_shim.getTreeWalker("etree")
_SERIALIZER = html5lib_shim.HTMLSerializer(
    quote_attr_values="always",
    omit_optional_tags=False,
    escape_lt_in_attrs=True,
    escape_rcdata=True,
    resolve_entities=False,
    sanitize=False,
    alphabetical_attributes=False,
)


def _bleach_attribute(tag: str, name: str, value: str) -> bool:
    if name not in ALLOWED_ATTRIBUTES.get(tag, ()) and name not in ALLOWED_ATTRIBUTES["*"]:
        return False
    if name == "src":
        return _IMAGE_URL.fullmatch(_URL_JUNK.sub("", value)) is not None
    return name != "href" or _url_ok(value, image=False)


#: The second, independent pass: bleach's own sanitizer with the same lists.
_BLEACH = bleach.Cleaner(
    tags=ALLOWED_TAGS,
    attributes=_bleach_attribute,
    protocols=frozenset({"http", "https", "mailto", "data"}),
    strip=True,
    strip_comments=True,
    css_sanitizer=_CSS,
)


def clean_html(text: str | bytes, removed: Counter | None = None) -> str:
    """``text`` (an HTML fragment) with only allow-listed markup left; what was left out is
    counted in ``removed`` (``{what: how many}``, the names of the one-line note).
    Idempotent: cleaning the result again changes nothing."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text:
        return ""
    done = _CACHE.get(text)
    if done is None:
        done = _clean(text)
        if len(text) <= _CACHE_CHARS:
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.clear()
            _CACHE[text] = done
            _CACHE.setdefault(done[0], (done[0], ()))  # it is clean: a template cleans twice
    cleaned, counts = done
    if removed is not None:
        removed.update(dict(counts))
    return cleaned


#: Cleaned fragments by their text: nbconvert's templates clean what the preprocessor cleaned
#: (outputs) or counted (Markdown) again, and html5lib parses in pure Python. Bounded: a few
#: thousand entries of at most 100,000 characters.
_CACHE: dict[str, tuple[str, tuple]] = {}
_CACHE_SIZE = 4096
_CACHE_CHARS = 100_000


def _clean(text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    removed = Counter()
    # The fragment parser drops these silently (a page has one of each); a browser would
    # give a <body onload=...> in the middle of a page's content to the page's own body.
    removed["page-level tag"] += len(_PAGE_TAG.findall(text))
    tokens = _Inert(_WALKER(_PARSER.parseFragment(text)), removed)
    cleaned = _BLEACH.clean(_SERIALIZER.render(tokens))
    return cleaned, tuple(sorted((k, n) for k, n in removed.items() if n > 0))


def clean_html_filter(text) -> str:
    """nbconvert's ``clean_html`` template filter, replaced (see the module docstring)."""
    return clean_html(text)


def render_markdown(source: str, attachments: dict | None = None) -> str:
    """A Markdown cell's HTML as nbconvert renders it (math kept for MathJax, attachments
    as data URLs), NOT yet cleaned."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    renderer = IPythonRenderer(escape=False, attachments=attachments or {})
    return MarkdownWithMath(renderer=renderer).render(source)


@pass_context
class InertMarkdown(Configurable):
    """nbconvert's ``markdown2html`` template filter, replaced: the exporter's own rendering
    (``HTMLExporter.markdown2html``: the cell's attachments, anchor links), then
    :func:`clean_html`. nbconvert constructs it with the exporter as ``parent``."""

    def __call__(self, context, source: str) -> str:
        render = getattr(self.parent, "markdown2html", None)
        if render is not None:
            rendered = render(context, source)
        else:
            rendered = render_markdown(source, context.get("cell", {}).get("attachments"))
        return clean_html(rendered)


#: Output types shown as they are (the templates escape text, LaTeX, JSON; images are data
#: URLs in an ``<img>``, where an SVG's script never runs), or cleaned (HTML, Markdown).
SHOWN_AS_IS = frozenset(
    "text/plain text/latex application/json image/png image/jpeg image/gif image/svg+xml".split()
)
CLEANED = frozenset({"text/html", "text/markdown"})
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
#: Output metadata kept, per type: the templates put ``width``/``height`` in the page unquoted.
_IMAGE_METADATA = {"width": (int, float), "height": (int, float), "unconfined": (bool,)}
_OUTPUT_KEYS = {
    "execute_result": {"output_type", "data", "metadata", "execution_count"},
    "display_data": {"output_type", "data", "metadata", "transient"},
    "stream": {"output_type", "name", "text"},
    "error": {"output_type", "ename", "evalue", "traceback"},
}
_TAG = re.compile(r"[\w-]{1,100}")
_CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_GRADE_ID = re.compile(r"[\w.-]{1,200}")


def _output_kind(mime: str) -> str:
    if "javascript" in mime or "ecmascript" in mime:
        return "JavaScript output"
    if "widget" in mime:
        return "widget"
    return f"{mime} output"


def _clean_output(output: dict, removed: Counter) -> None:
    """Clean one output in place (a copy of the hand-in's, never the file)."""
    kind = output.get("output_type")
    for key in set(output) - _OUTPUT_KEYS.get(kind, set(output)):
        del output[key]  # svg_filename and the like: a path written into the page
    if not isinstance(output.get("execution_count", 0), (int, type(None))):
        output["execution_count"] = None
    data = output.get("data")
    if not isinstance(data, dict):
        return
    for mime in list(data):
        value = data[mime]
        if mime in CLEANED and isinstance(value, (str, list)):
            text = "".join(value) if isinstance(value, list) else value
            if mime == "text/html":
                data[mime] = clean_html(text, removed)
            else:
                clean_html(render_markdown(text), removed)  # counted; the filter cleans
        elif mime not in SHOWN_AS_IS:
            removed[_output_kind(mime)] += 1
            del data[mime]
        elif mime in ("image/png", "image/jpeg") and not (
            isinstance(value, str) and _BASE64.fullmatch(value)
        ):
            removed[f"{mime} output"] += 1
            del data[mime]
    metadata = output.get("metadata")
    if isinstance(metadata, dict):
        kept = {}
        for mime, meta in metadata.items():
            if mime in data and isinstance(meta, dict):
                kept[mime] = {
                    k: v
                    for k, v in meta.items()
                    if isinstance(v, _IMAGE_METADATA.get(k, ())) or (k == "alt" and str(v))
                }
        output["metadata"] = kept


#: Plurals that are not the singular plus "s".
_PLURAL = {
    "frame or embedded object": "frames or embedded objects",
    "form or control": "forms or controls",
    "inline SVG or MathML block": "inline SVG or MathML blocks",
    OTHER: "other tags or attributes",
}


def describe(removed: Counter) -> str:
    """What a view left out, most frequent first: ``"2 scripts, 1 event handler"``."""
    parts = []
    for what, n in sorted(removed.items(), key=lambda kv: (-kv[1], kv[0])):
        parts.append(f"{n} {what if n == 1 else _PLURAL.get(what, what + 's')}")
    return ", ".join(parts)


#: The note's first words (tests and readers find it by them).
NOTE = "Shown inert"


def note_line(removed: Counter) -> str:
    return (
        f"**{NOTE}:** this view of the hand-in leaves out {describe(removed)}; "
        "the file as handed in is unchanged."
    )


class InertHandIn(Preprocessor):
    """nbconvert preprocessor (set as ``HTMLExporter.preprocessors`` by the course
    configuration): every output cleaned, widget state removed, cell ids, tags and nbgrader
    ids that would not be plain words dropped, and one Markdown cell at the top that says
    what was left out (none when nothing was). Works on the exporter's copy of the notebook."""

    def preprocess(self, nb, resources):
        # Formgrader's template writes the student's names unescaped; an LMS display name is
        # the student's to choose.
        for key in ("student", "first_name", "last_name"):
            if isinstance(resources.get(key), str):
                resources[key] = html.escape(resources[key])
        removed = Counter()
        if nb.metadata.pop("widgets", None) is not None:
            removed["widget state"] += 1
        for cell in nb.cells:
            self._cell(cell, removed)
        if removed:
            from nbformat.v4 import new_markdown_cell

            note = new_markdown_cell(note_line(removed), metadata={"normedu": {"inert": True}})
            nb.cells.insert(0, note)
        resources.setdefault("normedu", {})["removed"] = dict(removed)
        return nb, resources

    @staticmethod
    def _cell(cell, removed: Counter) -> None:
        if "id" in cell and not _CELL_ID.fullmatch(str(cell.id)):
            cell.id = "cell"
        if not isinstance(cell.get("execution_count", 0), (int, type(None))):
            cell.execution_count = None  # the prompt's number is written unescaped
        tags = cell.metadata.get("tags")
        if tags is not None:
            cell.metadata["tags"] = [t for t in tags if isinstance(t, str) and _TAG.fullmatch(t)]
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and not _GRADE_ID.fullmatch(str(grade_id)):
            removed[OTHER] += 1
            del cell.metadata["nbgrader"]
        if cell.cell_type == "markdown":
            clean_html(render_markdown(cell.source, cell.get("attachments")), removed)
        elif cell.cell_type == "raw":
            cell.source = clean_html(cell.source, removed)
        elif cell.cell_type == "code":
            for output in cell.get("outputs", []):
                _clean_output(output, removed)


def csp(nonce: str) -> str:
    """The Content-Security-Policy of a page the course writes from a hand-in: scripts only
    with the page's ``nonce`` (and what they load: MathJax's extensions), no request the page
    did not plan (no fetch, no frames, no forms, no ``<base>``), images from the page's
    folder or data URLs, fonts (MathJax's) from the page's folder."""
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}' 'strict-dynamic'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data: file:; "
        "connect-src 'none'; frame-src 'none'; object-src 'none'; base-uri 'none'; "
        "form-action 'none'"
    )


def page_nonce(text: str) -> str:
    """A nonce for a page, derived from the page itself: the same page gets the same nonce
    (unchanged pages are not rewritten), and a hand-in cannot know the nonce of the page it
    is part of."""
    import hashlib

    return base64.b64encode(hashlib.sha256(text.encode()).digest()[:18]).decode()
