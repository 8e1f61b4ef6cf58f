# Every target bootstraps .venv (idempotently) and the system tools it needs.
#   make layers ARGS="--duration 5"   the main job: bench layers (ARGS=--wsgi adds bjoern)
#   make test                         the whole test suite (what CI runs)
#   make docs / make serve-docs       the tutorial site
#   make workshop-check               a student's setup, no root needed (lessons/workshop.md)
#   make wheelhouse / make venv OFFLINE=1   prepare, then install without network

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
TOOLS  := scripts/ensure-tools.sh
# Every install is pinned to constraints.txt (`make constraints` regenerates it), so a class
# gets the versions the lessons were tested with. OFFLINE=1 installs from wheelhouse/ only.
CONSTRAINTS := constraints.txt
PIP_PINS    := $(if $(wildcard $(CONSTRAINTS)),-c $(CONSTRAINTS))
PIP_OFFLINE := $(if $(filter 1,$(OFFLINE)),--no-index --find-links wheelhouse)

.PHONY: venv tools layers bench test lint docs serve-docs exercise clean
.PHONY: workshop-check workshop-tools constraints wheelhouse

$(STAMP): pyproject.toml $(wildcard $(CONSTRAINTS))
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python >= 3.11" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: Python >= 3.11 is required ($(PYTHON) is older)" >&2; exit 1; }
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV) || { echo "error: could not create $(VENV): install python3-venv" >&2; exit 1; }
	$(if $(PIP_OFFLINE),,$(PY) -m pip install -q --upgrade pip)
	$(PY) -m pip install -q $(PIP_OFFLINE) $(PIP_PINS) -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

tools:
	@$(TOOLS) wrk curl

# h2spec, for tests/test_h2spec.py: built with Go when Go is present; otherwise those tests skip.
.PHONY: h2spec
test: h2spec
h2spec:
	@$(TOOLS) h2spec

# Autobahn|Testsuite, for the conformance suite's autobahn row and `bench autobahn`: installed
# with Python 2.7 when one is present (pyenv's is found); otherwise the Autobahn tests skip.
.PHONY: autobahn
test: autobahn
autobahn:
	@$(TOOLS) autobahn

# With --wsgi in ARGS: bjoern too, built from source against libev. A failed build is not an
# error: bench layers then skips bjoern's rows with a note.
layers: $(STAMP) tools
ifneq ($(findstring --wsgi,$(ARGS)),)
	@$(PY) -c 'import _bjoern' 2>/dev/null || { $(TOOLS) libev cc && $(PY) -m pip install -q -e '.[bjoern]'; } \
		|| echo "note: bjoern could not be installed: its rows will be skipped" >&2
endif
	$(VENV)/bin/bench layers $(ARGS)

# h2load (the nghttp2-client package), for `bench h2` and tests/test_bench_h2.py's smoke run.
.PHONY: h2load
test: h2load
h2load:
	@$(TOOLS) h2load

# bench autobahn runs Autobahn|Testsuite (Python 2.7); bench h2 drives h2load besides wrk; bench servers needs redis-server; bench load's bjoern
# rows need bjoern (built against libev; a failed build is not an error: its rows are then
# skipped with the reason).
bench: $(STAMP) tools
ifneq ($(filter h2,$(ARGS)),)
	@$(TOOLS) h2load
endif
ifneq ($(filter autobahn,$(ARGS)),)
	@$(TOOLS) autobahn
endif
ifneq ($(filter servers,$(ARGS)),)
	@$(TOOLS) redis-server
endif
ifneq ($(filter load,$(ARGS)),)
	@$(PY) -c 'import _bjoern' 2>/dev/null || { $(TOOLS) libev cc && $(PY) -m pip install -q -e '.[bjoern]'; } \
		|| echo "note: bjoern could not be installed: its rows will be skipped" >&2
endif
	$(VENV)/bin/bench $(ARGS)

# The suite runs on two processes (pytest-xdist), one per core: every test uses its own
# ephemeral ports and servers, and 2 workers halve the wall time on a 2-core machine.
# TEST_JOBS=0 runs it in one process.
TEST_JOBS ?= 2
test: $(STAMP)
	@$(TOOLS) wrk curl chromium redis-server
	$(PY) -m pytest -n $(TEST_JOBS) $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check toyservers apps bench tests scripts lessons
	$(VENV)/bin/mypy

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

serve-docs: $(STAMP)
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:8001

# One line per failing check, with its hint (lessons/exercises/conftest.py), no tracebacks.
exercise: export PYTEST_ADDOPTS := --tb=no -rN
exercise: $(STAMP)
	@[ -n "$(N)" ] || { echo "usage: make exercise N=<lesson number, e.g. 1 or 3b>" >&2; exit 2; }
	$(PY) -m pytest -q lessons/exercises/$$(echo $(N) | sed -E 's/^0*([0-9])/0\1/; s/^0([0-9]{2})/\1/')-* -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info site wheelhouse .pytest_cache .mypy_cache .ruff_cache

# The workshop kit (lessons/workshop.md). workshop-check needs no root: venv, imports, a
# server answering on 127.0.0.1, one exercise's solution passing. workshop-tools is the
# root-only part (wrk for the benchmarks, curl, chromium for the site test).
workshop-check: $(STAMP)
	$(PY) scripts/workshop_check.py

# Root-only when something is missing: ensure-tools installs with apt-get as root, and
# otherwise names the packages to install.
workshop-tools:
	$(TOOLS) wrk curl chromium

# The pinned set: every package in the venv but the project itself and bjoern (an optional
# extra built from source).
constraints: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | grep -viE '^(toyservers|bjoern)==' > $(CONSTRAINTS)

# Wheels of the pinned set, plus what pip needs to build the project, for this platform and
# Python; copy wheelhouse/ to the classroom and run `make venv OFFLINE=1` there.
wheelhouse: $(STAMP)
	$(PY) -m pip download -q -d wheelhouse -r $(CONSTRAINTS) 'setuptools>=77' wheel

