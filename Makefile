# Every target bootstraps .venv (idempotently) and the system tools it needs.
#   make layers ARGS="--duration 5"   the main job: bench layers (ARGS=--wsgi adds bjoern;
#                                     ARGS="--count instructions" counts under valgrind)
#   make test                         the whole test suite (what CI runs)
#   make docs / make serve-docs       the tutorial site
#   make lesson-results               regenerate the figures the pages include (lessons/results/)
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

.PHONY: venv tools layers bench test lint docs serve-docs exercise clean lesson-results
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
# With --count in ARGS (--count instructions): valgrind, whose callgrind counts the instructions.
layers: $(STAMP) tools
ifneq ($(findstring --count,$(ARGS)),)
	@$(TOOLS) valgrind
endif
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

# bench autobahn runs Autobahn|Testsuite (Python 2.7); bench h2 drives h2load besides wrk;
# bench servers needs redis-server; bench cluster nginx and haproxy (installed without starting
# their system services, then run unprivileged); bench profile --profiler callgrind needs
# valgrind; bench load's bjoern rows need bjoern (built against libev; a failed build is not an
# error: its rows are then skipped with the reason). bench ws needs only cargo: it builds its
# load generator (bench/ws-load, Rust) on first use, and without cargo says so in one line.
bench: $(STAMP) tools
ifneq ($(filter h2,$(ARGS)),)
	@$(TOOLS) h2load
endif
ifneq ($(filter cluster,$(ARGS)),)
	@$(TOOLS) nginx haproxy
endif
ifneq ($(filter autobahn,$(ARGS)),)
	@$(TOOLS) autobahn
endif
ifneq ($(filter servers,$(ARGS)),)
	@$(TOOLS) redis-server
endif
ifneq ($(filter callgrind,$(ARGS)),)
	@$(TOOLS) valgrind
endif
ifneq ($(filter load,$(ARGS)),)
	@$(PY) -c 'import _bjoern' 2>/dev/null || { $(TOOLS) libev cc && $(PY) -m pip install -q -e '.[bjoern]'; } \
		|| echo "note: bjoern could not be installed: its rows will be skipped" >&2
endif
	$(VENV)/bin/bench $(ARGS)

# The figures the pages include: every folder of lessons/results/ is written by one line below,
# and its results.json records that line's command (tests/test_page_bench_commands.py checks
# that they agree). About 55 minutes of load and every tool (h2load, redis-server, nginx and
# haproxy, bjoern for bench load's rows, cargo for the axum row and bench ws's load
# generator); run it on a quiet machine before a release and commit the folders. A reader's
# own runs, the pages' commands, write under results/ instead.
lesson-results: $(STAMP) tools
	@$(TOOLS) h2load redis-server nginx haproxy
	@$(PY) -c 'import _bjoern' 2>/dev/null || { $(TOOLS) libev cc && $(PY) -m pip install -q -e '.[bjoern]'; } \
		|| echo "note: bjoern could not be installed: its rows will be skipped" >&2
	$(VENV)/bin/bench layers --compare toy-raw,toy-h11,toy-httptools,uvicorn-h11 --output lessons/results/layers
	@$(TOOLS) valgrind
	$(VENV)/bin/bench layers --count instructions --compare toy-raw,toy-h11,toy-httptools,uvicorn-h11,toy-anyio --output lessons/results/layers-instructions
	$(VENV)/bin/bench profile --layer asgi --server uvicorn --duration 5 --no-html --output lessons/results/profile-asgi
	$(VENV)/bin/bench profile --layer fastapi --server uvicorn --duration 5 --no-html --output lessons/results/profile-fastapi
	$(VENV)/bin/bench layers --compare toy-anyio,toy-anyio-trio,toy-h11,uvicorn-h11 --compare-layers asgi --no-axum --no-bare --duration 5 --runs 3 --warmup 1 --output lessons/results/structured
	$(VENV)/bin/bench h2 --duration 3 --runs 3 --warmup 1 --output lessons/results/h2
	$(VENV)/bin/bench servers --duration 3 --runs 3 --warmup 1 --output lessons/results/servers
	$(VENV)/bin/bench servers --server toy-httptools --compare granian --endpoints longbody,pathsend --duration 3 --runs 3 --warmup 1 --output lessons/results/pathsend
	$(VENV)/bin/bench download --output lessons/results/download
	$(VENV)/bin/bench load --duration 3 --runs 3 --warmup 1 --output lessons/results/load
	$(VENV)/bin/bench concurrency --slow 1 --output lessons/results/concurrency
	$(VENV)/bin/bench workers --concurrency 1,10,40 --duration 3 --runs 3 --output lessons/results/workers
	$(VENV)/bin/bench cluster --duration 5 --runs 3 --warmup 1 --output lessons/results/cluster
	$(VENV)/bin/bench conformance --output lessons/results/conformance
	@$(TOOLS) autobahn
	$(VENV)/bin/bench autobahn --servers toy-raw,toy-h11,toy-httptools,toy-anyio,toy-anyio-trio --output lessons/results/autobahn-toys
	$(VENV)/bin/bench autobahn --servers uvicorn,uvicorn-wsproto,hypercorn,daphne,granian --output lessons/results/autobahn
	$(VENV)/bin/bench ws --duration 5 --runs 3 --warmup 1 --output lessons/results/ws

# The suite runs on two processes (pytest-xdist), one per core: every test uses its own
# ephemeral ports and servers, and 2 workers halve the wall time on a 2-core machine.
# TEST_JOBS=0 runs it in one process. --dist worksteal: each worker starts with half of the
# suite in order (the slow tests first: tests/conftest.py), and one that runs out takes half
# of what the other has not started, so both finish within one test of each other.
TEST_JOBS ?= 2
# valgrind, for the instruction-count regression test (tests/test_instruction_counts.py): it
# runs on Linux only, where the test must run; elsewhere that test skips.
VALGRIND := $(if $(filter Linux,$(shell uname -s)),valgrind)
# The run ends with its 25 slowest tests (--durations): where the 15 minutes go.
test: $(STAMP)
	@$(TOOLS) wrk curl chromium redis-server nginx haproxy $(VALGRIND)
	$(PY) -m pytest -n $(TEST_JOBS) $(if $(filter 0,$(TEST_JOBS)),,--dist worksteal) --durations=25 $(ARGS)

# The committed baselines of tests/test_instruction_counts.py (instructions per request of
# each toy server over bare's), counted again on this machine. Run it after a deliberate
# change to a server's cost, and commit tests/instruction_baselines.json.
.PHONY: instruction-baselines
instruction-baselines: $(STAMP)
	@$(TOOLS) valgrind
	$(PY) -m tests.test_instruction_counts

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

