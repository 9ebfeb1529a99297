"""The claims ledger: every quantitative claim of the course's sources, checked.

How the pieces fit:

1. Each chapter's checks are a function in ``normedu/claims/<chapter>.py`` decorated with
   ``@claims_for("<chapter>")``; it measures (reusing the chapter's cached experiment runs)
   and returns a list of :class:`Claim`.
2. The chapter calls :func:`check` at its end: that runs the function, writes the records to
   ``<ledger dir>/<chapter>.json`` (default ``_build/ledger`` of the course root, see
   :mod:`normedu.paths`; override with ``NORMEDU_LEDGER_DIR``) and returns them for display
   with :func:`to_markdown`.
3. The ledger page calls :func:`collect`: it reads every chapter's records and, for a chapter
   whose records are missing (a fresh build that runs the ledger page first), runs that
   chapter's checks itself. The table is generated from measurements, never typed by hand.

Verdicts:
- ``confirmed``: our measurement agrees with the claim (within the stated tolerance).
- ``depends``: true under some conditions only (device, kernel, size); the note says which.
- ``not reproduced``: our measurement disagrees, or, for a claim checked by reading its
  sources (which norm a model uses), they do not support it (``measured`` says what they
  do say).
- ``cited``: not measurable here (e.g. a 90-GPU-day ImageNet table); carried with its source.

Sources: a claim from a published work cites it with :func:`cite` (a ``{cite}`` role on
``book/references.bib``, so the ledger's Source column links to the References page), or names
it as "Surname et al., YEAR", which :func:`source_markdown` links to the same entry. A claim that
only this course makes has a source starting "this course"; the rendered ledger attributes it
to the chapter that states it.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import asdict
from pathlib import Path

# The claim record and the checks' registry live one level down, in normedu/claim.py, so that
# the checks import them from there and this module can import the checks (registered());
# they are re-exported here, where the book and the tests have always found them.
from .claim import CHECKS as _CHECKS
from .claim import (
    VERDICTS,
    Claim,
    cite,
    claims_for,
    is_cited,
    measured_on,
    verdict,
    verdict_by_parts,
    verdict_within,
)
from .paths import course_root, require_root

__all__ = [
    "VERDICTS",
    "Claim",
    "bib_entries",
    "bibliography",
    "check",
    "cite",
    "claims_for",
    "collect",
    "is_cited",
    "ledger_dir",
    "link_author_year",
    "load",
    "measured_on",
    "record",
    "registered",
    "source_markdown",
    "summary",
    "to_markdown",
    "verdict",
    "verdict_by_parts",
    "verdict_within",
]


def ledger_dir() -> Path:
    """``$NORMEDU_LEDGER_DIR``, else ``_build/ledger`` under the course root."""
    if os.environ.get("NORMEDU_LEDGER_DIR"):
        return Path(os.environ["NORMEDU_LEDGER_DIR"])
    return require_root("the claims ledger") / "_build" / "ledger"


def bibliography() -> Path | None:
    """The book's one bibliography, ``book/references.bib`` of the course root (None outside
    a checkout); :func:`link_author_year` resolves citations written as text against it."""
    root = course_root()
    return root / "book" / "references.bib" if root else None


#: How a source names a claim of this course itself ("this course, chapter '...'").
THIS_COURSE = "this course"


def bib_entries(path: Path | None = None) -> tuple[tuple[str, str, str, str], ...]:
    """``(key, first author's surname, year, venue text)`` of every entry of a BibTeX file
    (the year's digits: "2016" for an entry's "2016a").

    The venue text joins booktitle, journal, title and howpublished, for :func:`link_author_year`
    to check a venue named in a source. ``path`` defaults to :func:`bibliography`; a missing
    file gives no entries.
    """
    path = path or bibliography()
    if path is None or not Path(path).exists():
        return ()
    return _parse_bib(Path(path).resolve())


@functools.cache
def _parse_bib(path: Path) -> tuple[tuple[str, str, str, str], ...]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"@\w+\s*\{\s*([^,\s]+)\s*,", text):
        body, depth, i = [], 1, m.end()
        while i < len(text) and depth:  # the entry runs to its matching closing brace
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            body.append(text[i])
            i += 1
        fields = dict(
            (k.lower(), v)
            for k, v in re.findall(r"(\w+)\s*=\s*\{((?:[^{}]|\{[^{}]*\})*)\}", "".join(body))
        )
        first = re.split(r"\s+and\s+", fields.get("author", ""))[0].strip()
        if first.startswith("{") and first.endswith("}"):
            surname = first.strip("{}")  # a corporate author, {Gemma Team}, is one name
        elif "," in first:
            surname = first.split(",")[0].strip()
        else:
            surname = first.split(" ")[-1]
        venue = " ".join(
            fields.get(k, "") for k in ("booktitle", "journal", "title", "howpublished")
        )
        # "2016a": the letter tells two entries of one author and year apart in the rendered
        # citations; a mention ("He et al., 2016") names the year alone.
        year = re.match(r"\d*", fields.get("year", "")).group()
        out.append((m.group(1), surname, year, venue))
    return tuple(out)


def link_author_year(text: str, path: Path | None = None) -> str:
    """Replace each "Surname et al., [Venue] YEAR" in ``text`` by a ``{cite:t}`` of its entry.

    A mention is linked only when exactly one entry of the bibliography has that first author
    and year and every venue the mention names (a word with two capitals, e.g. ICML, NeurIPS):
    "He et al., ECCV 2016" links the ECCV paper, not the CVPR paper of the same authors and
    year, and "He et al., 2016" links neither. A documentation page written "PyTorch
    documentation, torch.nn.init" links the organisation's entry whose title names it. Anything
    unresolved stays as written.
    """
    by_author_year: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key, surname, year, venue in bib_entries(path):
        by_author_year.setdefault((surname, year), []).append((key, venue))
    pattern = re.compile(r"\b([A-Z][\w'-]+)\b([^;]{0,40}?)\b((?:19|20)\d\d)[a-z]?\b(\))?")

    def replace(m: re.Match) -> str:
        venues = re.findall(r"\b[A-Za-z]*[A-Z][a-z]*[A-Z]\w*\b", m.group(2))
        found = [
            entry
            for entry in by_author_year.get((m.group(1), m.group(3)), [])
            if all(v in entry[1] for v in venues)
        ]
        if len(found) != 1:
            return m.group(0)
        # "Karpathy, makemore (2022)": the bracket opened inside the mention closes with it.
        opened = m.group(2).count("(") > m.group(2).count(")")
        return "{cite:t}`" + found[0][0] + "`" + ("" if opened else m.group(4) or "")

    linked = pattern.sub(replace, text)
    return "; ".join(_link_documentation(part, path) for part in linked.split("; "))


def _link_documentation(part: str, path: Path) -> str:
    """Link "PyTorch documentation, torch.nn.init" to the entry of an organisation (a braced
    author, {PyTorch contributors}) whose title holds the page's name; else ``part`` as is."""
    if "{cite" in part or "," not in part:
        return part
    org = part.split()[0].lower()
    name = re.sub(r"\s*\(.*\)\s*$", "", part.rsplit(",", 1)[1]).strip()
    hits = [
        key
        for key, surname, _, venue in bib_entries(path)
        if " " in surname and surname.split()[0].lower() == org and name and name in venue
    ]
    return "{cite:t}`" + hits[0] + "`" if len(hits) == 1 else part


def source_markdown(claim: Claim) -> str:
    """The Source cell of a claim: citations that link the References page, or the chapter.

    - a source written with :func:`cite` is kept as it is;
    - a published work named in the text ("Xiong et al., 2020 (ICML), Fig. 3") becomes a
      citation of its bibliography entry (:func:`link_author_year`);
    - a claim only this course makes (a source starting "this course") is attributed to the
      page that states and checks it (``{doc}`` renders that page's title as a link).
    """
    if is_cited(claim.source):
        return claim.source
    if claim.source.strip().lower().startswith(THIS_COURSE):
        rest = claim.source.split(";", 1)[1].strip() if ";" in claim.source else ""
        own = "this course, {doc}`" + claim.chapter + "`"
        return own + (f"; {link_author_year(rest)}" if rest else "")
    return link_author_year(claim.source)


def record(*claims: Claim, directory: Path | None = None) -> list[Claim]:
    """Store the claims of each chapter among ``claims``, replacing that chapter's records.

    A chapter's checks run as one call, so its file holds exactly what the last run
    produced: a claim id the chapter no longer checks does not survive as a ghost. Other
    chapters' files are untouched.
    """
    if not claims:
        return []
    directory = Path(directory) if directory else ledger_dir()
    directory.mkdir(parents=True, exist_ok=True)
    by_chapter: dict[str, list[Claim]] = {}
    for c in claims:
        by_chapter.setdefault(c.chapter, []).append(c)
    for chapter, new in by_chapter.items():
        path = directory / f"{chapter}.json"
        path.write_text(json.dumps([asdict(c) for c in new], indent=1) + "\n")
    return list(claims)


def load(directory: Path | None = None, order: list[str] | None = None) -> list[Claim]:
    """Read every recorded claim, chapters in ``order`` (others after, alphabetically)."""
    directory = Path(directory) if directory else ledger_dir()
    if not directory.exists():
        return []
    files = sorted(directory.glob("*.json"))
    rank = {name: i for i, name in enumerate(order or [])}
    files.sort(key=lambda p: (rank.get(p.stem, len(rank)), p.stem))
    return [Claim(**c) for p in files for c in json.loads(p.read_text())]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(
    claims: list[Claim],
    columns: tuple[str, ...] = ("claim", "source", "measured", "verdict"),
) -> str:
    """Render claims as a Markdown table (for ``IPython.display.Markdown``).

    The book parses displayed Markdown as MyST, so the Source column's ``{cite}`` and ``{doc}``
    roles become links (see :func:`source_markdown`); a claim's quote follows its source, and
    its per-seed values follow what was measured. The device column is left out by
    default: machine and version strings are for the curious, :func:`where_measured` shows
    them collapsed (pass ``columns`` with ``"device"`` to have them in the table).
    """
    head = "| " + " | ".join(c.capitalize() for c in columns) + " |"
    rule = "|" + "---|" * len(columns)
    rows = []
    for c in claims:
        vals = {**asdict(c), "source": source_markdown(c)}
        if c.quote:
            vals["source"] += f": “{c.quote}” ({c.quote_where})"
        if c.note:
            vals["measured"] = f"{c.measured} ({c.note})"
        if c.per_seed:
            vals["measured"] += "; per seed: " + "; ".join(
                f"{name} " + ", ".join(f"{v:.3g}" for v in values)
                for name, values in c.per_seed.items()
            )
        rows.append("| " + " | ".join(_cell(vals[k]) for k in columns) + " |")
    return "\n".join([head, rule, *rows])


def where_measured(claims: list[Claim]) -> str:
    """Where each claim was measured (machine, versions), as a collapsed HTML ``<details>``.

    The ``<summary>`` carries text, so the toggle has an accessible name. The blank lines let
    MyST parse the Markdown table between the two HTML blocks. Empty for no claims.
    """
    if not claims:
        return ""
    rows = "\n".join(f"| {_cell(c.claim)} | {_cell(c.device)} |" for c in claims)
    return (
        "<details>\n<summary>Where these claims were measured (machine and versions)</summary>"
        f"\n\n| Claim | Measured on |\n|---|---|\n{rows}\n\n</details>"
    )


def render(claims: list[Claim]) -> str:
    """A page's claims: the table (:func:`to_markdown`), then :func:`where_measured`."""
    return to_markdown(claims) + "\n\n" + where_measured(claims)


def summary(claims: list[Claim]) -> dict[str, int]:
    """Count of claims per verdict, every verdict present (zeros included)."""
    counts = {v: 0 for v in VERDICTS}
    for c in claims:
        counts[c.verdict] += 1
    return counts


# --------------------------------------------------------------------------- registry


def registered() -> list[str]:
    """Chapters with registered checks (imports every module of :mod:`normedu.claims`)."""
    from . import claims  # noqa: F401  (importing registers the checks)

    return list(_CHECKS)


def check(chapter: str, directory: Path | None = None) -> list[Claim]:
    """Run ``chapter``'s registered checks, store them, and return the claims."""
    registered()
    if chapter not in _CHECKS:
        raise KeyError(
            f"no claim checks registered for chapter {chapter!r}; known: {sorted(_CHECKS)}"
        )
    found = _CHECKS[chapter]()
    wrong = [c.id for c in found if c.chapter != chapter]
    if wrong:
        raise ValueError(f"checks of {chapter!r} returned claims of another chapter: {wrong}")
    return record(*found, directory=directory)


def collect(
    order: list[str] | None = None,
    directory: Path | None = None,
    chapters: list[str] | None = None,
) -> list[Claim]:
    """Claims of ``chapters`` (default: every registered one), in ``order``.

    Stored records are used where present; a chapter without records is checked now.
    """
    directory = Path(directory) if directory else ledger_dir()
    wanted = chapters if chapters is not None else registered()
    for chapter in wanted:
        if not (directory / f"{chapter}.json").exists():
            check(chapter, directory=directory)
    return [c for c in load(directory, order=order or wanted) if c.chapter in wanted]
