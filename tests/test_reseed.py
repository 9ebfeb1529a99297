"""The reseeding audit (normedu.reseed): what it compares, and that its committed record is fresh
and found nothing. The audit itself (three book builds) is `make reseed`, not a test."""

import json

from normedu import reseed
from normedu.paths import require_root


def test_mask_keeps_words_and_drops_numbers():
    assert reseed.mask("BN's error  is 12.9% vs −3.6e-2 on 4 of 5 seeds") == (
        "BN's error is #% vs # on # of # seeds"
    )
    assert reseed.mask("1,024 tokens/s, ×1.58") == "# tokens/s, ×#"
    assert reseed.mask("error 3.2e-05. The [ -0.1  0.25 ]") == "error #. The [# #]"
    assert reseed.mask("seeds 3, 2.89") == reseed.mask("seeds 2.91, 3") == "seeds #, #"
    assert reseed.mask("x . dx: [1. 2.]") == reseed.mask("x . dx: [0.5 2.5]")


def _said(verdict, measured, lines):
    return {"pages": {"book/x": lines}, "claims": {"x.1": {"verdict": verdict,
            "measured": reseed.mask(measured)}}}  # fmt: skip


def test_changes_lists_verdicts_and_words_not_numbers():
    base = _said("confirmed", "ratio 1.04 on all 3 seeds", ["DyT is # faster on all # seeds"])
    same = _said("confirmed", "ratio 1.07 on all 3 seeds", ["DyT is # faster on all # seeds"])
    assert reseed.changes(base, same) == []
    other = _said("depends", "ratio 1.07 on 2 of 3 seeds", ["no difference detectable"])
    found = reseed.changes(base, other)
    assert "claim x.1: verdict 'confirmed' -> 'depends'" in found
    assert "book/x: -DyT is # faster on all # seeds" in found
    assert "book/x: +no difference detectable" in found


def test_page_words_are_displays_and_printed_lines():
    nb = {"cells": [{"outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["loss 2.31 after 80 steps\n"]},
        {"output_type": "stream", "name": "stderr", "text": ["a warning\n"]},
        {"output_type": "display_data", "data": {"text/markdown": "**higher** on all 5 seeds",
                                                 "image/png": "..."}},
    ]}]}  # fmt: skip
    assert reseed._page_words(nb) == ["loss # after # steps", "**higher** on all # seeds"]


def test_committed_record_is_fresh_and_no_verdict_changed():
    why = reseed.stale()
    assert why is None, why
    rec = json.loads((require_root("the reseeding record") / reseed.RECORD).read_text())
    assert rec["data"]["claims"] > 100 and rec["data"]["pages"] > 10
    assert len(rec["provenance"]["offsets"]) >= 2
    changed = {k: v for k, v in rec["data"]["changes"].items() if v}
    assert not changed, json.dumps(changed, indent=1)
