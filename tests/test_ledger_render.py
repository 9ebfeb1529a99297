"""How a page's claims table renders: the table without machine details, which follow it
collapsed in a <details> block whose <summary> names it (issue 32)."""

from __future__ import annotations

import re

from normedu import ledger


def _claim(i: str, device: str) -> ledger.Claim:
    return ledger.Claim(
        id=i,
        chapter="ch",
        claim=f"claim {i} | with a pipe",
        source="this course, chapter 'Ch'",
        measured="1.0",
        verdict="confirmed",
        device=device,
    )


CLAIMS = [_claim("a", "CPU (Some CPU, 1 thread)"), _claim("b", "torch 2.9.0")]


def test_table_leaves_the_device_out():
    table = ledger.to_markdown(CLAIMS)
    assert table.splitlines()[0] == "| Claim | Source | Measured | Verdict |"
    assert "Some CPU" not in table and "torch 2.9.0" not in table
    with_device = ledger.to_markdown(CLAIMS, columns=("claim", "device"))
    assert "| CPU (Some CPU, 1 thread) |" in with_device


def test_where_measured_is_a_named_collapsed_block_with_every_device():
    block = ledger.where_measured(CLAIMS)
    assert block.startswith("<details>") and block.endswith("</details>")
    summary = re.search(r"<summary>(.*?)</summary>", block)
    assert summary and summary.group(1).strip(), "a <summary> needs an accessible name"
    rows = [line for line in block.splitlines() if line.startswith("| claim")]
    assert rows == [
        "| claim a \\| with a pipe | CPU (Some CPU, 1 thread) |",
        "| claim b \\| with a pipe | torch 2.9.0 |",
    ]
    # MyST parses the table only if blank lines separate it from the HTML blocks around it.
    assert "</summary>\n\n| Claim | Measured on |" in block and "|\n\n</details>" in block
    assert ledger.where_measured([]) == ""


def test_render_is_the_table_then_the_block():
    assert ledger.render(CLAIMS) == (
        ledger.to_markdown(CLAIMS) + "\n\n" + ledger.where_measured(CLAIMS)
    )
