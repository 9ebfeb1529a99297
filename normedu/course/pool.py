"""The worker pool: ``jobs`` long-lived worker processes that execute submissions.

The parent sends a job (a JSON file naming the sanitized notebook and where to write the
result) over a private pipe; each worker (:mod:`.worker`) answers on another when the result
is written. A worker holds up to :attr:`Worker.PREFETCH` jobs, so it starts the next kernel at
once, even while the parent is busy recording grades.

Everything the workers create on disk (each kernel's working copy, the kernels' connection
files and sockets) lives in the pool's own scratch folder, which :meth:`Pool.close` removes:
workers are killed, not asked to tidy up, so nothing of a run stays behind in the system's
temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Job:
    student: str
    dir: Path
    spec: dict
    tampered: list[str]
    notes: list[str]
    sha256: str
    #: every answer cell as handed out (a failing run is then "not attempted")
    untouched: bool = False
    #: it may run to its time limit (:func:`.checks.may_run_long`): nothing waits behind it
    long: bool = False
    #: how many workers died while running it (it is graded again, up to :data:`RETRIES`)
    deaths: int = 0
    #: held by a worker that died: graded again alone in a worker, nothing queued behind it
    alone: bool = False


#: A submission held by a worker that died is graded again this often, in another worker.
RETRIES = 2


_PID_NAMESPACE: list[str] | None = None


def pid_namespace() -> list[str]:
    """The command prefix that starts a worker as the first process of a PID namespace of its
    own, with its own ``/proc`` (``unshare --pid --fork --mount-proc``; inside a user
    namespace when not root), or [] where the system refuses. When the worker dies, killed
    or not, the Linux kernel kills every process in its namespace: its zygote, its kernels
    and whatever they started, ``setsid`` or not. Nothing of a dead worker outlives it."""
    global _PID_NAMESPACE
    if _PID_NAMESPACE is None:
        _PID_NAMESPACE = []
        base = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
        user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        if sys.platform.startswith("linux") and shutil.which("unshare"):
            command = [*base[:1], *user, *base[1:]]
            try:
                probe = subprocess.run([*command, "true"], capture_output=True, timeout=30)
                if probe.returncode == 0:
                    _PID_NAMESPACE = command
            except (OSError, subprocess.TimeoutExpired):
                pass
    return _PID_NAMESPACE


class Worker:
    """A long-lived ``normedu.course.worker --serve`` process and its private pipes.

    It holds up to :data:`PREFETCH` jobs: the next one waits in its pipe, so the worker starts
    it at once even while the parent is busy recording grades.
    """

    PREFETCH = 2

    def __init__(self, env: dict, logdir: Path, index: int, kernel: dict | None = None):
        to_worker_r, self._to_worker = os.pipe()
        self._from_worker, from_worker_w = os.pipe()
        self.log_path = logdir / f"worker-{index}.log"
        command = [*pid_namespace(), sys.executable, "-m", "normedu.course.worker", "--serve"]
        pipes = [str(to_worker_r), str(from_worker_w)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*command, *pipes, *([f"--kernel={json.dumps(kernel)}"] if kernel else [])],
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
        self.jobs: list[Job] = []
        self.started = 0.0  # when the job at the head of ``jobs`` started
        self._buffer = b""

    def holds_long(self) -> bool:
        """Is a job that may run to its time limit among those it holds? Then nothing more
        is queued behind it: that would wait for the limit too."""
        return any(job.long or job.alone for job in self.jobs)

    @property
    def fd(self) -> int:
        return self._from_worker

    def send(self, job: Job) -> bool:
        """Hand ``job`` over; False (nothing held) when the worker is already dead."""
        try:
            os.write(self._to_worker, (str(job.dir / "job.json") + "\n").encode())
        except BrokenPipeError:
            return False
        if not self.jobs:
            self.started = time.monotonic()
        self.jobs.append(job)
        return True

    def receive(self) -> tuple[list[Job], bool]:
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


class Pool:
    """``jobs`` long-lived workers: :meth:`send` a job where there is room, :meth:`poll` for
    the finished ones, each as ``(job, result)``. A worker that dies is replaced, and the
    submissions it held are graded again by the others (:data:`RETRIES` times at most, then
    ``worker_failed``); one that hangs past the backstop yields ``worker_failed`` results."""

    def __init__(
        self,
        jobs: int,
        wall: float,
        logdir: Path,
        progress: bool,
        total: int,
        kernel: dict | None = None,
    ):
        from tqdm.std import tqdm  # plain text bar: also readable in logs and static pages

        env = dict(os.environ)
        pkg_parent = str(Path(__file__).resolve().parents[2])
        extra = env.get("PYTHONPATH")
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + extra if extra else "")
        env["PYTHONHASHSEED"] = "0"
        env["JUPYTER_RUNTIME_DIR"] = str(logdir / "runtime")
        # Not inside ``logdir``, which holds the gradebook's working copy: a kernel whose
        # sandbox has no Landlock must not reach it by a relative path from its working copy.
        self.scratch = Path(tempfile.mkdtemp(prefix="normedu-kernels-"))
        env["TMPDIR"] = str(self.scratch)  # the workers' spare kernels and connection files
        self._env, self._logdir, self._wall = env, logdir, wall
        self._kernel = kernel
        self._spawned = 0
        self.workers = [self._spawn() for _ in range(jobs)]
        #: jobs of dead workers, to be sent again (before any new one)
        self.again: list[Job] = []
        self.bar = tqdm(
            total=total, desc="autograde", unit="sub", disable=not progress, file=sys.stderr
        )

    def _spawn(self) -> Worker:
        self._spawned += 1
        return Worker(self._env, self._logdir, self._spawned, self._kernel)

    def room(self, alone: bool = False) -> Worker | None:
        """The least loaded worker with room for a job (a dead idle one is replaced);
        ``alone``: only a worker that holds nothing."""
        for i, worker in enumerate(self.workers):
            if not worker.jobs and worker.proc.poll() is not None:
                worker.kill()
                self.workers[i] = self._spawn()
        worker = min(self.workers, key=lambda w: (w.holds_long(), len(w.jobs)))
        room = 1 if worker.holds_long() or alone else Worker.PREFETCH
        return worker if len(worker.jobs) < room else None

    def busy(self) -> bool:
        return bool(self.again) or any(w.jobs for w in self.workers)

    def _replace(self, worker: Worker) -> None:
        worker.kill()
        self.workers[self.workers.index(worker)] = self._spawn()

    def send(self, job: Job) -> None:
        # A short name: the kernel's Unix sockets go in here, and a socket path must stay
        # under 108 bytes.
        job.spec["workdir"] = tempfile.mkdtemp(prefix="k", dir=self.scratch)
        (job.dir / "job.json").write_text(json.dumps(job.spec))
        for _ in range(len(self.workers) + 2):
            worker = self.room(job.alone)
            if worker is None:
                raise RuntimeError("send() needs a worker with room")
            if worker.send(job):
                return
            self._replace(worker)  # it died since it was last polled
        raise RuntimeError("no grading worker stays alive")

    def poll(self, timeout: float) -> list[tuple[Job, dict]]:
        import select

        while self.again and self.room(alone=True) is not None:
            self.send(self.again.pop(0))
        busy = [w for w in self.workers if w.jobs]
        if not busy:
            return []
        ready, _, _ = select.select([w.fd for w in busy], [], [], timeout)
        done = []
        for worker in busy:
            if worker.fd in ready:
                finished, died = worker.receive()
                if died:
                    finished = self._after_death(worker, finished)
                done += [self._result(worker, job, backstop=False) for job in finished]
            elif time.monotonic() - worker.started > self._wall + 60:
                # The worker enforces the wall clock itself; this is the backstop if it hangs.
                jobs, worker.jobs = worker.jobs, []
                worker.kill()
                done += [self._result(worker, job, backstop=True) for job in jobs]
        return done

    def _after_death(self, worker: Worker, held: list[Job]) -> list[Job]:
        """A worker died holding ``held``: the jobs it finished (result written) are done; the
        others go to :attr:`again`, each to be graded alone, except the one it was running
        (the first) after its :data:`RETRIES`-th death: done, failed. The dead worker is
        replaced by a fresh one."""
        done = []
        running = True
        for job in held:
            if Path(job.spec["result"]).exists():
                done.append(job)
                continue
            job.alone = True
            job.deaths += running
            running = False
            (done if job.deaths > RETRIES else self.again).append(job)
        self._replace(worker)
        return done

    def _result(self, worker: Worker, job: Job, backstop: bool) -> tuple[Job, dict]:
        self.bar.update(1)
        result_file = Path(job.spec["result"])
        if result_file.exists() and not backstop:
            return job, json.loads(result_file.read_text())
        return job, {
            "worker_failed": True,
            "timed_out": backstop,
            "reason": "the grading worker was stopped after the time limit"
            if backstop
            else f"the grading worker died {job.deaths} times while grading it",
            "log": worker.log_path.read_text(errors="replace")[-2000:],
        }

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.bar.close()
