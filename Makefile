# Handoff. `make test` is what CI runs (.ci/run); `make demo` is the tour.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup up down status lint schemas-check test test-unit demo bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=python3.11)")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

setup: $(STAMP)  ## create or reuse .venv with the project and its test tools

up: setup  ## start the local stack (PostgreSQL, Kafka, schema registry)
	$(BIN)/handoff stack up

down: setup  ## stop the local stack
	$(BIN)/handoff stack down

status: setup
	$(BIN)/handoff stack status

lint: setup  ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

schemas-check: setup  ## the newest event schema reads every retained version
	$(BIN)/handoff schemas check

test: lint schemas-check up  ## the whole suite against the real stack
	$(BIN)/handoff db upgrade
	$(BIN)/pytest

test-unit: setup
	$(BIN)/pytest tests/unit

demo: up  ## stack up, migrations, then where everything is
	$(BIN)/handoff db upgrade
	$(BIN)/handoff demo

bench: up
	$(BIN)/handoff db upgrade
	$(BIN)/handoff bench

clean: down
	rm -rf .handoff
