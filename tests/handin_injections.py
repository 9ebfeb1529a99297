"""Hand-ins that try to run script where people look at them (issue 47), and an honest one.

Every vector that would run script pushes its name to ``window.pwned``; every vector that
would make a request without script asks for a path holding ``pwned``. A page that shows a
hand-in inertly ends with ``window.pwned`` undefined and no request for ``pwned``. Shared by
the unit test of the sanitizer (``test_inert.py``) and the browser test (``test_inert_lab.py``).
"""

from __future__ import annotations

import base64
import copy

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell


def script_for(name: str) -> str:
    """JavaScript that records that the vector ``name`` ran."""
    return f"(window.pwned=window.pwned||[]).push('{name}')"


_SVG_WITH_SCRIPT = (
    '<svg xmlns="http://www.w3.org/2000/svg" onload="' + script_for("svg_attachment") + '">'
    "<script>" + script_for("svg_attachment_script") + "</script><circle r='4'/></svg>"
)

#: Raw HTML in a Markdown cell, by name. Each one runs script, or makes a request to the
#: server's API (``/api/contents/pwned-...``), on a page that renders it as it is.
MARKDOWN_VECTORS: dict[str, str] = {
    "script": f"<script>{script_for('script')}</script>",
    "img_onerror": f'<img src="x" onerror="{script_for("img_onerror")}">',
    "svg_onload": f'<svg onload="{script_for("svg_onload")}"></svg>',
    "svg_script": f"<svg><script>{script_for('svg_script')}</script></svg>",
    "details_ontoggle": f'<details open ontoggle="{script_for("details_ontoggle")}">x</details>',
    "body_onload": f'<body onload="{script_for("body_onload")}">',
    "input_autofocus": f'<input autofocus onfocus="{script_for("input_autofocus")}">',
    "iframe_srcdoc": (
        "<iframe srcdoc=\"<script>(parent.pwned=parent.pwned||[]).push('iframe_srcdoc')"
        '</script>"></iframe>'
    ),
    "object_data": (
        f'<object data="data:text/html,<script>{script_for("object")}</script>"></object>'
    ),
    "embed_src": f'<embed src="data:text/html,<script>{script_for("embed")}</script>">',
    "mxss_math": f'<math><mtext><table><mglyph><style><img src=x onerror="{script_for("mxss")}">',
    "noscript_title": (
        f'<noscript><p title="</noscript><img src=x onerror={script_for("noscript")}>"></noscript>'
    ),
    # Links and navigation: they run when clicked (or the page moves): none may survive.
    "js_link": f'<a href="javascript:{script_for("js_link")}">grade me</a>',
    "js_link_case": f'<a href="JaVaScRiPt:{script_for("js_link_case")}">grade me</a>',
    "js_link_entity": f'<a href="&#106;avascript:{script_for("js_link_entity")}">grade me</a>',
    "js_link_tab": f'<a href="java&#9;script:{script_for("js_link_tab")}">grade me</a>',
    "md_js_link": f"[grade me](javascript:{script_for('md_js_link')})",
    "data_html_link": f'<a href="data:text/html,<script>{script_for("data_link")}</script>">x</a>',
    "form_action": f'<form action="javascript:{script_for("form")}"><button>Submit</button></form>',
    "meta_refresh": f'<meta http-equiv="refresh" content="0;url=javascript:{script_for("meta")}">',
    # Requests to the server's API that need no script at all.
    "img_api": '<img src="/api/contents/pwned-img">',
    "style_url": "<style>body{background:url(/api/contents/pwned-css)}</style>",
    "style_attr_url": '<p style="background-image:url(/api/contents/pwned-style)">s</p>',
    # What the student did: read the instructor's files through the API.
    "fetch_api": (
        "<img src=x onerror=\"fetch('/api/contents/pwned-fetch')"
        f'.then(r => {script_for("fetch_api")})">'
    ),
    # Last: a page's base URL changes the relative URLs after it (the API requests above
    # would resolve to javascript:/api/... and never be made).
    "base_href": '<base href="javascript:/">',
}

#: More shapes, the kind a held-out set tries: parser differentials (raw-text elements,
#: comments, foreign content: where a sanitizer and a browser disagree), URL spellings,
#: Markdown's own link forms, and requests made by CSS or responsive images. Each needs a
#: browser to judge (the standard library's parser reads several differently); ``{P}`` is the
#: vector's script.
MORE_VECTORS: dict[str, str] = {
    "tab_entity": '<img src=x><a href="jav&#x09;ascript:{P}">a</a>',
    "leading_ctrl": '<a href=" &#14;  javascript:{P}">a</a>',
    "hex_entities": (
        '<a href="&#x6A;&#x61;&#x76;&#x61;&#x73;&#x63;&#x72;&#x69;&#x70;&#x74;&#x3A;{P}">a</a>'
    ),
    "colon_entity": '<a href="javascript&colon;{P}">a</a>',
    "vbscript": '<a href="vbscript:msgbox(1)">a</a>',
    "data_b64_link": ('<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">a</a>'),
    "svg_xlink": '<svg><a xlink:href="javascript:{P}"><text y="10">x</text></a></svg>',
    "svg_animate": '<svg><animate onbegin="{P}" attributeName="x" dur="1s"/></svg>',
    "svg_set": (
        '<svg><a><set attributeName="href" to="javascript:{P}"/><text y="9">x</text></a></svg>'
    ),
    "slash_attrs": '<img/src=x/onerror="{P}">',
    "video_source": '<video><source onerror="{P}"></video>',
    "audio": '<audio src=x onerror="{P}"></audio>',
    "input_image": '<input type=image src=x onerror="{P}">',
    "marquee": '<marquee onstart="{P}">m</marquee>',
    "body_pageshow": '<body onpageshow="{P}">',
    "svg_script_href": '<svg><script href="data:,{P}"/></svg>',
    "iframe_js_src": '<iframe src="javascript:parent.{P}"></iframe>',
    "frameset": '<frameset onload="{P}">',
    "noembed": '<noembed><img title="</noembed><img src=x onerror={P}>"></noembed>',
    "textarea": '<textarea><img title="</textarea><img src=x onerror={P}>"></textarea>',
    "xmp": '<xmp><p title="</xmp><img src=x onerror={P}>"></xmp>',
    "title": '<title><img title="</title><img src=x onerror={P}>"></title>',
    "template": '<template><script>{P}</script></template><img src=x onerror="{P}">',
    "comment": '<!--<img src="--><img src=x onerror="{P}">',
    "cdata": '<![CDATA[<img src=x onerror="{P}">]]>',
    "split_script": "<scr<script>ipt>{P}</script>",
    "purify_form_math": (
        '<form><math><mtext></form><form><mglyph><style></math><img src onerror="{P}">'
    ),
    "purify_svg_p": '<svg></p><style><a id="</style><img src=1 onerror={P}>">',
    "math_mi": '<math><mi><table><mi><style><img src onerror="{P}">',
    "x_onclick_focus": '<x contenteditable autofocus onfocus="{P}">x</x>',
    "a_onmouseover": (
        '<a href="https://example.org" onmouseover="{P}" '
        'style="display:block;width:5000px;height:5000px">a</a>'
    ),
    "button_formaction": '<form><button formaction="javascript:{P}">x</button></form>',
    "table_background": '<table background="javascript:{P}"><tr><td>x</td></tr></table>',
    "style_import": '<style>@import "/api/contents/pwned-import";</style>',
    "link_css": '<link rel="stylesheet" href="/api/contents/pwned-link">',
    "img_srcset": '<img srcset="/api/contents/pwned-srcset 1x">',
    "css_image_set": '<p style="background: image-set(url(/api/contents/pwned-is) 1x)">x</p>',
    "picture": '<picture><source srcset="/api/contents/pwned-pic"><img></picture>',
    "md_entity_link": "[a](javascript&#58;{P})",
    "md_angle_link": "[a](<javascript:{P}>)",
    "md_image_js": "![a](javascript:{P})",
    "md_ref_link": "[a][r]\n\n[r]: javascript:{P}",
    "md_autolink": "<javascript:{P}>",
    "md_upper": "[a](JAVASCRIPT:{P})",
    "md_img_quote": '![x](x" onerror="{P})',
    "md_title_quote": '[x](https://example.org "t\\" onmouseover=\\"{P}")',
    "md_html_block": '<div>\n<img src=x onerror="{P}">\n</div>',
    "md_api_img": "![x](/api/contents/pwned-mdimg)",
    "meta_refresh_data": (
        '<meta http-equiv="refresh" content="0;url=data:text/html,<script>{P}</script>">'
    ),
    "object_svg": "<object data=\"data:image/svg+xml,<svg onload='parent.{P}'></svg>\"></object>",
    "math_href": "$\\href{javascript:{P}}{click}$",
}
MORE_VECTORS = {k: v.replace("{P}", script_for(k)) for k, v in MORE_VECTORS.items()}

#: Code cell outputs: rich representations that run script where they are shown as they are.
OUTPUT_CODE = f'''class Shown:
    def _repr_html_(self):
        return """<b>html</b><script>{script_for("html_output")}</script>
<img src=x onerror="{script_for("html_output_onerror")}">"""

    def _repr_javascript_(self):
        return "{script_for("js_output")}"

    def _repr_markdown_(self):
        return """<img src=x onerror="{script_for("markdown_output")}">"""


Shown()
'''

#: Notebook-level widget state: a page that embeds it loads a widget manager that runs it.
WIDGET_STATE = {
    "application/vnd.jupyter.widget-state+json": {"version_major": 2, "state": {"x": {}}}
}


def svg_attachment_cell() -> nbformat.NotebookNode:
    """A Markdown cell showing an SVG attachment that carries script."""
    cell = new_markdown_cell("![figure](attachment:fig.svg)")
    cell["attachments"] = {"fig.svg": {"image/svg+xml": _SVG_WITH_SCRIPT}}
    return cell


def injection_cells() -> list[nbformat.NotebookNode]:
    """The cells a hostile student adds: every Markdown vector, an SVG attachment, and a code
    cell whose result shows HTML, JavaScript and Markdown."""
    vectors = {**MARKDOWN_VECTORS, **MORE_VECTORS}
    cells = [new_markdown_cell(f"{name}: {html}") for name, html in vectors.items()]
    return [*cells, svg_attachment_cell(), new_code_cell(OUTPUT_CODE)]


#: The honest student's own cells: a formula, a table, code and a plot.
FORMULA = r"$$\mu_i = \frac{1}{D}\sum_{j=1}^{D} x_{ij}$$ and inline $\sigma_i > 0$."
TABLE = "| N | D |\n|---|---|\n| 2 | 3 |"


def honest_cells() -> list[nbformat.NotebookNode]:
    return [new_markdown_cell(f"Centering: {FORMULA}\n\n{TABLE}"), new_code_cell(plot_code())]


def with_cells(nb: nbformat.NotebookNode, cells: list, *, widgets: bool = False):
    """A copy of the hand-in ``nb`` with ``cells`` added after its first cell."""
    nb = copy.deepcopy(nb)
    nb.cells[1:1] = cells
    if widgets:
        nb.metadata["widgets"] = copy.deepcopy(WIDGET_STATE)
    return nb


def png_bytes(width: int = 48, height: int = 32) -> bytes:
    """A small real PNG of a plotted sine curve (dark line on white, 8-bit grayscale), made
    with the standard library: what a plot output or a plot attachment holds, without the
    seconds of importing matplotlib."""
    import math
    import struct
    import zlib

    rows = [bytearray([255] * width) for _ in range(height)]
    for x in range(width):
        y = round((height - 1) * (0.5 - 0.4 * math.sin(2 * math.pi * x / width)))
        rows[y][x] = 0
    raw = b"".join(b"\0" + bytes(r) for r in rows)  # filter type 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def png_base64() -> str:
    return base64.b64encode(png_bytes()).decode()


def plot_code() -> str:
    """An honest answer's extra cell whose result shows a plot (``image/png``), with no
    import: the answer policy lets it run as it is."""
    return (
        "class Plot:\n    def _repr_png_(self):\n"
        f"        return bytes.fromhex('{png_bytes().hex()}')\n\n\nPlot()"
    )
