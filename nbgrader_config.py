"""nbgrader configuration for the normedu course (nbgrader 0.9.6).

nbgrader reads this file from the current directory, so run nbgrader (or `normedu ...`)
from the repository root. solutions/ is the instructor source, exercises/ the student release.
"""

import os

c = get_config()  # noqa: F821  (injected by traitlets)

_root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = _root
c.CourseDirectory.course_id = "normedu"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(_root, "gradebook.db")
# Without this nbgrader probes /srv/nbgrader/exchange; the course runs from the repo.
c.Exchange.root = os.path.join(_root, "_build", "exchange")
# A student who deletes a read-only test cell must not escape its points: autograde puts the
# instructor's cell back (and it fails) instead of silently scoring 0 for a missing cell.
c.OverwriteCells.add_missing_cells = True
# Feedback HTML must never show hidden tests.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "nbgrader.preprocessors.ClearHiddenTests",
]
