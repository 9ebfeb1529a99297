"""nbgrader configuration of the normedu course (nbgrader 0.9.6).

nbgrader (and Formgrader in JupyterLab) reads this file from the current directory: run
nbgrader from the repository root. The settings themselves live in ONE place,
``normedu.course.config.Course.nbgrader_config``, which the ``normedu`` commands and the tests
use too.
"""

import os
import sys

_root = os.path.dirname(os.path.abspath(__file__))
if _root not in sys.path:  # the course's own normedu, also when nbgrader runs from elsewhere
    sys.path.insert(0, _root)

from normedu.course.config import configure  # noqa: E402

configure(get_config(), _root)  # noqa: F821  (get_config is injected by traitlets)
