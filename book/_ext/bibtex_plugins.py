"""Look each bibliography plugin up once per build, not once per citation.

sphinxcontrib-bibtex asks pybtex (and its own registry) for the citation style, the label
style and the plain-text backend every time it resolves a citation. Each lookup scans the
entry points of every installed distribution through ``importlib.metadata``: about 7 ms here,
and the book resolves a few hundred citations, so a build spent seconds of CPU finding the
same three classes again. The installed entry points cannot change during a build, so each
scan is remembered; plugins registered at run time are still looked up first, as before.
"""

from __future__ import annotations

import functools

import pybtex.plugin
import sphinxcontrib.bibtex.plugin


def _remembered(lookup):
    # A second Sphinx application in the same interpreter runs setup again and finds the
    # lookup already remembered: wrapping it again would only add a layer.
    return lookup if hasattr(lookup, "cache_info") else functools.lru_cache(maxsize=None)(lookup)


def setup(app):
    # Module attributes, looked up by name at each call: replacing them is enough.
    pybtex.plugin.entry_points = _remembered(pybtex.plugin.entry_points)
    sphinxcontrib.bibtex.plugin._entry_points = _remembered(
        sphinxcontrib.bibtex.plugin._entry_points
    )
    return {"parallel_read_safe": True, "parallel_write_safe": True}
