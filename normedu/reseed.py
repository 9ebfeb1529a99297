"""The reseeding audit: rebuild the book on seeds nobody chose and list what its words change.

``python -m normedu.reseed --offsets 1 2`` (``make reseed``) builds the book from scratch at
offset 0 and once per other seed offset (:data:`normedu.seeding.OFFSET_ENV`: every
experiment's seeds shifted), each into a folder of its own (``_build/reseed/offset-<k>``), and
compares what the pages and the claims ledger *say* with offset 0's build:

- every claim's verdict, by claim id;
- every worded description: the text a page's code prints or displays (Markdown displays,
  printed lines, the claims' ``measured`` text), with its numbers masked, since numbers move
  with the seed and words must not. "higher on all 5 seeds" and "higher on 4 of 5 seeds" differ
  in words, so a verdict that gets less sure on another seed is listed too.

The result is committed as a record (``results/cpu/reseed.json``) with the offsets, the machine,
the date and a fingerprint of what the pages' words come from (:func:`fingerprint`: the pages'
sources and the package's experiment code); ``tests/test_reseed.py`` fails when that
fingerprint is stale, as the timing records do, and when the record lists a change. The audit
itself is too long for the test suite (one book build per offset): it is a command, run before
committing a change to a chapter's experiments or words.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .paths import require_root
from .seeding import OFFSET_ENV

__all__ = [
    "DEFAULT_OFFSETS",
    "RECORD",
    "SOURCES",
    "build",
    "changes",
    "fingerprint",
    "main",
    "mask",
    "said",
    "stale",
]

#: The offsets the committed record was audited under (the issue's "two other offsets").
DEFAULT_OFFSETS = (1, 2)
#: The committed record, under the course root.
RECORD = Path("results") / "cpu" / "reseed.json"
#: What the pages' words come from: a change to any of these can change what a page says.
#: The grader, the course tools and the kernels' benchmarks cannot, so they are left out.
SOURCES = ("book/*.md", "normedu/**/*.py", "results/gpu/*.json", "results/cpu/timings/*.json")
_NOT_WORDS = ("normedu/course/", "normedu/grading/", "normedu/reseed.py")
#: Pages whose printed lines are the build's own bookkeeping, not words about an experiment:
#: the execution status lists each page's CPU time, and a page that measures a seeded record
#: again at another offset (normedu.records) costs more there by design.
NOT_AUDITED = ("book/execution_status",)
#: The fingerprint of the sources a build was made from, kept in its folder (for --reuse).
BUILT_FROM = "fingerprint.txt"

# A number as pages print them: signs, thousands separators, decimals, exponents, and the
# unicode minus; units and words around it stay.
# A full stop after a number ends the sentence: it is not the number's.
# Thousands separators only in groups of three ("1,024"): "3, 2.89" is two numbers.
_NUMBER = re.compile(r"[-+−]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")
# NumPy pads the numbers of a printed array to one width: "[ #" and "[#" say the same; and it
# prints a whole float as "1.", whose point is the number's, not a full stop.
_PADDING = re.compile(r"(?<=[\[(])\s+|\s+(?=[\])])")
_WHOLE_FLOAT = re.compile(r"#\.(?=\s*[#\]])")


def mask(text: str) -> str:
    """``text`` with every number replaced by ``#``, runs of whitespace by one space, and no
    padding inside brackets."""
    masked = _WHOLE_FLOAT.sub("#", _NUMBER.sub("#", text))
    return _PADDING.sub("", _SPACE.sub(" ", masked)).strip()


def fingerprint(root: Path | None = None) -> str:
    """SHA-256 over the files of :data:`SOURCES` (paths and contents, sorted)."""
    root = root or require_root("the reseeding audit")
    h = hashlib.sha256()
    files = sorted({p for pattern in SOURCES for p in root.glob(pattern) if p.is_file()})
    for p in files:
        rel = p.relative_to(root).as_posix()
        if rel.startswith(_NOT_WORDS):
            continue
        h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _page_words(nb: dict) -> list[str]:
    """What a page's code said: Markdown and plain-text displays and printed lines."""
    lines: list[str] = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                lines += "".join(out.get("text", "")).splitlines()
            data = out.get("data", {})
            if "text/markdown" in data:
                lines += "".join(data["text/markdown"]).splitlines()
    return [m for m in (mask(line) for line in lines) if m]


def said(build_dir: Path, ledger_dir: Path) -> dict[str, Any]:
    """Everything a build said, numbers masked: ``{"pages": {page: [lines]}, "claims":
    {claim id: {"verdict", "measured"}}}``."""
    sources = build_dir / "html" / "_sources"
    pages = {
        p.relative_to(sources).with_suffix("").as_posix(): _page_words(json.loads(p.read_text()))
        for p in sorted(sources.rglob("*.ipynb"))
    }
    pages = {k: v for k, v in pages.items() if k not in NOT_AUDITED}
    claims: dict[str, Any] = {}
    for f in sorted(ledger_dir.glob("*.json")):
        for c in json.loads(f.read_text()):
            claims[c["id"]] = {"verdict": c["verdict"], "measured": mask(c["measured"])}
    return {"pages": pages, "claims": claims}


def changes(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """What ``other`` says differently from ``base``: one line per changed verdict or line."""
    out: list[str] = []
    for cid, c in base["claims"].items():
        o = other["claims"].get(cid)
        if o is None:
            out.append(f"claim {cid}: missing")
        elif o["verdict"] != c["verdict"]:
            out.append(f"claim {cid}: verdict {c['verdict']!r} -> {o['verdict']!r}")
        elif o["measured"] != c["measured"]:
            out.append(f"claim {cid}: measured {c['measured']!r} -> {o['measured']!r}")
    for page, lines in base["pages"].items():
        diff = difflib.unified_diff(lines, other["pages"].get(page, []), lineterm="", n=0)
        for d in diff:
            if d.startswith(("-", "+")) and not d.startswith(("---", "+++")):
                out.append(f"{page}: {d}")
    return out


def build(
    root: Path, offset: int, out: Path, built_from: str, reuse: bool = False
) -> tuple[Path, Path]:
    """Build the book from scratch with ``offset`` into ``out/offset-<offset>``; return the
    build folder and its ledger folder.

    From scratch: the execution cache is keyed on a page's code alone, so a cached page would
    not show what a changed experiment now says. ``built_from``: the sources' fingerprint,
    kept beside the build. ``reuse``: keep a build already there (to compare again after
    changing how words are compared).
    """
    top = out / f"offset-{offset}"
    if reuse and (top / "_build" / "html" / "_sources").is_dir():
        return top / "_build", top / "ledger"
    if top.exists():
        shutil.rmtree(top)
    ledger = top / "ledger"
    env = {**os.environ, OFFSET_ENV: str(offset), "NORMEDU_LEDGER_DIR": str(ledger)}
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb), "build", str(root), "-W", "-n", "--keep-going", "--path-output", str(top)]
    t0 = time.monotonic()
    print(f"reseed: building the book with {OFFSET_ENV}={offset} ...", flush=True)
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"the build with offset {offset} failed ({done.returncode}):\n{done.stdout[-3000:]}"
            f"\n{done.stderr[-3000:]}"
        )
    print(f"reseed: offset {offset} built in {time.monotonic() - t0:.0f} s", flush=True)
    (top / BUILT_FROM).write_text(built_from + "\n")
    return top / "_build", ledger


def stale(root: Path | None = None) -> str | None:
    """Why the committed record no longer describes the book (None when it does)."""
    root = root or require_root("the reseeding audit")
    path = root / RECORD
    if not path.exists():
        return f"{RECORD} is missing: run `make reseed`"
    prov = json.loads(path.read_text())["provenance"]
    if prov.get("fingerprint") != fingerprint(root):
        return (
            f"{RECORD} was audited on other sources than the book's now (a page or an "
            "experiment changed since): run `make reseed` and commit the record"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    from .provenance import provenance
    from .results import write_record

    ap = argparse.ArgumentParser(prog="python -m normedu.reseed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--offsets", type=int, nargs="+", default=list(DEFAULT_OFFSETS),
                    help="seed offsets to compare with offset 0 (default: 1 2)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None,
                    help="where the builds go (default: _build/reseed)")  # fmt: skip
    ap.add_argument("--no-record", action="store_true",
                    help=f"print the changes without writing {RECORD}")  # fmt: skip
    ap.add_argument("--reuse", action="store_true",
                    help="compare the builds in --out again; recorded only if every one was "
                    "built from the sources as they are now")  # fmt: skip
    args = ap.parse_args(argv)
    if 0 in args.offsets:
        ap.error("offset 0 is the book itself; give other offsets")
    root = require_root("the reseeding audit")
    out = args.out or root / "_build" / "reseed"
    print_fp = fingerprint(root)
    base = said(*build(root, 0, out, print_fp, args.reuse))
    found: dict[str, list[str]] = {}
    for k in args.offsets:
        found[str(k)] = changes(base, said(*build(root, k, out, print_fp, args.reuse)))
        print(f"reseed: offset {k}: {len(found[str(k)])} change(s)")
        for line in found[str(k)]:
            print(f"  {line}")
    if fingerprint(root) != print_fp:
        print("reseed: the sources changed while auditing; not recording", file=sys.stderr)
        return 2
    fresh = all(
        (out / f"offset-{k}" / BUILT_FROM).is_file()
        and (out / f"offset-{k}" / BUILT_FROM).read_text().strip() == print_fp
        for k in (0, *args.offsets)
    )
    if args.reuse and not fresh and not args.no_record:
        print("reseed: a build was made from other sources: not recording", file=sys.stderr)
    if not args.no_record and fresh:
        prov = {**provenance("python -m normedu.reseed"), "offsets": args.offsets,
                "fingerprint": print_fp}  # fmt: skip
        data = {
            "changes": found,
            "pages": len(base["pages"]),
            "claims": len(base["claims"]),
            "lines": sum(len(v) for v in base["pages"].values()),
        }
        write_record(root / RECORD, data, prov)
        print(f"reseed: wrote {RECORD}")
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
