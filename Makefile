# Handoff. `make test` is what CI runs (.ci/run); `make demo` is the tour.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: browser setup up down status lint schemas-check test test-unit test-citus demo bench bench-hop bench-peer bench-tracing bench-sync cluster chaos screenshots clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=python3.11)")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

browser:  ## Chromium for the browser tests (Debian's package)
	@scripts/ensure-chromium

setup: $(STAMP) browser  ## .venv with the project and its test tools, and Chromium

up: $(STAMP)  ## start the local stack (PostgreSQL, Kafka, schema registry)
	$(BIN)/handoff stack up

down: $(STAMP)  ## stop the local stack
	$(BIN)/handoff stack down

status: $(STAMP)
	$(BIN)/handoff stack status

lint: $(STAMP)  ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The AsyncAPI parser (npm; Node.js 18+), pinned by scripts/asyncapi/package-lock.json.
ASYNCAPI_STAMP := scripts/asyncapi/node_modules/.installed

$(ASYNCAPI_STAMP): scripts/asyncapi/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js 18+) is needed to validate docs/asyncapi.yaml: install Node.js"; exit 1; }
	cd scripts/asyncapi && npm ci --no-audit --no-fund --loglevel=error
	@touch $(ASYNCAPI_STAMP)

schemas-check: $(STAMP) $(ASYNCAPI_STAMP)  ## event schemas compatible; docs/asyncapi.yaml current and valid
	$(BIN)/handoff schemas check
	$(BIN)/handoff schemas asyncapi --check docs/asyncapi.yaml
	node scripts/asyncapi/validate.mjs docs/asyncapi.yaml

test: lint schemas-check up browser  ## the whole suite against the real stack
	$(BIN)/handoff db upgrade
	$(BIN)/pytest

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

# Handoff on Citus: a coordinator and two workers in a stack home of their own. Citus is
# not on the package registries: set HANDOFF_STACK_CITUS_SOURCE to a Citus source release
# (built once, e.g. ../shared/vendor/citus-14.0.1.tar.gz), or install Citus; without
# either, stack up says how to get it and this target fails (it never skips).
CITUS_HOME  ?= .handoff-citus
CITUS_TESTS ?= tests/citus tests/integration/contract tests/integration/consumers/test_guard.py \
	tests/integration/consumers/test_ordering.py tests/integration/effects \
	tests/integration/operate/test_audit.py \
	tests/integration/relay/test_relay.py tests/integration/relay/test_wakeups.py \
	tests/integration/operate/test_retention.py \
	tests/integration/operate/test_replay.py tests/integration/operate/test_backlog.py \
	tests/integration/operate/test_cli_json.py \
	tests/integration/tracker

test-citus: $(STAMP) $(ASYNCAPI_STAMP)  ## the Citus suite on a coordinator + 2 workers (needs Citus: see above)
	HANDOFF_HOME=$(CITUS_HOME) $(BIN)/handoff stack up --citus 2
	HANDOFF_HOME=$(CITUS_HOME) $(BIN)/handoff db upgrade
	HANDOFF_HOME=$(CITUS_HOME) HANDOFF_TEST_CITUS=1 $(BIN)/pytest $(CITUS_TESTS)

demo: $(STAMP)  ## stack up, migrations, a sample pipeline, the tracker on :8000
	$(BIN)/handoff demo

screenshots: $(STAMP) browser  ## pictures of the tracker's main pages into docs/screenshots/
	$(BIN)/python scripts/screenshots.py

bench: up
	$(BIN)/handoff db upgrade
	$(BIN)/handoff bench

HOP_ARGS ?=
bench-hop: up  ## the hop latency taken apart by segment, five runs (HOP_ARGS=--hop-rate 250)
	$(BIN)/handoff db upgrade
	$(BIN)/handoff bench hop --runs 5 --seconds 20 $(HOP_ARGS)

bench-tracing: up  ## what tracing costs: emits/s and the hop with it off, sampling 0 and 100 %, three rounds
	$(BIN)/handoff db upgrade
	$(BIN)/handoff bench tracing --rounds 3 --clients 8 --seconds 10

PEER_ARGS ?=
bench-peer: up  ## handoff relay beside Debezium's outbox connector, three runs (PEER_ARGS=--peer-rows 1000000)
	$(BIN)/handoff db upgrade
	$(BIN)/handoff bench peer $(PEER_ARGS)

# The clustered stack (a two-node Patroni PostgreSQL, three brokers) in a home of its own.
CLUSTER_HOME ?= .handoff-cluster
CHAOS_ARGS   ?=

cluster: $(STAMP)  ## the clustered stack: Patroni PostgreSQL (2 nodes), 3 Kafka brokers
	HANDOFF_HOME=$(CLUSTER_HOME) $(BIN)/handoff stack up --pg-nodes 2 --brokers 3
	HANDOFF_HOME=$(CLUSTER_HOME) $(BIN)/handoff db upgrade

chaos: cluster  ## kill processes and nodes under load on the clustered stack (CHAOS_ARGS=--for 300 --seed 7)
	HANDOFF_HOME=$(CLUSTER_HOME) $(BIN)/handoff chaos $(CHAOS_ARGS)

bench-sync: cluster  ## what strict synchronous replication costs (emits with and without)
	HANDOFF_HOME=$(CLUSTER_HOME) $(BIN)/handoff bench sync --clients 8 --seconds 10

clean: down
	-HANDOFF_HOME=$(CLUSTER_HOME) $(BIN)/handoff stack down
	-HANDOFF_HOME=$(CITUS_HOME) $(BIN)/handoff stack down
	rm -rf .handoff $(CLUSTER_HOME) $(CITUS_HOME)
