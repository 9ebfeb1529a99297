"""Download and launch buttons for the chapter notebooks, and an offline-only page body.

sphinx-book-theme offers the executed ``.ipynb`` of a MyST notebook only when a cloud launch
provider (Binder, Colab, ...) is configured, and its launch code assumes a public repository.
This extension makes the course's choices explicit and configurable from ``_config.yml``:

- every notebook page offers its executed ``.ipynb`` (copied next to the ``.md`` in
  ``_sources/``), whatever the launch settings;
- ``launch_buttons.local_jupyterlab_url`` (e.g. ``http://localhost:8888``, what ``make lab``
  serves) adds a "JupyterLab (local)" launch button that opens the page's source there;
- the theme's Binder/Colab/JupyterHub buttons are kept only when ``repository.url`` names a
  real repository: without one they would point at Jupyter Book's own repository;
- matplotlib's ``to_jshtml`` animations link Font Awesome 4 from a CDN; the link is removed
  (the theme's bundled Font Awesome draws the icons), so the page makes no outside request;
- sphinx-thebe's scripts are dropped while ``launch_buttons.thebe`` is off (live code needs
  Binder and thebe from unpkg.com). Jupyter Book registers them twice on rebuilds, and the
  second copy throws "Identifier 'THEBE_JS_URL' has already been declared" on every page.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)

#: Jupyter Book's placeholder repository, used when ``repository.url`` is not set.
PLACEHOLDER_REPOS = ("", "https://github.com/executablebooks/jupyter-book")
CLOUD_KEYS = ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url", "jupyterlite_url")
#: ``<link rel="stylesheet" href="https://.../font-awesome...css">`` as written by to_jshtml.
CDN_FONT_AWESOME = re.compile(
    r"<link\b[^>]*href=[\"']https?://[^\"']*font-awesome[^\"']*[\"'][^>]*>", re.IGNORECASE
)


def _theme_launch(app: Sphinx) -> dict[str, Any]:
    return app.config.html_theme_options.setdefault("launch_buttons", {}) or {}


def drop_cloud_buttons_without_repository(app: Sphinx, config: Any) -> None:
    """Remove cloud launch providers when no repository URL is configured."""
    opts = config.html_theme_options
    launch = opts.get("launch_buttons") or {}
    repo = (opts.get("repository_url") or "").rstrip("/")
    if repo in PLACEHOLDER_REPOS:
        dropped = [k for k in CLOUD_KEYS if launch.get(k)]
        for key in (*CLOUD_KEYS, "thebe"):
            launch.pop(key, None)
        if dropped:
            LOGGER.info(
                "notebook_buttons: repository.url is not set; launch buttons %s left out", dropped
            )


def _is_notebook(app: Sphinx, pagename: str) -> bool:
    return "kernelspec" in app.env.metadata.get(pagename, {})


def _executed_notebook(app: Sphinx, source: Path) -> bytes:
    """The page's notebook with its outputs.

    myst-nb writes ``jupyter_execute/<page>.ipynb`` before merging cached outputs into it
    (execution mode "cache"), so that file has no outputs on a cache hit: take them from the
    jupyter-cache the build used.
    """
    import nbformat

    nb = nbformat.read(source, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    config = app.env.mystnb_config
    if code and not any(c.get("outputs") for c in code) and config.execution_mode == "cache":
        from jupyter_cache import get_cache

        try:
            _, nb = get_cache(config.execution_cache_path).merge_match_into_notebook(nb)
        except KeyError:
            LOGGER.info("notebook_buttons: no cached outputs for %s", source)
    return nbformat.writes(nb).encode("utf-8")


def add_notebook_download(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Publish the executed notebook as ``_sources/<page>.ipynb`` and offer it for download."""
    if doctree is None or not _is_notebook(app, pagename):
        return
    out = Path(app.outdir)
    executed = out.parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not executed.exists():
        LOGGER.warning(
            "notebook_buttons: no notebook for %s at %s (myst-nb writes it when it reads the "
            "page: rebuild from clean with `jupyter-book clean .`)",
            pagename,
            executed,
        )
        return
    context["ipynb_source"] = f"{pagename}.ipynb"


def write_notebook_download(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Write the notebook offered by :func:`add_notebook_download`.

    Runs after the theme, whose Binder support (once a repository is set) copies the
    output-less ``jupyter_execute`` notebook to the same place.
    """
    if context.get("ipynb_source") != f"{pagename}.ipynb":
        return
    out = Path(app.outdir)
    target = out / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    executed = out.parent / "jupyter_execute" / f"{pagename}.ipynb"
    target.write_bytes(_executed_notebook(app, executed))


def add_local_launch(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Add "JupyterLab (local)" to the theme's launch menu (creating the menu if needed)."""
    base = (_theme_launch(app).get("local_jupyterlab_url") or "").rstrip("/")
    if not base or doctree is None or not _is_notebook(app, pagename):
        return
    source = Path(app.env.doc2path(pagename)).relative_to(app.srcdir).as_posix()
    prefix = (app.config.html_theme_options.get("path_to_docs") or "").strip("/")
    path = f"{prefix}/{source}" if prefix else source
    button = {
        "type": "link",
        "text": "JupyterLab (local)",
        "tooltip": "Open this notebook in your own JupyterLab (start it with `make lab`)",
        "icon": "fas fa-laptop-code",
        "url": f"{base}/lab/tree/{path}",
        "label": "launch-local-jupyterlab",
    }
    buttons = context.setdefault("header_buttons", [])
    for group in buttons:
        if group.get("label") == "launch-buttons":
            group["buttons"].append(button)
            return
    buttons.insert(
        0,
        {
            "type": "group",
            "tooltip": "Launch interactive content",
            "icon": "fas fa-rocket",
            "buttons": [button],
            "label": "launch-buttons",
        },
    )


def strip_cdn_links(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Remove the CDN Font Awesome link that matplotlib animations carry."""
    body = context.get("body")
    if body and CDN_FONT_AWESOME.search(body):
        context["body"] = CDN_FONT_AWESOME.sub("", body)


def _is_thebe(asset: Any) -> bool:
    name = str(getattr(asset, "filename", "") or "")
    body = str(getattr(asset, "attributes", {}).get("body", ""))
    return "thebe" in name or "THEBE_JS_URL" in body


def tidy_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Drop sphinx-thebe's assets unless thebe is on, and any script listed twice."""
    thebe_on = bool(_theme_launch(app).get("thebe"))
    for key in ("script_files", "css_files"):
        if key not in context:
            continue
        seen, kept = set(), []
        for asset in context[key]:
            if (not thebe_on and _is_thebe(asset)) or asset in seen:
                continue
            seen.add(asset)
            kept.append(asset)
        context[key] = kept


def setup(app: Sphinx) -> dict[str, Any]:
    # Before sphinx-book-theme reads the options at builder-inited.
    app.connect("config-inited", drop_cloud_buttons_without_repository, priority=900)
    # The theme builds its header buttons at priority 501: the .ipynb must be known before,
    # the launch menu exists only after.
    app.connect("html-page-context", add_notebook_download, priority=500)
    app.connect("html-page-context", write_notebook_download, priority=502)
    app.connect("html-page-context", add_local_launch, priority=502)
    app.connect("html-page-context", strip_cdn_links)
    app.connect("html-page-context", tidy_scripts)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
