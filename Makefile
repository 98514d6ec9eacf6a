# Every target does its own set-up on a fresh machine: it creates .venv/ at the
# repository root and installs the project (with test extras) into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# import-linter in an environment of its own (pyproject.toml's dependency group says why);
# it reads the packages from the checkout.
LINT_IMPORTS := PYTHONPATH=. $(VENV)/lint/bin/lint-imports

# Two pytest workers, one per core: the suite waits on processes and sockets a third of
# the time. Files stay whole on a worker, and the Spark files share one (tests/conftest.py).
WORKERS := -n 2

.PHONY: demo test soak lint bench clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/system_deps.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/system_deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	test -x $(VENV)/lint/bin/python || $(PYTHON) -m venv --without-pip $(VENV)/lint
	$(BIN)/python -m pip --python $(VENV)/lint/bin/python install --quiet --group lint
	# Bytecode once: every broker, client and test process then loads it instead of
	# compiling the sources again (as it would where PYTHONDONTWRITEBYTECODE is set).
	$(BIN)/python -m compileall -q routing topologies broker client monitor hop bench tests
	touch $(STAMP)

# The main job: the thesis' 15-broker case study replayed, characterized with Spark,
# predicted and measured; ends with the report's path and its accuracy sentence.
demo: $(STAMP)
	rm -rf runs/siena15
	$(BIN)/hop validate topologies/siena15.toml --out runs/siena15 --scenario s1 --quick --repeats 2 --disturbed-retries 0

# Tests that need a tool or kernel feature fail when it is missing; HOP_TEST_SKIP=netns,...
# skips them instead (docs/testing.md).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(LINT_IMPORTS)
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not slow" $(WORKERS) --durations=15

soak: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(LINT_IMPORTS)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
