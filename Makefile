# hetsim: two commands do all set-up on a fresh machine.
#   make demo   creates .venv, installs hetsim, runs the quickstart scenario
#   make test   creates .venv, installs the dev extras, runs the whole suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
PYTEST_WORKERS ?= 2
# setuptools prints a notice on every editable install of a flat layout ("folders in your
# working directory with the same name as your package ..."): here that folder, hetsim/,
# is the package itself, so the notice is silenced.
PIP := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip

.PHONY: demo test lint typecheck check bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e .
	touch $@

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[dev]'
	touch $(STAMP) $@

demo: $(STAMP)
	$(BIN)/hetsim run scenarios/quickstart.yaml --out results/quickstart --trace results/quickstart/trace.json

test: $(DEV_STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal -q -m 'slow or not slow'

lint: $(DEV_STAMP)
	$(BIN)/ruff check hetsim simulator devices workloads schedulers tests benchmarks
	$(BIN)/ruff format --check hetsim simulator devices workloads schedulers tests benchmarks

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python benchmarks/engine.py

clean:
	rm -rf $(VENV) results .pytest_cache .mypy_cache .ruff_cache
