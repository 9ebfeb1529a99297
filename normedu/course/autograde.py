"""``normedu autograde``: grade every submission of an assignment, isolated and in parallel.

The pipeline, per run:

1. **Check** each submission in the parent, without running it (:mod:`.checks`): a file that is
   empty, not JSON, not a notebook, or of another assignment is ``ungradable (corrupt
   notebook)``; deleted or edited test cells set the ``tampered`` flag.
2. **Sanitize** it with nbgrader's own preprocessors (``ClearOutput``, ``DeduplicateIds``,
   ``OverwriteKernelspec``, ``OverwriteCells`` with ``add_missing_cells``, ``CheckCellMetadata``):
   test cells are restored from the gradebook, hidden tests included.
3. **Execute** it in a worker process (:mod:`.worker`), up to ``jobs`` at a time. The kernel
   runs in the sandbox of :mod:`.sandbox`: a fresh working directory outside the course that
   holds only the student's notebook, a memory cap, a per-cell timeout and a per-submission
   wall clock, Landlock where the Linux kernel has it. Every process the kernel started is
   killed when its submission ends.
4. **Record** each batch of finished notebooks with nbgrader's own ``autograde`` in this
   process, its sanitize step empty and its ``Execute`` step replaced by
   :class:`ReplayExecute` (it takes the worker's executed notebook). So nbgrader itself writes
   ``autograded/`` and the scores. The gradebook has a single writer, this process, one batch
   after the other, while the workers go on executing (a pipeline). It writes a working copy
   of the gradebook that replaces the real one atomically at the end of the run.

A submission is graded once: a later run skips it unless its file changed (``collect``
replaced it) or ``force`` is set. Running again is idempotent; late submissions are graded
alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import status as st
from .checks import assignment_mismatch, expected_cells, read_notebook, tampering
from .collect import load_collect_record
from .config import Course, ensure_tools_on_path, silence_nbgrader_warnings
from .release import register

#: Defaults for the limits. The memory cap is on the kernel's address space: a one-thread
#: kernel that imports torch peaked at about 0.6 GiB here, so 4 GiB leaves room to spare.
CELL_TIMEOUT_S = 30.0
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


def _replay_class():
    import nbformat
    from nbgrader.preprocessors import NbGraderPreprocessor
    from traitlets import Unicode

    class ReplayExecute(NbGraderPreprocessor):
        """nbgrader's ``Execute`` step, replaced: take the notebook that the sandboxed worker
        executed for this student (``<executed_root>/<student>/<nb>.ipynb``)."""

        executed_root = Unicode("").tag(config=True)

        def preprocess(self, nb, resources):
            meta = resources["nbgrader"]
            path = Path(self.executed_root) / meta["student"] / f"{meta['notebook']}.ipynb"
            # The worker's notebook is the one this process sanitized with nbgrader's own
            # preprocessors (so nbgrader's sanitize step is configured empty here), with the
            # outputs the kernel produced. The kernel never had access to this file.
            return nbformat.read(path, as_version=4), resources

    return ReplayExecute


def _sanitize(course: Course, nb, assignment: str, notebook: str, student: str):
    from nbgrader.preprocessors import (
        CheckCellMetadata,
        ClearOutput,
        DeduplicateIds,
        OverwriteCells,
        OverwriteKernelspec,
    )

    config = course.nbgrader_config()
    resources = {
        "nbgrader": {
            "notebook": notebook,
            "assignment": assignment,
            "student": student,
            "db_url": course.db_url,
        }
    }
    for cls in (
        ClearOutput,
        DeduplicateIds,
        OverwriteKernelspec,
        OverwriteCells,
        CheckCellMetadata,
    ):
        nb, resources = cls(config=config).preprocess(nb, resources)
    return nb


def _other_assignments(course: Course, assignment: str) -> dict[str, set[str]]:
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(course.db_url) as gb:
        for a in gb.assignments:
            if a.name != assignment:
                out[a.name] = {c.name for nb in a.notebooks for c in nb.source_cells}
    return out


def _forget(course: Course, assignment: str, student: str) -> None:
    """Remove an earlier grade of ``student`` (their new file cannot be graded)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db_url) as gb:
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass
    shutil.rmtree(course.autograded_dir(student, assignment), ignore_errors=True)
    shutil.rmtree(course.feedback_dir(student, assignment), ignore_errors=True)


@dataclass
class _Job:
    student: str
    dir: Path
    spec: dict
    tampered: list[str]
    notes: list[str]
    sha256: str


class _Worker:
    """A long-lived ``normedu.course.worker --serve`` process and its private pipes.

    It holds up to :data:`PREFETCH` jobs: the next one waits in its pipe, so the worker starts
    it at once even while the parent is busy recording grades.
    """

    PREFETCH = 2

    def __init__(self, env: dict, logdir: Path, index: int):
        to_worker_r, self._to_worker = os.pipe()
        self._from_worker, from_worker_w = os.pipe()
        self.log_path = logdir / f"worker-{index}.log"
        command = [sys.executable, "-m", "normedu.course.worker", "--serve"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*command, str(to_worker_r), str(from_worker_w)],
                cwd=logdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(to_worker_r, from_worker_w),
                start_new_session=True,
            )
        os.close(to_worker_r)
        os.close(from_worker_w)
        self.jobs: list[_Job] = []
        self.started = 0.0  # when the job at the head of ``jobs`` started
        self._buffer = b""

    @property
    def fd(self) -> int:
        return self._from_worker

    def send(self, job: _Job) -> None:
        if not self.jobs:
            self.started = time.monotonic()
        self.jobs.append(job)
        os.write(self._to_worker, (str(job.dir / "job.json") + "\n").encode())

    def receive(self) -> tuple[list[_Job], bool]:
        """``(finished jobs, worker died)`` after reading what the worker answered."""
        chunk = os.read(self._from_worker, 4096)
        if not chunk:
            done, self.jobs = self.jobs, []
            return done, True
        self._buffer += chunk
        done = []
        while b"\n" in self._buffer and self.jobs:
            _, self._buffer = self._buffer.split(b"\n", 1)
            done.append(self.jobs.pop(0))
            self.started = time.monotonic()
        return done, False

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for fd in (self._to_worker, self._from_worker):
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        # Every job it was sent has been answered, and it kills its kernel and the kernel's
        # descendants before answering: nothing is left to shut down gracefully.
        self.kill()


class _Pool:
    """``jobs`` long-lived workers: :meth:`send` a job where there is room, :meth:`poll` for
    the finished ones, each as ``(job, result)``. A worker that dies or hangs past the backstop
    yields results with ``worker_failed`` for its jobs and is replaced."""

    def __init__(self, jobs: int, wall: float, logdir: Path, progress: bool, total: int):
        from tqdm.std import tqdm  # plain text bar: also readable in logs and static pages

        env = dict(os.environ)
        pkg_parent = str(Path(__file__).resolve().parents[2])
        extra = env.get("PYTHONPATH")
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + extra if extra else "")
        env["PYTHONHASHSEED"] = "0"
        env["JUPYTER_RUNTIME_DIR"] = str(logdir / "runtime")
        self._env, self._logdir, self._wall = env, logdir, wall
        self._spawned = 0
        self.workers = [self._spawn() for _ in range(jobs)]
        self.bar = tqdm(
            total=total, desc="autograde", unit="sub", disable=not progress, file=sys.stderr
        )

    def _spawn(self) -> _Worker:
        self._spawned += 1
        return _Worker(self._env, self._logdir, self._spawned)

    def room(self) -> _Worker | None:
        """The least loaded worker with room for a job (a dead idle one is replaced)."""
        for i, worker in enumerate(self.workers):
            if not worker.jobs and worker.proc.poll() is not None:
                worker.kill()
                self.workers[i] = self._spawn()
        worker = min(self.workers, key=lambda w: len(w.jobs))
        return worker if len(worker.jobs) < _Worker.PREFETCH else None

    def busy(self) -> bool:
        return any(w.jobs for w in self.workers)

    def send(self, job: _Job) -> None:
        (job.dir / "job.json").write_text(json.dumps(job.spec))
        worker = self.room()
        if worker is None:
            raise RuntimeError("send() needs a worker with room")
        worker.send(job)

    def poll(self, timeout: float) -> list[tuple[_Job, dict]]:
        import select

        busy = [w for w in self.workers if w.jobs]
        if not busy:
            return []
        ready, _, _ = select.select([w.fd for w in busy], [], [], timeout)
        done = []
        for worker in busy:
            if worker.fd in ready:
                finished, died = worker.receive()
                done += [self._result(worker, job, backstop=False) for job in finished]
            elif time.monotonic() - worker.started > self._wall + 60:
                # The worker enforces the wall clock itself; this is the backstop if it hangs.
                jobs, worker.jobs = worker.jobs, []
                worker.kill()
                done += [self._result(worker, job, backstop=True) for job in jobs]
        return done

    def _result(self, worker: _Worker, job: _Job, backstop: bool) -> tuple[_Job, dict]:
        self.bar.update(1)
        result_file = Path(job.spec["result"])
        if result_file.exists() and not backstop:
            return job, json.loads(result_file.read_text())
        return job, {
            "worker_failed": True,
            "timed_out": backstop,
            "reason": "the grading worker was stopped after the time limit"
            if backstop
            else f"the grading worker failed (exit {worker.proc.poll()})",
            "log": worker.log_path.read_text(errors="replace")[-2000:],
        }

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.bar.close()


def _record_with_nbgrader(
    course: Course, assignment: str, students: list[str], executed_root: Path
):
    """nbgrader autograde of ``students`` only, with the worker outputs replayed."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )
    from nbgrader.utils import capture_log, temp_attrs

    everyone = set(course.students(assignment))
    exclude = ",".join(sorted(everyone - set(students)))
    api = course.api(
        Autograde={
            "sanitize_preprocessors": [],
            "autograde_preprocessors": [
                _replay_class(),
                IgnorePattern,
                ClearMetadataPreprocessor,
                LimitOutput,
                SaveAutoGrades,
                AssignLatePenalties,
                CheckCellMetadata,
            ],
        },
        ReplayExecute={"executed_root": str(executed_root)},
    )
    with temp_attrs(
        api.coursedir, assignment_id=assignment, student_id="*", student_id_exclude=exclude
    ):
        app = Autograde(coursedir=api.coursedir, parent=api)
        app.force = True
        app.create_student = True
        return capture_log(app)


def _scores(course: Course, assignment: str, student: str) -> list[tuple[str, float, float]] | None:
    """``[(grade_id, score, max_score)]`` of a recorded submission, None if there is none."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db_url) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        rows = []
        for nb in sub.notebooks:
            for grade in nb.grades:
                rows.append((grade.name, float(grade.score or 0.0), float(grade.max_score)))
        return rows


def _lock(course: Course):
    """An exclusive lock on the course's grading state; ValueError if another run holds it."""
    import fcntl

    path = course.root / ".normedu" / "grading.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - held for the whole run
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ValueError(f"another normedu autograde is running on {course.root}") from None
    return handle


def _fast_sqlite(path: Path):
    """Turn off per-commit fsync for connections to ``path`` (the run's working copy only).
    Returns a function that undoes it."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    target = str(path.resolve())

    def _pragma(dbapi_connection, _record):
        rows = dbapi_connection.execute("PRAGMA database_list").fetchall()
        if any(row[2] and str(Path(row[2]).resolve()) == target for row in rows):
            dbapi_connection.execute("PRAGMA synchronous=OFF")

    event.listen(Engine, "connect", _pragma)
    return lambda: event.remove(Engine, "connect", _pragma)


def _share_engines():
    """Make nbgrader reuse one SQLAlchemy engine per database URL during the run.

    nbgrader opens the gradebook (``Gradebook(db_url)``) a dozen times per submission, each
    time with a new engine, so every query is compiled again: most of the parent's time per
    submission. A shared engine keeps SQLAlchemy's compiled-statement cache. Returns a function
    that restores nbgrader's own ``create_engine``.
    """
    import nbgrader.api

    original = nbgrader.api.create_engine
    engines: dict[str, object] = {}

    def create_engine(url, *args, **kwargs):
        key = str(url)
        if key not in engines:
            engines[key] = original(url, *args, **kwargs)
        return engines[key]

    nbgrader.api.create_engine = create_engine

    def restore() -> None:
        nbgrader.api.create_engine = original
        for engine in engines.values():
            engine.dispose()

    return restore


def _install(work_db: Path, real_db: Path) -> None:
    """Replace ``real_db`` by ``work_db`` atomically (copy beside it, fsync, rename)."""
    tmp = real_db.with_name(real_db.name + ".new")
    shutil.copyfile(work_db, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, real_db)


def _verdict(course: Course, assignment: str, job: _Job, result: dict, report) -> st.Verdict:
    notes = list(job.notes) + list(job.tampered)
    if result.get("reason"):
        notes.append(result["reason"])
    if result.get("timeout_cells"):
        limit = job.spec["cell_timeout"]
        notes.append(f"cell(s) {result['timeout_cells']} ran past the {limit:g} s cell time limit")
    scores = None
    if result.get("worker_failed"):
        report.errors.append(f"{job.student}: {result['reason']}\n{result.get('log', '')}")
        _forget(course, assignment, job.student)
    else:
        scores = _scores(course, assignment, job.student)
    if result.get("timed_out"):
        status = st.TIMED_OUT
    elif scores is None:
        status = st.FAILED
        if not result.get("worker_failed"):
            notes.append("nbgrader could not record this submission")
            report.errors.append(f"{job.student}: not recorded by nbgrader")
    else:
        failed = [g for g, s, m in scores if s < m]
        status = st.FAILED if failed else st.GRADED
        if failed:
            notes.append("failed: " + ", ".join(failed))
    return st.Verdict(
        job.student,
        assignment,
        status,
        tampered=bool(job.tampered),
        notes=notes,
        sha256=job.sha256,
        seconds=float(result.get("wall_s", 0.0)),
        sandbox=report.sandbox if result.get("landlock") else sandbox_description("off"),
    )


def sandbox_description(landlock: str = "auto") -> str:
    from .sandbox import landlock_abi

    abi = landlock_abi()
    if landlock != "off" and abi > 0:
        return f"working copy + rlimits + Landlock ABI {abi}"
    return "working copy + rlimits (no Landlock: absolute paths are not blocked)"


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
    progress: bool = False,
) -> AutogradeReport:
    """Grade the submissions of ``assignment`` in ``submitted/`` (see the module docstring).

    ``jobs``: worker processes (default ``os.cpu_count()``); ``students``: only these;
    ``force``: re-grade even unchanged submissions; ``cell_timeout``/``wall_timeout``: seconds
    per cell / per submission; ``memory_mb``: the kernel's address-space cap (0: none);
    ``landlock``: ``auto`` (use it when available), ``on`` (required) or ``off``.
    """
    if landlock not in ("auto", "on", "off"):
        raise ValueError(f"landlock must be 'auto', 'on' or 'off', got {landlock!r}")
    if cell_timeout <= 0 or wall_timeout <= 0:
        raise ValueError(f"timeouts must be positive, got {cell_timeout=} {wall_timeout=}")
    jobs = jobs or os.cpu_count() or 1
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    t0 = time.perf_counter()
    silence_nbgrader_warnings()
    ensure_tools_on_path()

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
    lock = _lock(course)
    # nbgrader writes a working copy of the gradebook (without fsync after every row: about
    # 400 commits per 12 submissions); it replaces the real one, atomically, at the end. A run
    # that crashes leaves the real gradebook as it was.
    base = Path(tempfile.mkdtemp(prefix="normedu-grade-"))
    real_course, course = course, replace(course, db_file=base / "gradebook.db")
    shutil.copy2(real_course.db_path, course.db_path)
    undo_fast_sqlite = _fast_sqlite(course.db_path)
    undo_shared_engines = _share_engines()
    report = AutogradeReport(assignment, jobs=jobs, sandbox=sandbox_description(landlock))
    try:
        return _grade(
            real_course, course, assignment, notebook, everyone, report, base,
            force=force, jobs=jobs, cell_timeout=cell_timeout, wall_timeout=wall_timeout,
            memory_mb=memory_mb, landlock=landlock, progress=progress, t0=t0,
        )  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
        undo_shared_engines()
        undo_fast_sqlite()
        lock.close()


def _grade(
    real_course: Course,
    course: Course,
    assignment: str,
    notebook: str,
    everyone: list[str],
    report: AutogradeReport,
    base: Path,
    *,
    force: bool,
    jobs: int,
    cell_timeout: float,
    wall_timeout: float,
    memory_mb: int,
    landlock: str,
    progress: bool,
    t0: float,
) -> AutogradeReport:
    """The body of :func:`autograde`, on the working-copy ``course`` (see there)."""
    import nbformat

    expected = expected_cells(course.db_url, assignment, notebook)
    others = _other_assignments(course, assignment)
    collected = load_collect_record(course, assignment)

    executed_root = base / "executed"
    threads = max(1, (os.cpu_count() or 1) // jobs)

    queue = []
    for student in everyone:
        path = course.submitted_dir(student, assignment) / f"{notebook}.ipynb"
        sha = hashlib.sha256(path.read_bytes() if path.exists() else b"").hexdigest()
        previous = st.load(course, assignment, student)
        if previous and previous.sha256 == sha and not force:
            report.skipped.append(student)
        else:
            queue.append((student, path, sha))

    def prepare(student: str, path: Path, sha: str) -> _Job | None:
        """Check and sanitize one submission: a job to run, or None (verdict recorded)."""
        notes = list(collected.get(student, {}).get("notes", []))
        if not path.exists():
            nb, problem = None, f"no {notebook}.ipynb in the submission"
        else:
            nb, problem = read_notebook(path)
            if nb is not None:
                problem = assignment_mismatch(nb, expected, others)
        if not problem:
            tampered = tampering(nb, expected)
            try:
                clean = _sanitize(course, nb, assignment, notebook, student)
            except Exception as exc:  # nbgrader rejects malformed nbgrader metadata
                problem = f"nbgrader could not read its cells: {str(exc).splitlines()[0][:160]}"
        if problem:
            _forget(course, assignment, student)
            report.verdicts[student] = st.Verdict(
                student, assignment, st.UNGRADABLE, notes=[*notes, problem], sha256=sha
            )
            return None
        job_dir = base / f"job-{uuid.uuid4().hex[:12]}"
        job_dir.mkdir()
        (executed_root / student).mkdir(parents=True)
        sanitized = job_dir / f"{notebook}.ipynb"
        nbformat.write(clean, sanitized)
        spec = {
            "notebook": str(sanitized),
            "executed": str(executed_root / student / f"{notebook}.ipynb"),
            "result": str(job_dir / "result.json"),
            "workdir": tempfile.mkdtemp(prefix="normedu-kernel-"),
            "cell_timeout": cell_timeout,
            "wall_timeout": wall_timeout,
            "memory_mb": memory_mb,
            "threads": threads,
            "landlock": landlock,
        }
        return _Job(student, job_dir, spec, tampered, notes, sha)

    def record(batch: list[tuple[_Job, dict]]) -> None:
        """Let nbgrader record a batch of executed submissions, then give each its verdict."""
        t_record = time.perf_counter()
        for job, _ in batch:
            shutil.rmtree(job.spec["workdir"], ignore_errors=True)
        runnable = [job.student for job, result in batch if not result.get("worker_failed")]
        if runnable:
            outcome = _record_with_nbgrader(course, assignment, runnable, executed_root)
            if not outcome.get("success"):
                log = outcome.get("log", "")[-4000:]
                report.errors.append(f"nbgrader autograde reported errors:\n{log}")
        for job, result in batch:
            report.verdicts[job.student] = _verdict(course, assignment, job, result, report)
        report.record_seconds += time.perf_counter() - t_record

    # A pipeline: the parent prepares the next submission and records finished ones while the
    # workers execute; the gradebook is only ever written here, one batch after the other.
    pool = None
    try:
        if queue:
            pool = _Pool(jobs, wall_timeout, base, progress, total=len(queue))
        finished: list[tuple[_Job, dict]] = []
        while queue or (pool and pool.busy()) or finished:
            while queue and pool.room() is not None:
                t_prep = time.perf_counter()
                job = prepare(*queue.pop(0))
                report.prepare_seconds += time.perf_counter() - t_prep
                if job is not None:
                    pool.send(job)
                else:
                    pool.bar.update(1)
            t_exec = time.perf_counter()
            finished += pool.poll(0.02 if finished else 0.5)
            report.execute_seconds += time.perf_counter() - t_exec
            if finished:
                record(finished)
                finished = []
        _install(course.db_path, real_course.db_path)
        for verdict in report.verdicts.values():
            st.save(real_course, verdict)
    finally:
        if pool is not None:
            pool.close()
    report.graded = sorted(report.verdicts)
    report.seconds = time.perf_counter() - t0
    return report
