# evalkit: `make demo` and `make test` work on a fresh machine with only Python 3.11.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.demo-stamp

.PHONY: install demo test lint typecheck format bench notebook docs docs-serve clean

# Re-install only when the project's dependency list changes. The demo needs only the package
# itself; the tests also need the test tools, Ray (about four times the download) and pyiceberg
# (the shared store's tests). --no-compile: pip would byte-compile every module of every
# dependency (about 130 MB and a fifth of the install time); Python compiles the modules the
# demo actually imports on first use instead.
$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -e .
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(BIN)/python -m pip install -q -e '.[test,ray,shared,docs]'
	touch $(STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/evalkit demo run --db data/demo.duckdb --out reports

# The documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link, a missing page
# or a reference entry that does not render fails the build. A test builds it too.
# MkDocs plugins print a banner about MkDocs 2 on every build; these variables turn it off.
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
docs: $(STAMP)
	$(DOCS_ENV) $(BIN)/python -m mkdocs build --strict

# The site on http://127.0.0.1:8000, rebuilt on every change (loopback only).
docs-serve: $(STAMP)
	$(DOCS_ENV) $(BIN)/python -m mkdocs serve --strict --dev-addr 127.0.0.1:8000

# Three pytest-xdist workers, each given whole test files (--dist loadfile: a module's shared
# set-up, such as its demo server or scaffolded project, runs once). Most slow tests are
# CPU-bound (evalkit CLI subprocesses, papermill kernels), but about a quarter of two workers'
# time went to waits (Ray start-up, rate-limit windows, killed-run legs, demo latencies): on two
# cores a third worker fills them (measured: 4 min 19-38 s against 5 min 2 s; a fourth spent 15 %
# more CPU for a slower run). `make test TEST_WORKERS=0` runs the suite in this one process.
# Files go to the workers in collection order, which tests/conftest.py starts with the slowest
# files (xdist's own reorder, files with most tests first, would leave the few-test,
# minutes-long files for last).
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $${TEST_WORKERS:-3} --dist loadfile \
		--no-loadscope-reorder

lint: $(STAMP)
	$(BIN)/ruff check evalkit tests bench docs
	$(BIN)/ruff format --check evalkit tests bench docs
	$(MAKE) typecheck

# mypy on the package with pyproject.toml's [tool.mypy]: defaults everywhere, strict on stats/
# and compare/. .ci/run runs it before the suite.
typecheck: $(STAMP)
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format evalkit tests bench docs
	$(BIN)/ruff check --fix evalkit tests bench docs

bench: $(STAMP)
	for script in bench/bench_*.py; do $(BIN)/python $$script || exit 1; done

# Jupyter itself is only needed to open the notebooks by hand (tests run them with papermill).
notebook: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[notebook]'
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf $(VENV) reports site .mypy_cache data/*.duckdb data/*.duckdb.wal
