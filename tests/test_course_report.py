"""The lecturer's class report (``normedu report``, :mod:`normedu.course.report`).

The counts are checked on a synthetic class of 300 hand-ins whose failures are the real
messages of the layernorm catalogue's mistakes (``report_cohort.py``): what the report must
find is known by construction. The end-to-end check on a real graded cohort (its numbers
equal the gradebook's) lives in ``test_course_e2e.py``, on that file's graded course; the
browser check (axe-core, 375 px) is the one test here marked ``browser``.
"""

from __future__ import annotations

import time
from html.parser import HTMLParser

import numpy as np
import pytest
import report_cohort

from normedu.course import status as st
from normedu.course.failures import UNNAMED, classify
from normedu.course.report import ScoredCell, StudentRecord, score_bands, summarize
from normedu.course.report_html import render

#: The issue's budget for building the report of a 300-student class.
BUILD_BUDGET_S = 10.0


@pytest.fixture(scope="module")
def mix():
    return report_cohort.build(300)


@pytest.fixture(scope="module")
def built(mix):
    """``(report, page, CPU seconds)``: the CPU time of this process is the build's cost
    whatever else the machine runs (its wall time on a shared 2-core machine is not)."""
    wall, cpu = time.perf_counter(), time.process_time()
    report = summarize(report_cohort.ASSIGNMENT, mix.tests, mix.records)
    page = render(report)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"report of {len(mix.records)} hand-ins built in {cpu:.2f} CPU-s ({wall:.2f} s wall)")
    return report, page, cpu


def test_report_counts_equal_the_mix(mix, built):
    report, _, seconds = built
    assert seconds < BUILD_BUDGET_S
    graded = len(mix.graded)
    assert sorted(report.graded) == sorted(mix.graded)
    # Each chosen mistake is exactly one cause row, with exactly its students.
    for phrase, students in mix.named.items():
        rows = [c for c in report.causes if phrase in c.text]
        assert len(rows) == 1, (phrase, [c.text for c in rows])
        assert set(rows[0].students) == students, phrase
        assert rows[0].share == pytest.approx(len(students) / graded)
    stubs = [c for c in report.causes if "is not implemented yet" in c.text]
    assert len(stubs) == 2  # the forward and the backward function
    assert all(set(c.students) == mix.stubbed for c in stubs)
    assert len(report.causes) == len(mix.named) + len(stubs)
    counts = [c.count for c in report.causes]
    assert counts == sorted(counts, reverse=True)
    assert report.unnamed is not None and set(report.unnamed.students) == mix.unnamed
    assert {name: set(who) for name, who in report.flags.items()} == mix.flags
    by_student = {r.student: r for r in mix.records}
    for cell in report.cells:
        full = [s for s in mix.graded if by_student[s].scores[cell.grade_id] == cell.points]
        assert (cell.passed, cell.of) == (len(full), graded), cell.grade_id
    assert report.statuses[st.NOT_ATTEMPTED] == sorted(mix.stubbed)


def test_page_states_the_numbers(mix, built):
    report, page, _ = built
    text = _Page.read(page)
    assert f"Histogram of the total scores of {len(mix.graded)} graded hand-ins" in text.alts[0]
    assert all(c.grade_id in text.alts[1] for c in report.cells)
    biggest = report.causes[0]
    assert f"{biggest.count}" in text.cells and biggest.text in text.text
    assert len(text.captions) == len(text.tables)


def test_score_bands_match_numpy():
    rng = np.random.default_rng(4)
    scores = list(rng.integers(0, 15, size=200).astype(float)) + [14.0, 0.0, 3.5]
    bands = score_bands(scores, 14.0)
    edges = [lo for lo, _, _ in bands] + [bands[-1][1]]
    assert [n for _, _, n in bands] == list(np.histogram(scores, bins=edges)[0])
    assert len(score_bands([0.0, 50.0, 100.0], 100.0)) == 20


@pytest.mark.parametrize(
    ("error", "message", "expected"),
    [
        ("GradingError", "out for x of shape (6, 5) is wrong. Likely cause: β is missing", "β"),
        ("GradingError", "out does not match the reference: relative error 1e-02", UNNAMED),
        ("AssertionError", "", UNNAMED),
        ("NotImplementedError", "", "NotImplementedError"),
    ],
)
def test_classify_names_the_cause(error, message, expected):
    failure = classify(error, message)
    assert (failure.key == UNNAMED) == (expected == UNNAMED)
    assert expected in failure.text or expected == failure.key


def test_one_mistake_in_two_probes_or_two_aliases_is_one_cause():
    shapes = [
        "dgamma has shape (3, 5), expected (5,): summed over the wrong axis",
        "dgamma has shape (2, 3, 8), expected (8,): summed over the wrong axis",
    ]
    aliases = [
        f"f must compute the result itself, but it uses {a} (from normedu.functional). "
        "Calling a library's normalization earns no points"
        for a in ("nf", "helper")
    ]
    for pair in (shapes, aliases):
        assert len({classify("GradingError", m).key for m in pair}) == 1


HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">'


class _Page(HTMLParser):
    """The page's tags, attributes and text, as a browser's parser sees them."""

    def __init__(self):
        super().__init__()
        self.tags, self.alts, self.captions, self.tables = [], [], [], []
        self.text, self.cells, self._in = "", "", []

    @classmethod
    def read(cls, page: str) -> _Page:
        parser = cls()
        parser.feed(page)
        return parser

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in.append(tag)
        if tag == "img":
            self.alts.append(dict(attrs).get("alt", ""))
            self._in.pop()
        if tag == "table":
            self.tables.append(tag)

    def handle_endtag(self, tag):
        if tag in self._in:
            del self._in[len(self._in) - 1 - self._in[::-1].index(tag) :]

    def handle_data(self, data):
        self.text += data
        if "td" in self._in:
            self.cells += data + "|"
        if "caption" in self._in and data.strip():
            self.captions.append(data)


def test_student_strings_never_become_markup():
    tests = [ScoredCell("t1", 1.0)]
    people = [
        StudentRecord(
            HOSTILE,
            st.FAILED,
            0.0,
            {"t1": 0.0},
            late=True,
            failures={"t1": {"error": "ValueError", "message": HOSTILE}},
        ),
        StudentRecord(
            "b",
            st.FAILED,
            0.0,
            {"t1": 0.0},
            failures={"t1": {"error": "GradingError", "message": f"does not match {HOSTILE}"}},
        ),
    ]
    page = _Page.read(render(summarize("a<b>", tests, people)))
    assert {tag for tag, _ in page.tags}.isdisjoint({"script", "iframe", "object", "link"})
    assert all(not k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert [a["src"][:22] for t, a in page.tags if t == "img"] == ["data:image/png;base64,"] * 2
    # The hostile text is shown as text, where it was written.
    assert page.text.count(HOSTILE) >= 3


def test_cli_report_help_names_the_output(capsys):
    from normedu.cli import main

    with pytest.raises(SystemExit):
        main(["report", "--help"])
    help_text = capsys.readouterr().out
    assert "--output" in help_text and "no script" in help_text


@pytest.mark.browser
def test_report_page_passes_axe_and_reflows_at_375px(built, tmp_path):
    from site_a11y import NARROW, failures, reflow, reflow_problems, run_axe
    from site_helpers import launch_context, require_chromium

    require_chromium()
    from playwright.sync_api import sync_playwright

    path = tmp_path / "report.html"
    path.write_text(built[1], encoding="utf-8")
    with sync_playwright() as p:
        context = launch_context(p, tmp_path / "profile")
        try:
            page = context.new_page()
            page.goto(path.as_uri())
            assert failures(run_axe(page)) == []
            page.set_viewport_size(NARROW)
            assert reflow_problems(reflow(page)) == []
            assert not page.evaluate(
                "() => document.scrollingElement.scrollWidth > window.innerWidth"
            )
        finally:
            context.close()
