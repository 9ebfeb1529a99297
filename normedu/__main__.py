"""``python -m normedu``: the same as the ``normedu`` command (see :mod:`normedu.cli`)."""

import sys

from .cli import main

sys.exit(main())
