#!/usr/bin/env bash
# JupyterLab on the course from the project environment: what `make lab` runs, and what
# tests/test_lab.py starts (adding --no-browser, a port and a token). Extra arguments go to
# `jupyter lab`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(cd "${VENV:-.venv}" && pwd)"
# nbgrader's Formgrader and Validate run the environment's tools (alembic for gradebook
# migrations) by name, from PATH: without this they fail when .venv is not activated.
export PATH="$venv/bin:$PATH"
# The course root of normedu.paths: the chapters find results/ and the ledger here, wherever
# their kernel starts.
export NORMEDU_ROOT="$PWD"
# --allow-root: containers and JupyterHub images run as root, and JupyterLab refuses to start
# as root without it. --notebook-dir=.: the file browser opens on the course (book/,
# exercises/) and nbgrader finds nbgrader_config.py in the server's working directory.
exec "$venv/bin/jupyter" lab --notebook-dir=. --allow-root "$@"
