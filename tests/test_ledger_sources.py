"""How the claims ledger shows where a claim comes from (normedu.ledger's Source column)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from normedu import ledger

REPO = Path(__file__).resolve().parent.parent


def _claim(source: str, chapter: str = "drift") -> ledger.Claim:
    return ledger.Claim(
        id="x", chapter=chapter, claim="c", source=source, measured="1", verdict="confirmed"
    )


def test_cite_builds_a_myst_citation():
    assert ledger.cite("ba2016layer") == "{cite}`ba2016layer`"
    assert ledger.cite("a2020x", "b2021y", where="Table 2") == "{cite}`a2020x,b2021y`, Table 2"
    with pytest.raises(ValueError):
        ledger.cite()


def test_source_column_links_a_reference_or_the_chapter():
    cited = _claim(ledger.cite("ba2016layer", where="§5"))
    own = _claim("the course's own summary, an internal note", chapter="summary")
    table = ledger.to_markdown([cited, own])
    rows = table.splitlines()[2:]
    assert "| {cite}`ba2016layer`, §5 |" in rows[0]
    # A claim only this course makes is the chapter's; the internal note is never shown.
    assert "| this course, {doc}`summary` |" in rows[1] and "internal" not in table


def _bib_keys() -> set[str]:
    text = (REPO / "book" / "references.bib").read_text()
    return set(re.findall(r"^@\w+\{([^,\s]+),", text, flags=re.MULTILINE))


def test_every_key_the_claims_cite_is_in_the_bibliography():
    used = set()
    for p in sorted((REPO / "normedu" / "claims").glob("*.py")):
        src = p.read_text()
        for args in re.findall(r"\bcite\(([^)]*)\)", src):
            used |= set(re.findall(r"\"([A-Za-z0-9_]+)\"", args.split("where=")[0]))
        for keys in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", src):
            used |= {k.strip() for k in keys.split(",")}
    assert used, "no claim cites a published work"
    assert not used - _bib_keys(), f"keys missing from references.bib: {used - _bib_keys()}"
