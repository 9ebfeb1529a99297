"""One checked claim: the :class:`Claim` record, its verdicts, the helpers that write its
fields (:func:`cite`, :func:`measured_on`, :func:`verdict`, :func:`verdict_within`), and the
registry of each chapter's checks (:func:`claims_for`).

The chapters' checks in :mod:`normedu.claims` import from here; :mod:`normedu.ledger`, which
runs, stores and renders them, imports them (and re-exports these names). Neither of the two
imports the other back, so the ledger can import the checks without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "QUOTE_WORDS",
    "VERDICTS",
    "Claim",
    "CHECKS",
    "cite",
    "claims_for",
    "device_for",
    "is_cited",
    "measured_on",
    "verdict",
    "verdict_by_parts",
    "verdict_within",
]

VERDICTS = ("confirmed", "depends", "not reproduced", "cited")
#: The longest quote a claim carries from its source (a short quotation, not a passage).
QUOTE_WORDS = 30


@dataclass(frozen=True)
class Claim:
    """One checked claim.

    - id: stable identifier, e.g. ``"drift.1.05^50"``.
    - chapter: the page that checks it (its docname, e.g. ``"drift"``).
    - claim: the claim as the source states it, in our words.
    - source: where it comes from: :func:`cite` of the published work (MyST) or "Surname et
      al., YEAR"; "this course, ..." for a claim only this course makes (see
      :func:`normedu.ledger.source_markdown`).
    - measured: what this book measured, with units.
    - verdict: one of :data:`VERDICTS`.
    - device: where it was measured ("exact arithmetic" for pure math).
    - note: optional caveat.
    - per_seed: for a claim measured by a random experiment, its values per seed, by name
      (``{"ratio": [1.04, 1.07, 1.06]}``, seeds in order): a verdict from random runs rests on
      several seeds (:mod:`normedu.seeding`), and the ledger shows them.
    - quote, quote_where: for a claim attributed to a source, the source's own words (at most
      :data:`QUOTE_WORDS` words) and where they stand ("§4.2", "Table 3", "p. 5"); the ledger
      page shows them beside the claim, so a reader can check the attribution.
    """

    id: str
    chapter: str
    claim: str
    source: str
    measured: str
    verdict: str
    device: str = "exact arithmetic"
    note: str = ""
    extra: dict = field(default_factory=dict)
    per_seed: dict = field(default_factory=dict)
    quote: str = ""
    quote_where: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(
                f"verdict must be one of {VERDICTS}, got {self.verdict!r} for claim {self.id!r}"
            )
        for name in ("id", "chapter", "claim", "source", "measured"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"claim {self.id!r}: field {name!r} must not be empty")
        if len(self.quote.split()) > QUOTE_WORDS:
            raise ValueError(
                f"claim {self.id!r}: a quote is at most {QUOTE_WORDS} words, "
                f"got {len(self.quote.split())}"
            )
        if bool(self.quote) != bool(self.quote_where):
            raise ValueError(f"claim {self.id!r}: a quote needs quote_where and vice versa")
        for name, values in self.per_seed.items():
            if len(values) < 2:
                raise ValueError(
                    f"claim {self.id!r}: per_seed[{name!r}] has {len(values)} value(s); "
                    "a verdict from random runs rests on several seeds"
                )


def measured_on() -> str:
    """Where this process measures, for a claim's ``device`` field: the device and how large
    the experiments ran (the laptop sizes on a CPU, the full sizes on a GPU)."""
    from .device import preset_name
    from .provenance import device_name

    size = "full-size run" if preset_name() == "cuda" else "laptop-size run"
    return f"{device_name()} ({size})"


def device_for(preset: str) -> str:
    """The device a claim measured on at size ``preset`` (``"cuda"``: this machine's GPU;
    any other: its CPU), for a chapter whose claims mix stored GPU runs and live CPU ones."""
    from .provenance import device_name

    return device_name("cuda" if preset == "cuda" else "cpu")


def cite(*keys: str, where: str = "") -> str:
    """A claim's source from ``book/references.bib``: ``cite("ba2016layer", where="§5")``.

    Returns MyST (``{cite}`ba2016layer`, §5``) that the book renders as a link to the entry on
    the References page.
    """
    if not keys:
        raise ValueError("cite() needs at least one bibliography key")
    return "{cite}`" + ",".join(keys) + "`" + (f", {where}" if where else "")


def is_cited(source: str) -> bool:
    """True when ``source`` cites a published work (a ``{cite}`` role of :func:`cite`)."""
    return "{cite" in source


def verdict(ok: bool, otherwise: str = "not reproduced") -> str:
    """``"confirmed"`` if the measurement agrees with the claim, else ``otherwise``
    (``"not reproduced"``; ``"depends"`` for a claim that holds only under some conditions)."""
    if otherwise not in VERDICTS:
        raise ValueError(f"otherwise must be one of {VERDICTS}, got {otherwise!r}")
    return "confirmed" if ok else otherwise


def verdict_by_parts(agreements: Iterable[bool]) -> str:
    """For a claim measured in parts (depths, activations, models): ``"confirmed"`` when every
    part agrees with it, ``"not reproduced"`` when none does, ``"depends"`` otherwise."""
    agreements = list(agreements)
    if all(agreements) or not any(agreements):
        return verdict(all(agreements))
    return "depends"


def verdict_within(measured: float, expected: float, rtol: float) -> str:
    """``"confirmed"`` if ``measured`` is within relative tolerance ``rtol`` of ``expected``."""
    return verdict(abs(measured - expected) <= rtol * abs(expected))


#: chapter -> its checks, filled as the modules of :mod:`normedu.claims` are imported
CHECKS: dict[str, Callable[[], list[Claim]]] = {}


def claims_for(chapter: str):
    """Register the decorated zero-argument function as the claim checks of ``chapter``."""

    def register(fn: Callable[[], list[Claim]]):
        CHECKS[chapter] = fn
        return fn

    return register
