"""``python -m normedu.bench``: see :func:`normedu.bench.cli.main`."""

from .cli import main

raise SystemExit(main())
