"""The course directory: where each stage of an assignment lives, and nbgrader's configuration.

Layout (nbgrader's, with this course's names)::

    <root>/
      solutions/<a>/<a>.ipynb            instructor source (nbgrader "source")
      exercises/<a>/<a>.ipynb            student version (nbgrader "release"), made by `release`
      gradebook.db                       nbgrader's gradebook (written by the parent process only)
      submitted/<student>/<a>/<a>.ipynb  placed by `collect`, with timestamp.txt
      autograded/<student>/<a>/...       written by nbgrader during `autograde`
      feedback/<student>/<a>/<a>.html    written by `feedback`
      .normedu/status/<a>/<student>.json normedu's per-submission verdict (status, tampering, notes)
      .normedu/exchange/                 nbgrader's exchange (Formgrader checks that it exists)

:meth:`Course.nbgrader_config` is the ONE nbgrader configuration of the course: the root
``nbgrader_config.py`` loads it (:func:`configure`), so stock ``nbgrader`` commands, Formgrader,
the ``normedu`` commands and the tests all run with the same settings.

The functions here never import torch: the grading pipeline stays light.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from traitlets.config import Config


@dataclass(frozen=True)
class Course:
    """Paths of one course directory. ``root`` is absolute."""

    root: Path
    source: str = "solutions"
    release: str = "exercises"
    submitted: str = "submitted"
    autograded: str = "autograded"
    feedback: str = "feedback"
    course_id: str = "normedu"
    #: Where the gradebook is, when not ``<root>/gradebook.db`` (autograde works on a copy).
    db_file: Path | None = None

    @classmethod
    def at(cls, root: str | os.PathLike | None = None) -> Course:
        """The course rooted at ``root``: explicitly given (``normedu --root``), else
        ``$NORMEDU_COURSE_ROOT``, else the nearest folder at or above the current directory
        that holds ``nbgrader_config.py`` (so that ``normedu autograde`` works from
        ``exercises/`` too), else the current directory."""
        if root is None:
            root = os.environ.get("NORMEDU_COURSE_ROOT") or find_root(Path.cwd())
        root = Path(root).resolve()
        if not root.is_dir():
            raise ValueError(f"course root {str(root)!r} is not a directory")
        return cls(root=root)

    # -- paths -------------------------------------------------------------------------------
    @property
    def db_path(self) -> Path:
        return self.db_file if self.db_file is not None else self.root / "gradebook.db"

    @property
    def db_url(self) -> str:
        return "sqlite:///" + str(self.db_path)

    def source_dir(self, assignment: str) -> Path:
        return self.root / self.source / assignment

    def release_dir(self, assignment: str) -> Path:
        return self.root / self.release / assignment

    def submitted_dir(self, student: str, assignment: str) -> Path:
        return self.root / self.submitted / student / assignment

    def autograded_dir(self, student: str, assignment: str) -> Path:
        return self.root / self.autograded / student / assignment

    def feedback_dir(self, student: str, assignment: str) -> Path:
        return self.root / self.feedback / student / assignment

    @property
    def exchange_dir(self) -> Path:
        """nbgrader's exchange, inside the course (this course hands out files from
        ``exercises/``; the exchange only has to exist so that Formgrader works)."""
        return self.root / ".normedu" / "exchange"

    def status_dir(self, assignment: str) -> Path:
        return self.root / ".normedu" / "status" / assignment

    def assignments(self) -> list[str]:
        """Assignment ids: the folders of ``solutions/`` that hold at least one notebook."""
        src = self.root / self.source
        if not src.is_dir():
            return []
        return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))

    def notebooks(self, assignment: str) -> list[str]:
        """Notebook names (without ``.ipynb``) of an assignment's source folder."""
        folder = self.source_dir(assignment)
        if not folder.is_dir():
            known = ", ".join(self.assignments())
            where = (
                f"known: {known}"
                if known
                else f"no assignments at all in {self.root / self.source}: is {self.root} the "
                "course root? Run from it or pass --root"
            )
            raise ValueError(f"no assignment {assignment!r}: {folder} does not exist ({where})")
        names = sorted(p.stem for p in folder.glob("*.ipynb"))
        if not names:
            raise ValueError(f"assignment {assignment!r} has no notebook in {folder}")
        return names

    def students(self, assignment: str) -> list[str]:
        """Students with a submission of ``assignment`` in ``submitted/``."""
        top = self.root / self.submitted
        if not top.is_dir():
            return []
        return sorted(
            (p.name for p in top.iterdir() if (p / assignment).is_dir()), key=student_sort_key
        )

    # -- nbgrader ----------------------------------------------------------------------------
    def nbgrader_config(self, **sections: dict) -> Config:
        """nbgrader's configuration for this course: the one source of truth, loaded by the
        root ``nbgrader_config.py`` and used by every ``normedu`` command and test.

        ``sections`` add or override entries, e.g. ``Execute={"timeout": 10}``.
        """
        c = Config()
        c.CourseDirectory.root = str(self.root)
        c.CourseDirectory.course_id = self.course_id
        c.CourseDirectory.source_directory = self.source
        c.CourseDirectory.release_directory = self.release
        c.CourseDirectory.submitted_directory = self.submitted
        c.CourseDirectory.autograded_directory = self.autograded
        c.CourseDirectory.feedback_directory = self.feedback
        c.CourseDirectory.db_url = self.db_url
        # Inside the course, created here: Formgrader warns when the exchange is missing.
        with contextlib.suppress(OSError):
            self.exchange_dir.mkdir(parents=True, exist_ok=True)
        c.Exchange.root = str(self.exchange_dir)
        # A deleted test cell must be put back and run, not silently scored 0.
        c.OverwriteCells.add_missing_cells = True
        # Kernels over Unix sockets: no TCP port races between parallel kernels and no
        # "running over TCP without encryption" warning per kernel.
        c.KernelManager.transport = "ipc"
        c.KernelManager.ip = kernel_socket_prefix(self.root)
        # Feedback never shows hidden tests, nor tracebacks through the grading code: the
        # first step shortens error outputs, ClearHiddenTests removes the hidden regions.
        c.GenerateFeedback.preprocessors = list(FEEDBACK_PREPROCESSORS)
        # ... and Formgrader's "Generate Feedback" (and stock `nbgrader generate_feedback`)
        # finish each page as `normedu feedback` does: status box, offline math.
        c.GenerateFeedback.post_convert_hook = FEEDBACK_HOOK
        # Every HTML view of a hand-in (Formgrader's grading view, feedback pages) shows it
        # inert: no script of the student's runs there (normedu.course.inert says how).
        c.HTMLExporter.sanitize_html = True
        c.HTMLExporter.filters = dict(INERT_FILTERS)
        c.HTMLExporter.preprocessors = [INERT_PREPROCESSOR]
        # Formgrader's "Autograde" button (and stock `nbgrader autograde`) would run student
        # code unconfined on this server: they refuse and name `normedu autograde`, which sets
        # its own steps (the sandboxed worker's notebook replayed into nbgrader).
        c.Autograde.autograde_preprocessors = [REFUSE_UNSANDBOXED]
        for section, values in sections.items():
            for key, value in values.items():
                setattr(c[section], key, value)
        return c

    def api(self, **sections: dict):
        """An ``nbgrader.apps.NbGraderAPI`` bound to this course (quiet logging)."""
        import logging

        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        ensure_alembic()
        config = self.nbgrader_config(**sections)
        coursedir = CourseDirectory(config=config)
        api = NbGraderAPI(coursedir=coursedir, config=config)
        api.log_level = logging.WARNING
        return api


#: nbgrader's feedback steps, in order (import paths, so that this module stays light).
FEEDBACK_PREPROCESSORS = (
    "nbgrader.preprocessors.GetGrades",
    "normedu.course.nbgrader_bridge.StudentTracebacks",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
)


#: nbconvert's template filters replaced by the inert ones (import paths: stays light).
INERT_FILTERS = {
    "clean_html": "normedu.course.inert.clean_html_filter",
    "markdown2html": "normedu.course.inert.InertMarkdown",
}
#: Run first by every HTMLExporter of the course: outputs cleaned, one line says what went.
INERT_PREPROCESSOR = "normedu.course.inert.InertHandIn"

#: Run by nbgrader after each student's feedback pages (an import path: stays light).
FEEDBACK_HOOK = "normedu.course.feedback.formgrader_hook"

#: The only step of nbgrader's own autograde in this course: a refusal that names the command.
REFUSE_UNSANDBOXED = "normedu.course.nbgrader_bridge.RefuseUnsandboxed"


def find_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` that holds ``nbgrader_config.py``, else
    ``start`` itself (where nbgrader would look)."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / "nbgrader_config.py").is_file():
            return folder
    return start


def kernel_socket_prefix(root: Path) -> str:
    """Absolute prefix of the Unix sockets of nbgrader's kernels for the course at ``root``.

    jupyter_client's default (``kernel-ipc``) is relative, and nbgrader's kernels start in the
    notebook's folder while the client stays in the course root: they would not meet. The
    prefix is short (a socket path must stay under 108 bytes) and per course; nbgrader runs
    one kernel at a time, so its kernels do not share sockets.
    """
    import hashlib

    from jupyter_core.paths import jupyter_runtime_dir

    tag = hashlib.sha256(str(root).encode()).hexdigest()[:10]
    folder = Path(jupyter_runtime_dir())
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
    return str(folder / f"normedu-{tag}")


def student_sort_key(student: str) -> tuple[str, str]:
    """Students sort case-insensitively (``alice`` before ``Frank_Miller``), ties by case."""
    return (student.casefold(), student)


def configure(c: Config, root: str | os.PathLike) -> None:
    """Fill nbgrader's config object ``c`` (the ``get_config()`` of ``nbgrader_config.py``)
    with the course at ``root``; see :meth:`Course.nbgrader_config`."""
    ensure_alembic()
    c.merge(Course.at(root).nbgrader_config())


def ensure_alembic() -> None:
    """Make nbgrader's two uses of alembic (its gradebook migrations) work and cost little.

    - Creating a gradebook records the newest migration's id, which nbgrader 0.9.6 asks of
      ``alembic heads`` run as a subprocess: a Python start that imports SQLAlchemy, about
      2.4 CPU-s for every new gradebook. :func:`alembic_head` reads the same id from
      nbgrader's migration folder in this process (about 0.2 CPU-s, once).
    - ``nbgrader db upgrade`` still runs the ``alembic`` executable, found on PATH: this
      Python's scripts folder goes first, so that calling ``.venv/bin/normedu`` (or starting
      JupyterLab) without activating the environment works.
    """
    import sys

    import nbgrader.api

    nbgrader.api.get_alembic_version = alembic_head
    scripts = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if scripts not in path.split(os.pathsep):
        os.environ["PATH"] = scripts + (os.pathsep + path if path else "")


@functools.cache
def alembic_head() -> str:
    """The id of nbgrader's newest gradebook migration, as ``alembic heads`` prints it."""
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    return ScriptDirectory(ALEMBIC_DIR).get_current_head()


def silence_nbgrader_warnings() -> None:
    """nbgrader 0.9.6 emits SQLAlchemy and traitlets deprecation warnings on every gradebook
    use; they say nothing about the submissions, so keep them out of the command output."""
    import warnings

    warnings.filterwarnings("ignore", module=r"nbgrader(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(traitlets|jupyter)")
    try:
        from nbformat.warnings import MissingIDFieldWarning

        warnings.filterwarnings("ignore", category=MissingIDFieldWarning)
    except ImportError:  # pragma: no cover - older nbformat
        pass
    try:
        from sqlalchemy.exc import SAWarning

        warnings.filterwarnings("ignore", category=SAWarning)
    except ImportError:  # pragma: no cover - sqlalchemy comes with nbgrader
        pass
