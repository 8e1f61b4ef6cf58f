# Every target bootstraps .venv (idempotently) and the system tools it needs.
#   make layers ARGS="--duration 5"   the main job: bench layers (ARGS=--wsgi adds bjoern)
#   make test                         the whole test suite (what CI runs)
#   make docs / make serve-docs       the tutorial site

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
TOOLS  := scripts/ensure-tools.sh

.PHONY: venv tools layers bench test lint docs serve-docs exercise clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python >= 3.11" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: Python >= 3.11 is required ($(PYTHON) is older)" >&2; exit 1; }
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV) || { echo "error: could not create $(VENV): install python3-venv" >&2; exit 1; }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

tools:
	@$(TOOLS) wrk curl

# h2spec, for tests/test_h2spec.py: built with Go when Go is present; otherwise those tests skip.
.PHONY: h2spec
test: h2spec
h2spec:
	@$(TOOLS) h2spec

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

# bench h2 drives h2load besides wrk.
bench: $(STAMP) tools
ifneq ($(filter h2,$(ARGS)),)
	@$(TOOLS) h2load
endif
	$(VENV)/bin/bench $(ARGS)

test: $(STAMP)
	@$(TOOLS) wrk curl
	$(PY) -m pytest $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check toyservers apps bench tests
	$(VENV)/bin/mypy

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

serve-docs: $(STAMP)
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:8001

exercise: $(STAMP)
	@[ -n "$(N)" ] || { echo "usage: make exercise N=<lesson number>" >&2; exit 2; }
	$(PY) -m pytest -q lessons/exercises/$$(printf %02d $$(echo $(N) | sed 's/^0*//'))-* -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info site .pytest_cache .mypy_cache .ruff_cache
