"""``normedu autograde``: grade every submission of an assignment, isolated and in parallel.

The pipeline, per run:

1. **Check** each submission in the parent, without running it (:mod:`.checks`): a file that is
   empty, not JSON, not a notebook, or of another assignment is ``ungradable (corrupt
   notebook)``; deleted or edited test cells set the ``tampered`` flag.
2. **Sanitize** it with nbgrader's own preprocessors (``ClearOutput``, ``DeduplicateIds``,
   ``OverwriteKernelspec``, ``OverwriteCells`` with ``add_missing_cells``, ``CheckCellMetadata``):
   test cells are restored from the gradebook, hidden tests included. Then the **answer
   policy** (:mod:`.policy`), on the text: a cell the student wrote runs with its magics and
   shell lines skipped, and constructs worth a look are noted for review (no points taken).
3. **Execute** it in a worker process (:mod:`.worker`), up to ``jobs`` at a time. The kernel
   runs in the sandbox of :mod:`.sandbox`, behind the reach of :mod:`.reach` (no reference
   and no library's norm to delegate to): a fresh working directory outside the course that
   holds only the student's notebook, a memory cap, a per-cell timeout and a per-submission
   wall clock, Landlock where the Linux kernel has it. Every process the kernel started is
   killed when its submission ends.
4. **Record** each batch of finished notebooks with nbgrader's own ``autograde`` in this
   process, its sanitize step empty and its ``Execute`` step replaced by
   :class:`ReplayExecute` (it takes the worker's executed notebook). So nbgrader itself writes
   ``autograded/`` and the scores. The gradebook has a single writer, this process, one batch
   after the other, while the workers go on executing (a pipeline). It writes a working copy
   of the gradebook that replaces the real one atomically at the end of the run.

Modules: :mod:`.pool` (the workers), :mod:`.gradebook` (scores and the working copy),
:mod:`.nbgrader_bridge` (nbgrader's preprocessors); this module is the pipeline.

A submission is graded once: a later run skips it unless its file changed (``collect``
replaced it) or ``force`` is set. Running again is idempotent; late submissions are graded
alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import torch_imports
from . import gradebook
from . import status as st
from .checks import (
    assignment_mismatch,
    belongs_to,
    expected_cells,
    imported_modules,
    may_run_long,
    read_notebook,
    tampering,
    untouched,
)
from .collect import load_collect_record
from .config import Course, ensure_alembic, silence_nbgrader_warnings, student_sort_key
from .forged import forged_metadata, rebuild
from .pool import Job, Pool
from .release import register
from .sandbox import describe_sandbox
from .students import sync_names
from .verdicts import note_resubmission, verdict_of

#: Defaults for the limits. The memory cap is on the kernel's address space: a one-thread
#: kernel that imports torch peaked at about 0.6 GiB here, so 4 GiB leaves room to spare.
CELL_TIMEOUT_S = 30.0
#: Finished submissions recorded by one nbgrader ``autograde`` call (the last call takes what is
#: left). Each call has a cost of its own (nbgrader's converter and gradebook queries): 11
#: hand-ins took 3.3 s to record in 11 calls, 2.5 s in 2. The scores reach the real gradebook
#: at the end of the run either way.
RECORD_BATCH = 8
WALL_TIMEOUT_S = 300.0
MEMORY_MB = 4096


@dataclass
class AutogradeReport:
    """What one ``autograde`` run did.

    - graded: students graded in this run; skipped: already graded and unchanged.
    - verdicts: every graded student's :class:`~normedu.course.status.Verdict`.
    - errors: problems of the grading machinery itself (not of the submissions).
    - seconds: wall time of the run; prepare/record_seconds: time the parent spent checking
      and sanitizing / having nbgrader record grades; execute_seconds: time it spent waiting
      for the workers (the three add up to about ``seconds`` less the start-up).
    """

    assignment: str
    graded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    verdicts: dict[str, st.Verdict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    jobs: int = 1
    seconds: float = 0.0
    prepare_seconds: float = 0.0
    execute_seconds: float = 0.0
    record_seconds: float = 0.0
    sandbox: str = ""


@dataclass(frozen=True)
class Limits:
    """What one submission may use: seconds per cell and in all, the kernel's address space
    in MiB (0: no cap), and Landlock (``auto``: when available, ``on``: required, ``off``)."""

    cell_timeout: float = CELL_TIMEOUT_S
    wall_timeout: float = WALL_TIMEOUT_S
    memory_mb: int = MEMORY_MB
    landlock: str = "auto"
    #: kernels keep the machine's network (no network namespace of their own)
    allow_network: bool = False

    def __post_init__(self):
        if self.landlock not in ("auto", "on", "off"):
            raise ValueError(f"landlock must be 'auto', 'on' or 'off', got {self.landlock!r}")
        if self.cell_timeout <= 0 or self.wall_timeout <= 0:
            raise ValueError(
                f"timeouts must be positive, got cell_timeout={self.cell_timeout} "
                f"wall_timeout={self.wall_timeout}"
            )


@dataclass
class _Run:
    """One autograde run: the real course, the working copy it writes, and its settings."""

    real_course: Course
    course: Course  # the same course with the gradebook's working copy
    assignment: str
    notebook: str
    base: Path  # scratch folder of the run
    limits: Limits
    jobs: int
    force: bool
    progress: bool
    report: AutogradeReport
    t0: float
    #: rewrite magics and note constructs for review (:mod:`.policy`)
    answer_policy: bool = True


#: Heavy modules a kernel's zygote may import ahead when the assignment's notebook uses them,
#: each with the parts of itself it imports only at first use (:mod:`normedu.torch_imports`).
#: The graded notebooks reach torch's autograd part (1 s of CPU in every graded kernel of the
#: prepost assignment) but train no model, so not its dynamo part.
PRELOADABLE = {"torch": ("torch", torch_imports.AUTOGRAD)}


def preloads(course: Course, assignment: str, notebook: str) -> tuple[str, ...]:
    """The modules of :data:`PRELOADABLE` that the assignment's own notebook (its source, else
    its release) imports: its kernels' zygote imports them once. Never one it does not
    import: a NumPy assignment's kernels must not have torch loaded."""
    for folder in (course.source_dir(assignment), course.release_dir(assignment)):
        path = folder / f"{notebook}.ipynb"
        if path.exists():
            imported = imported_modules(path)
            return tuple(m for top, ms in PRELOADABLE.items() if top in imported for m in ms)
    return ()


def reach_of(course: Course, assignment: str, notebook: str) -> dict:
    """What the assignment's grading kernels can reach (:func:`.reach.for_assignment`), from
    the modules its own notebook (its source, else its release) imports."""
    from .reach import for_assignment

    for folder in (course.source_dir(assignment), course.release_dir(assignment)):
        path = folder / f"{notebook}.ipynb"
        if path.exists():
            return for_assignment(assignment, imported_modules(path))
    return for_assignment(assignment, set())


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


def trusted_tests(expected) -> dict:
    """``{grade_id: source}`` of every test cell, from the gradebook (``expected``): their
    checks run on the trusted side (:mod:`.trusted`), whose outputs score."""
    tests = [c for c in expected if c.is_test and c.cell_type == "code"]
    return {c.grade_id: c.source for c in tests}


class NetworkIsolationError(ValueError):
    """The system gives a kernel no network namespace of its own, and the instructor did not
    pass ``allow_network``."""


def autograde(
    course: Course,
    assignment: str,
    *,
    jobs: int | None = None,
    force: bool = False,
    students: list[str] | None = None,
    cell_timeout: float = CELL_TIMEOUT_S,
    wall_timeout: float = WALL_TIMEOUT_S,
    memory_mb: int = MEMORY_MB,
    landlock: str = "auto",
    allow_network: bool = False,
    progress: bool = False,
    answer_policy: bool = True,
) -> AutogradeReport:
    """Grade the submissions of ``assignment`` in ``submitted/`` (see the module docstring).

    ``jobs``: worker processes (default ``os.cpu_count()``); ``students``: only these;
    ``force``: re-grade even unchanged submissions; ``cell_timeout``/``wall_timeout``: seconds
    per cell / per submission; ``memory_mb``: the kernel's address-space cap (0: none);
    ``landlock``: ``auto`` (use it when available), ``on`` (required) or ``off``;
    ``allow_network``: grade even where kernels cannot get a network namespace of their own
    (otherwise :class:`NetworkIsolationError`, before anything runs); ``answer_policy``:
    run answer cells with their magics skipped and note constructs for review
    (:mod:`.policy`); False only to test the layers beneath it. Every kernel runs behind
    its assignment's reach (:func:`reach_of`), whatever ``answer_policy`` says.
    """
    limits = Limits(cell_timeout, wall_timeout, memory_mb, landlock, allow_network)
    if not allow_network:
        from .namespaces import available
        from .sandbox import read_only_paths

        why = available(read_only_paths())
        if why:
            raise NetworkIsolationError(
                f"cannot cut student code off the network here ({why}); grade in a container "
                "with --network none, or pass --allow-network to grade without that isolation"
            )
    jobs = jobs or os.cpu_count() or 1
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    t0 = time.perf_counter()
    silence_nbgrader_warnings()
    ensure_alembic()

    notebooks = course.notebooks(assignment)
    if len(notebooks) != 1:
        raise ValueError(
            f"autograde handles one notebook per assignment; {assignment!r} has {notebooks}"
        )
    (notebook,) = notebooks
    everyone = course.students(assignment)
    if students is not None:
        unknown = sorted(set(students) - set(everyone))
        if unknown:
            raise ValueError(f"no submission of {assignment!r} for {unknown}")
        everyone = [s for s in everyone if s in set(students)]
    register(course, assignment)
    lock = gradebook.lock(course)
    # nbgrader writes a working copy of the gradebook (without fsync after every row: about
    # 400 commits per 12 submissions); it replaces the real one, atomically, at the end. A run
    # that crashes leaves the real gradebook as it was.
    base = Path(tempfile.mkdtemp(prefix="normedu-grade-"))
    work = replace(course, db_file=base / "gradebook.db")
    report = AutogradeReport(
        assignment, jobs=jobs, sandbox=describe_sandbox(landlock, allow_network)
    )
    run = _Run(
        course,
        work,
        assignment,
        notebook,
        base,
        limits,
        jobs,
        force,
        progress,
        report,
        t0,
        answer_policy,
    )
    try:
        with gradebook.working_copy(course.db_path, work.db_path):
            return _grade(run, everyone)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        lock.close()


def _queue(run: _Run, everyone: list[str]) -> list[tuple[str, Path, str, bool]]:
    """``(student, file, sha256, may run long)`` of every submission to grade (new, changed or
    forced), those that may run long first."""
    queue = []
    for student in everyone:
        path = run.course.submitted_dir(student, run.assignment) / f"{run.notebook}.ipynb"
        sha = hashlib.sha256(path.read_bytes() if path.exists() else b"").hexdigest()
        previous = st.load(run.course, run.assignment, student)
        regrade = previous is not None and previous.status == st.GRADING_FAILED
        if previous and previous.sha256 == sha and not run.force and not regrade:
            run.report.skipped.append(student)
        else:
            queue.append((student, path, sha, may_run_long(path)))
    # Longest first, as far as a glance at the source can tell (a stable sort: roster order
    # otherwise): a submission that sleeps to its time limit then overlaps the others.
    queue.sort(key=lambda item: not item[3])
    return queue


class _Stages:
    """The parent's two stages of the pipeline: :meth:`prepare` (check and sanitize one
    submission) and :meth:`record` (nbgrader records a batch, then each gets its verdict)."""

    def __init__(self, run: _Run):
        self.run = run
        course, assignment, notebook = run.course, run.assignment, run.notebook
        self.expected = expected_cells(course.db_url, assignment, notebook)
        self.others = gradebook.other_assignments(course, assignment)
        self.collected = load_collect_record(course, assignment)
        #: manual scores and comments dropped because the student's file changed
        self.dropped: dict[str, list[dict]] = {}
        self.executed_root = run.base / "executed"
        self.tests = trusted_tests(self.expected)
        #: The kernel fields of every job: the workers start their first kernel from them.
        self.kernel = {
            "memory_mb": run.limits.memory_mb,
            "threads": max(1, (os.cpu_count() or 1) // run.jobs),
            "landlock": run.limits.landlock,
            "preload": list(preloads(course, assignment, notebook)),
            "network": run.limits.allow_network,
            "reach": reach_of(course, assignment, notebook),
        }
        self.policy = self._policy() if run.answer_policy else None

    def _policy(self) -> set[str] | None:
        """The course's own cells, for the answer policy (:mod:`.policy`), from the solution
        notebook and the release; None where the course has neither."""
        import nbformat

        from .policy import course_sources

        run = self.run
        source = run.course.source_dir(run.assignment) / f"{run.notebook}.ipynb"
        release = run.course.release_dir(run.assignment) / f"{run.notebook}.ipynb"
        known = [p for p in (source, release) if p.exists()]
        if not known:
            return None
        notebooks = [nbformat.read(p, as_version=4) for p in known]
        return course_sources(*notebooks)

    def release_notebook(self):
        """The released notebook (None where ``exercises/`` lacks it), read once."""
        if not hasattr(self, "_release_nb"):
            import nbformat

            path = self.run.course.release_dir(self.run.assignment) / f"{self.run.notebook}.ipynb"
            self._release_nb = nbformat.read(path, as_version=4) if path.exists() else None
        return self._release_nb

    def prepare(self, student: str, path: Path, sha: str, long: bool = False) -> Job | None:
        """Check and sanitize one submission: a job to run, or None (verdict recorded)."""
        import nbformat

        from .nbgrader_bridge import sanitize

        run, course, notebook = self.run, self.run.course, self.run.notebook
        notes = list(self.collected.get(student, {}).get("notes", []))
        previous = st.load(course, run.assignment, student)
        if previous is not None and previous.sha256 != sha:
            # A new file: a grader's manual scores were about the old one (nbgrader would
            # keep them over the new automatic scores).
            self.dropped[student] = gradebook.drop_manual(course, run.assignment, student)
        status = st.UNGRADABLE
        if not path.exists():
            nb, problem = None, f"no {notebook}.ipynb in the submission"
        else:
            nb, problem = read_notebook(path)
            if nb is not None:
                problem = assignment_mismatch(nb, self.expected, self.others)
                if problem:
                    status = st.wrong_assignment(belongs_to(nb, self.others))
        if not problem:
            tampered = tampering(nb, self.expected)
            forged, clean = forged_metadata(nb, self.expected), None
            if not forged:
                try:
                    clean = sanitize(course, nb, run.assignment, notebook, student)
                except Exception as exc:  # nbgrader rejects malformed nbgrader metadata
                    forged = [f"nbgrader could not read its cells ({_first_line(exc)})"]
            if clean is None:
                # Graded on its answers, with the release's cells (:mod:`.forged`).
                release_nb = self.release_notebook()
                if release_nb is None:
                    problem = forged[0]
                else:
                    nb = rebuild(release_nb, nb)
                    tampered = [
                        *forged,
                        "nbgrader metadata edited: graded with the release's test cells and "
                        "points, the answer cells copied in",
                    ]
                    try:
                        clean = sanitize(course, nb, run.assignment, notebook, student)
                    except Exception as exc:  # noqa: BLE001 - reported as the verdict
                        problem = f"nbgrader could not read its cells: {_first_line(exc)}"
        if problem:
            gradebook.forget(course, run.assignment, student)
            run.report.verdicts[student] = st.Verdict(
                student, run.assignment, status, tampered=None, notes=[*notes, problem], sha256=sha
            )
            return None
        # Magics run skipped (the worker swaps the rewritten cells in); review notes cost nothing.
        replace_cells = {}
        if self.policy is not None:
            from .policy import police

            rewritten, review = police(clean, self.policy)
            replace_cells = {str(index): source for index, source in rewritten.items()}
            notes = [*notes, *review]
        job_dir = run.base / f"job-{uuid.uuid4().hex[:12]}"
        job_dir.mkdir()
        (self.executed_root / student).mkdir(parents=True)
        sanitized = job_dir / f"{notebook}.ipynb"
        nbformat.write(clean, sanitized)
        spec = {
            "notebook": str(sanitized),
            "executed": str(self.executed_root / student / f"{notebook}.ipynb"),
            "result": str(job_dir / "result.json"),
            "cell_timeout": run.limits.cell_timeout,
            "wall_timeout": run.limits.wall_timeout,
            "tests": self.tests,
            "replace": replace_cells,
            **self.kernel,
        }
        return Job(student, job_dir, spec, tampered, notes, sha, untouched(nb, self.expected), long)

    def record(self, batch: list[tuple[Job, dict]]) -> None:
        """Let nbgrader record a batch of executed submissions, then give each its verdict."""
        from .nbgrader_bridge import record

        run, report = self.run, self.run.report
        t_record = time.perf_counter()
        for job, _ in batch:
            shutil.rmtree(job.spec["workdir"], ignore_errors=True)
        runnable = [job.student for job, result in batch if not result.get("worker_failed")]
        if runnable:
            outcome = record(run.course, run.assignment, runnable, self.executed_root)
            if not outcome.get("success"):
                log = outcome.get("log", "")[-4000:]
                report.errors.append(f"nbgrader autograde reported errors:\n{log}")
        for job, result in batch:
            verdict = verdict_of(run.course, run.assignment, job, result, report)
            previous = st.load(run.course, run.assignment, job.student)
            if previous is not None and previous.sha256 == job.sha256:
                # Re-graded, same file: its manual scores still apply (nbgrader kept them
                # and flagged them for review): keep their reasons, clear the flags.
                verdict.adjustments = previous.adjustments
                if st.kind(verdict.status) not in st.NOT_RUN:
                    gradebook.keep_manual(run.course, run.assignment, job.student)
            if self.dropped.get(job.student) and st.kind(verdict.status) not in st.NOT_RUN:
                note_resubmission(run.course, run.assignment, verdict, self.dropped[job.student])
            report.verdicts[job.student] = verdict
        report.record_seconds += time.perf_counter() - t_record


def _grade(run: _Run, everyone: list[str]) -> AutogradeReport:
    """The body of :func:`autograde`, on the working copy of the gradebook (see there)."""
    report = run.report
    queue = _queue(run, everyone)
    stages = _Stages(run)
    # A pipeline: the parent prepares the next submission and records finished ones while the
    # workers execute; the gradebook is only ever written here, one batch after the other.
    pool = None
    try:
        if queue:
            pool = Pool(
                run.jobs,
                run.limits.wall_timeout,
                run.base,
                run.progress,
                len(queue),
                kernel=stages.kernel,
            )
        finished: list[tuple[Job, dict]] = []
        while queue or (pool and pool.busy()) or finished:
            while queue and pool.room() is not None:
                t_prep = time.perf_counter()
                job = stages.prepare(*queue.pop(0))
                report.prepare_seconds += time.perf_counter() - t_prep
                if job is not None:
                    pool.send(job)
                else:
                    pool.bar.update(1)
            t_exec = time.perf_counter()
            finished += pool.poll(0.02 if finished else 0.5)
            report.execute_seconds += time.perf_counter() - t_exec
            if len(finished) >= RECORD_BATCH or (finished and not queue and not pool.busy()):
                stages.record(finished)
                finished = []
        sync_names(run.course)
        gradebook.install(run.course.db_path, run.real_course.db_path)
        for verdict in report.verdicts.values():
            st.save(run.real_course, verdict)
    finally:
        if pool is not None:
            pool.close()
    report.graded = sorted(report.verdicts, key=student_sort_key)
    report.seconds = time.perf_counter() - run.t0
    return report
