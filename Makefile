# normedu: one entry point for readers, students, instructors and CI.
#   make book   build the website into _build/html   (make serve to open it)
#   make test   lint + every test (book build, notebooks, nbgrader, browser)
#   make lab    JupyterLab on the chapters and exercises
# Every target creates/updates the project-local environment .venv first.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8000
# Set KEEP_TORCH=1 to keep a CUDA torch you installed into .venv yourself.
KEEP_TORCH ?=
# Extra pytest arguments, e.g. make test PYTEST_ARGS="-m 'not slow'"
PYTEST_ARGS ?=

.PHONY: book serve test test-fast lint lab browser release release-check grade-bench bench clean help

help:
	@sed -n '2,5p' Makefile

$(STAMP): requirements-lock.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if [ -n "$(KEEP_TORCH)" ]; then grep -v '^torch==' requirements-lock.txt > $(VENV)/req.txt; \
	 else cp requirements-lock.txt $(VENV)/req.txt; fi
	$(PY) -m pip install --disable-pip-version-check -q -r $(VENV)/req.txt
	$(PY) -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 > /dev/null
	@touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "Built: open _build/html/index.html, or run 'make serve' and visit http://127.0.0.1:$(PORT)"

serve: book
	$(PY) -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

lint: $(STAMP)
	$(VENV)/bin/ruff check normedu tests book
	$(VENV)/bin/ruff format --check normedu tests

# Chromium for the browser tests. As root (CI) it is installed from Debian's packages;
# elsewhere the browser tests skip with a message, except under CI=true where they fail.
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	 elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	   echo "Installing Chromium for the browser tests (apt-get)"; \
	   (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) > /tmp/normedu-apt.log 2>&1 \
	   || { echo "apt-get install chromium failed, see /tmp/normedu-apt.log"; exit 1; }; \
	 else echo "Chromium not found: browser tests will be skipped (install the 'chromium' package to run them)"; fi

test: $(STAMP) browser lint
	$(PY) -m pytest -n 2 --dist loadgroup --durations=15 $(PYTEST_ARGS)

# The quick loop while developing: no book build, no nbgrader, no browser.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow and not browser" $(PYTEST_ARGS)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=.

release: $(STAMP)
	$(VENV)/bin/normedu release

# exercises/ must be exactly what nbgrader generates from solutions/ (also a test).
release-check: $(STAMP)
	$(VENV)/bin/normedu release --check

# Grading speed: a synthetic 40-student cohort, sequential vs all cores.
grade-bench: $(STAMP)
	$(VENV)/bin/normedu grade-bench layernorm

# Normalization kernels: quick benchmark of this device (results in bench-out/).
bench: $(STAMP)
	$(PY) -m normedu.bench --quick

clean:
	rm -rf _build
