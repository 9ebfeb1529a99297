"""``normedu grade-bench``: how fast a cohort is graded, one worker against all cores.

It copies an assignment (or writes the demo one) into a scratch course, releases it, writes a
synthetic cohort (:data:`normedu.course.cohort.DEFAULT_MIX`: 40 students, mostly correct, some
wrong, a few broken), collects it, and grades it twice from scratch: ``jobs=1`` and
``jobs=N``. It reports seconds per submission, the speed-up, and whether both runs exported
identical CSVs. A benchmark, not a test: it prints and returns its measurements, and
``--save`` stores them with provenance in ``results/cpu/grade_bench.json``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .autograde import autograde
from .cohort import DEFAULT_MIX, write_cohort, write_demo_assignment
from .collect import collect
from .config import Course
from .export import to_csv
from .nbgrader_bridge import stock_autograde_steps
from .release import release


@dataclass
class BenchResult:
    """Measurements of one benchmark run (seconds are wall-clock)."""

    assignment: str
    submissions: int
    executed: int
    jobs: int
    cpu_count: int
    sequential_s: float
    parallel_s: float
    sequential_per_submission_s: float
    parallel_per_submission_s: float
    speedup: float
    identical: bool
    cell_timeout_s: float
    sandbox: str
    mix: dict
    import_numpy_s: float = 0.0
    import_torch_s: float = 0.0
    #: stock ``nbgrader autograde`` on the same cohort (0: not measured).
    stock_nbgrader_s: float = 0.0
    #: 1-minute load average at the start and the end (other work on a shared machine).
    load_average: tuple = (0.0, 0.0)
    #: CSV rows that differ between the two runs, as (sequential, parallel) pairs.
    differences: list = field(default_factory=list)

    def table(self) -> str:
        rows = [
            ("submissions (executed)", f"{self.submissions} ({self.executed})"),
            (
                "sequential, jobs=1",
                f"{self.sequential_s:.1f} s = {self.sequential_per_submission_s:.2f} s/submission",
            ),
            (
                f"parallel, jobs={self.jobs}",
                f"{self.parallel_s:.1f} s = {self.parallel_per_submission_s:.2f} s/submission",
            ),
            ("speed-up", f"{self.speedup:.2f}x on {self.cpu_count} CPU cores"),
            (
                "stock nbgrader autograde",
                f"{self.stock_nbgrader_s:.1f} s = {self.stock_nbgrader_s / self.submissions:.2f}"
                " s/submission",
            ),
            ("CSV identical", "yes" if self.identical else "NO"),
            ("sandbox", self.sandbox),
            ("load average (1 min), start/end", f"{self.load_average[0]} / {self.load_average[1]}"),
            (
                "python -c 'import ...'",
                f"numpy {self.import_numpy_s:.2f} s, numpy + torch {self.import_torch_s:.2f} s",
            ),
        ]
        width = max(len(k) for k, _ in rows)
        text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
        for seq, par in self.differences:
            text += f"\n  sequential: {seq}\n  parallel:   {par}"
        return text


def _scratch_course(tmp: Path, source: Course | None, assignment: str) -> Course:
    course = Course(root=tmp / "course")
    if source is None:
        write_demo_assignment(course.root, assignment)
    else:
        shutil.copytree(source.source_dir(assignment), course.source_dir(assignment))
    release(course, [assignment])
    return course


def stock_nbgrader_seconds(course: Course, assignment: str, cell_timeout: float) -> float:
    """Seconds for stock ``nbgrader autograde <a> --force`` over every collected submission:
    one at a time, in-process, no sandbox (the baseline)."""
    from nbgrader.converters import Autograde
    from nbgrader.utils import capture_log, temp_attrs

    from .config import ensure_alembic, silence_nbgrader_warnings

    silence_nbgrader_warnings()
    ensure_alembic()
    # nbgrader's own steps, which the course configuration replaces by a refusal (the
    # baseline is what stock nbgrader would do without this course).
    api = course.api(
        Execute={"timeout": int(cell_timeout)},
        Autograde={"autograde_preprocessors": stock_autograde_steps()},
    )
    t0 = time.perf_counter()
    with temp_attrs(api.coursedir, assignment_id=assignment, student_id="*"):
        app = Autograde(coursedir=api.coursedir, parent=api)
        app.force = True
        app.create_student = True
        capture_log(app)  # corrupt submissions fail inside nbgrader: expected here
    return time.perf_counter() - t0


def run_bench(
    assignment: str = "demo",
    *,
    course: Course | None = None,
    jobs: int | None = None,
    mix: dict[str, int] | None = None,
    cell_timeout: float = 20.0,
    progress: bool = True,
    stock: bool = True,
) -> BenchResult:
    """Benchmark grading ``assignment`` of ``course`` (the demo assignment when ``course`` is
    None) on a synthetic cohort with ``mix`` (default 40 students): normedu with one worker,
    with ``jobs`` workers, and (``stock``) stock nbgrader on the same cohort."""
    mix = dict(DEFAULT_MIX if mix is None else mix)
    jobs = jobs or os.cpu_count() or 1
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="normedu-bench-") as tmp:
        tmp = Path(tmp)
        timings, csvs, reports = {}, {}, {}
        for label, n in (("sequential", 1), ("parallel", jobs)):
            scratch = _scratch_course(tmp / label, course, assignment)
            write_cohort(scratch, assignment, tmp / label / "inbox", mix)
            collect(scratch, assignment, tmp / label / "inbox")
            t0 = time.perf_counter()
            report = autograde(
                scratch, assignment, jobs=n, cell_timeout=cell_timeout, progress=progress
            )
            timings[label] = time.perf_counter() - t0
            csvs[label] = _grades_only(to_csv(scratch, assignment))
            reports[label] = report
        if stock:
            scratch = _scratch_course(tmp / "stock", course, assignment)
            write_cohort(scratch, assignment, tmp / "stock" / "inbox", mix)
            collect(scratch, assignment, tmp / "stock" / "inbox")
            timings["stock"] = stock_nbgrader_seconds(scratch, assignment, cell_timeout)
    imports = import_seconds(("numpy", "numpy, torch"))
    total = sum(mix.values())
    executed = sum(1 for v in reports["parallel"].verdicts.values() if v.seconds > 0)
    return BenchResult(
        assignment=assignment,
        submissions=total,
        executed=executed,
        jobs=jobs,
        cpu_count=os.cpu_count() or 1,
        sequential_s=round(timings["sequential"], 2),
        parallel_s=round(timings["parallel"], 2),
        sequential_per_submission_s=round(timings["sequential"] / total, 3),
        parallel_per_submission_s=round(timings["parallel"] / total, 3),
        speedup=round(timings["sequential"] / timings["parallel"], 2),
        identical=csvs["sequential"] == csvs["parallel"],
        cell_timeout_s=cell_timeout,
        sandbox=reports["parallel"].sandbox,
        mix=mix,
        load_average=(round(load_start, 2), round(os.getloadavg()[0], 2)),
        differences=[
            (a, b)
            for a, b in zip(
                csvs["sequential"].splitlines(), csvs["parallel"].splitlines(), strict=False
            )
            if a != b
        ],
        import_numpy_s=round(imports["numpy"], 3),
        import_torch_s=round(imports["numpy, torch"], 3),
        stock_nbgrader_s=round(timings.get("stock", 0.0), 2),
    )


#: Columns of the export that say when, not what: each run collects the cohort anew.
TIME_COLUMNS = ("collected", "handed_in")


def _grades_only(text: str) -> str:
    """The CSV without its :data:`TIME_COLUMNS` (when collect ran and when the files were
    written, not grades), so that two runs over one cohort compare equal."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return text
    keep = [i for i, name in enumerate(rows[0]) if name not in TIME_COLUMNS]
    return "\n".join(",".join(r[i] for i in keep if i < len(r)) for r in rows)


def save(result: BenchResult, name: str = "grade_bench") -> Path:
    """Store ``result`` with provenance as ``results/cpu/<name>.json``."""
    from ..results import save_stored

    return save_stored(name, asdict(result), kind="cpu", device="cpu")


def stored_markdown(name: str = "grade_bench") -> str:
    """The stored benchmark as a Markdown table with its provenance, or a sentence saying it
    was never measured (for the instructor guide)."""
    from ..results import load_stored

    record = load_stored(name, kind="cpu")
    if record is None:
        return (
            f"*Not measured yet: run `normedu grade-bench layernorm --save` to store "
            f"`results/cpu/{name}.json`.*"
        )
    r, p = record["data"], record["provenance"]
    rows = [
        ("assignment", f"`{r['assignment']}`"),
        ("submissions (of which executed)", f"{r['submissions']} ({r['executed']})"),
        (
            "sequential (1 worker)",
            f"{r['sequential_s']:.1f} s, {r['sequential_per_submission_s']:.2f} s per submission",
        ),
        (
            f"parallel ({r['jobs']} workers)",
            f"{r['parallel_s']:.1f} s, {r['parallel_per_submission_s']:.2f} s per submission",
        ),
        ("speed-up", f"{r['speedup']:.2f}x"),
        (
            "stock `nbgrader autograde` (one at a time, no sandbox)",
            f"{r['stock_nbgrader_s']:.1f} s, "
            f"{r['stock_nbgrader_s'] / r['submissions']:.2f} s per submission"
            if r.get("stock_nbgrader_s")
            else "not measured",
        ),
        ("CSV of both runs identical", "yes" if r["identical"] else "**no**"),
        ("cell time limit", f"{r['cell_timeout_s']:g} s"),
        (
            "fresh `python -c 'import ...'` (best of 3)",
            f"numpy {r['import_numpy_s']:.2f} s; numpy and torch {r['import_torch_s']:.2f} s",
        ),
        ("sandbox", r["sandbox"]),
        ("machine", f"{p['cpu_count']} CPU cores, {p['device']}"),
        (
            "load average (1 min) at start / end",
            " / ".join(str(x) for x in r.get("load_average", ("?", "?"))),
        ),
        ("date, command", f"{p['date']}, `{p['command']}`"),
    ]
    lines = ["| measurement | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    return "\n".join(lines) + "\n\n" + _reading(r)


def _reading(r: dict) -> str:
    """What the stored figures say, including where they disagree with expectations."""
    if r["speedup"] > r["jobs"]:
        text = (
            f"The measured speed-up ({r['speedup']:.2f}x) exceeds the number of workers "
            f"({r['jobs']}), which parallel grading cannot do by itself: the machine was shared "
            "with other work (see the load average), so the two runs met different loads. Read "
            "these figures as rough."
        )
    else:
        text = (
            f"The speed-up ({r['speedup']:.2f}x with {r['jobs']} workers) does not exceed the "
            "number of workers: a submission that runs into the cell time limit holds its "
            "worker for the whole limit in both runs, and the parent's own work (checks, "
            "nbgrader recording the grades one batch after the other) does not shrink with "
            "more workers."
        )
    stock = r.get("stock_nbgrader_s")
    if stock:
        ratio = stock / r["sequential_s"]
        text += (
            f" With one worker, normedu took {1 / ratio:.2f}x the time of stock nbgrader, "
            "which runs everything in one process without a sandbox."
        )
    return text


def import_seconds(
    modules: tuple[str, ...] = ("numpy", "numpy, torch"), repeat: int = 3
) -> dict[str, float]:
    """Best-of-``repeat`` wall time of a fresh ``python -c "import <m>"`` for each entry:
    what a grading kernel pays at start-up for its imports."""
    import subprocess
    import sys

    out = {}
    for mods in modules:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", f"import {mods}"], check=True)
            best = min(best, time.perf_counter() - t0)
        out[mods] = best
    return out
