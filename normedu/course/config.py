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

The functions here never import torch: the grading pipeline stays light.
"""

from __future__ import annotations

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
        """The course rooted at ``root``; by default the nearest folder, from the current
        directory upwards, that holds an ``nbgrader_config.py`` (else the current directory)."""
        if root is None:
            here = Path.cwd().resolve()
            for folder in (here, *here.parents):
                if (folder / "nbgrader_config.py").is_file():
                    root = folder
                    break
            else:
                root = here
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
            known = ", ".join(self.assignments()) or "none"
            raise ValueError(
                f"no assignment {assignment!r}: {folder} does not exist (known: {known})"
            )
        names = sorted(p.stem for p in folder.glob("*.ipynb"))
        if not names:
            raise ValueError(f"assignment {assignment!r} has no notebook in {folder}")
        return names

    def students(self, assignment: str) -> list[str]:
        """Students with a submission of ``assignment`` in ``submitted/``."""
        top = self.root / self.submitted
        if not top.is_dir():
            return []
        return sorted(p.name for p in top.iterdir() if (p / assignment).is_dir())

    # -- nbgrader ----------------------------------------------------------------------------
    def nbgrader_config(self, **sections: dict) -> Config:
        """nbgrader's configuration for this course, built here rather than read from
        ``nbgrader_config.py`` so that commands behave the same from any working directory.

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
        c.Exchange.root = str(self.root / "_build" / "exchange")
        # A deleted test cell must be put back and run, not silently scored 0.
        c.OverwriteCells.add_missing_cells = True
        for section, values in sections.items():
            for key, value in values.items():
                setattr(c[section], key, value)
        return c

    def api(self, **sections: dict):
        """An ``nbgrader.apps.NbGraderAPI`` bound to this course (quiet logging)."""
        import logging

        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        ensure_tools_on_path()
        config = self.nbgrader_config(**sections)
        coursedir = CourseDirectory(config=config)
        api = NbGraderAPI(coursedir=coursedir, config=config)
        api.log_level = logging.WARNING
        return api


def ensure_tools_on_path() -> None:
    """nbgrader runs ``alembic`` (gradebook migrations) as a subprocess found on PATH: put this
    Python's scripts folder first, so that calling ``.venv/bin/normedu`` without activating
    the environment works."""
    import sys

    scripts = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if scripts not in path.split(os.pathsep):
        os.environ["PATH"] = scripts + (os.pathsep + path if path else "")


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
