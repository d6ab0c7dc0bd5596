# Self-documenting: every target with a "##" comment shows up in `make help`.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
AIRFLOW_VENV ?= .venv-airflow
DAGSTER_VENV ?= .venv-dagster
SAIL_VENV ?= .venv-sail
STORE ?= demo-store
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: help setup airflow-setup dagster-setup sail-setup dist run test test-unit cluster-test mutation mutation-sample soak bench bench-quick bench-codec lint clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-14s %s\n", $$1, $$2}'

# An editable install serves the package through an import hook, which pkgutil.iter_modules (how Spark discovers a
# data source: a top-level pyspark_* module) does not see; a folder on the path holding only that module is seen.
define spark_discovery
	mkdir -p $(1)/spark-discovery && ln -sf $(CURDIR)/pyspark_compaction.py $(1)/spark-discovery/
	$(1)/bin/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], \
		'pyspark_compaction_discovery.pth').write_text('$(abspath $(1))/spark-discovery\n')"
endef

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(call spark_discovery,$(VENV))
	$(BIN)/compaction warm-up
	@touch $@

setup: $(BIN)/.installed ## create .venv and install the project with its dev tools

dist: setup ## build the wheel that workers install (dist/compaction-<version>-py3-none-any.whl)
	rm -rf build dist/compaction-*.whl  # no stale module (setuptools keeps build/) and one wheel to install
	$(BIN)/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .

$(AIRFLOW_VENV)/.installed: dags/requirements.txt
	$(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/pip install --quiet -r dags/requirements.txt
	@touch $@

airflow-setup: $(AIRFLOW_VENV)/.installed ## create .venv-airflow with Airflow 3 for the DAG's test (apart from .venv)

$(DAGSTER_VENV)/.installed: dagster-defs/requirements.txt
	$(PYTHON) -m venv $(DAGSTER_VENV)
	$(DAGSTER_VENV)/bin/pip install --quiet --upgrade pip
	$(DAGSTER_VENV)/bin/pip install --quiet -r dagster-defs/requirements.txt
	@touch $@

dagster-setup: $(DAGSTER_VENV)/.installed ## create .venv-dagster with Dagster for the example definitions' test (apart from .venv)

$(SAIL_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(SAIL_VENV)
	$(SAIL_VENV)/bin/pip install --quiet --upgrade pip
	$(SAIL_VENV)/bin/pip install --quiet -e '.[sail]'
	$(call spark_discovery,$(SAIL_VENV))
	@touch $@

sail-setup: $(SAIL_VENV)/.installed ## create .venv-sail: the project with Sail and the pyspark it runs (4.0-4.2), apart from .venv

$(BIN)/.bench-installed: $(BIN)/.installed
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@touch $@

run: setup ## generate a demo store under ./demo-store (once), compact it with local Spark, show before/after
	@if [ ! -d "$(STORE)" ]; then \
		$(BIN)/compaction generate $(STORE) --topics orders,payments --partitions 4 --records 400000 \
			--keys 40000 --segment-records 10000 --tombstone-ratio 0.02 --keyless-ratio 0.001 --seed 42; fi
	@echo "== before"; $(BIN)/compaction status $(STORE)
	$(BIN)/compaction run $(STORE) --conf conf/local.toml --report out/last-run.json
	@echo "== after"; $(BIN)/compaction status $(STORE)
	$(BIN)/compaction verify $(STORE) --metadata-only > /dev/null && echo "verify: ok"

test: setup airflow-setup dagster-setup sail-setup ## run every test: unit, Spark, Spark Connect, Sail, S3 (moto), the cluster, the DAG, Dagster
	$(BIN)/python -m pytest

test-unit: setup ## the fast part, tests/unit: no Spark, no server (well under a minute)
	$(BIN)/python -m pytest tests/unit

cluster-test: setup ## only the standalone-cluster test (master + 2 workers and S3 on 127.0.0.1)
	$(BIN)/python -m pytest -m cluster -s

$(BIN)/.mutation-installed: $(BIN)/.installed
	$(BIN)/pip install --quiet -e '.[dev,mutation]'
	@touch $@

MUTATION_FLOOR ?= 0.95
mutation: $(BIN)/.mutation-installed ## mutation score of the code that decides (rules, winners, planner, paths, layout, batches, commits) against the unit tests (mutmut; half an hour)
	rm -rf mutants
	$(BIN)/mutmut run --max-children 2
	$(BIN)/python tests/mutation/score.py --floor $(MUTATION_FLOOR)

MUTATION_SAMPLE ?= 0.1
mutation-sample: $(BIN)/.mutation-installed ## a tenth of make mutation's mutants, drawn by the commit (minutes); fails on a survivor nobody argued
	rm -rf mutants
	@# Generates every mutant and maps each to its tests, then stops: mutmut refuses a filter that names no mutant.
	-$(BIN)/mutmut run 'compaction.no-such-mutant' > mutants.log 2>&1
	$(BIN)/python tests/mutation/score.py --pick $(MUTATION_SAMPLE) --seed "$$(git rev-parse HEAD 2>/dev/null || echo 0)" > mutants/sample.txt
	$(BIN)/mutmut run --max-children 2 $$(cat mutants/sample.txt)
	$(BIN)/python tests/mutation/score.py --only mutants/sample.txt

SOAK_MINUTES ?= 30
soak: setup ## appenders and the cleaner side by side for SOAK_MINUTES (default 30), verify after each cycle
	$(BIN)/python scripts/soak.py --minutes $(SOAK_MINUTES)

bench: $(BIN)/.bench-installed sail-setup bench-codec ## benchmark S1-S8, plan-commit (the job on Spark and on Sail) vs DuckDB, Polars, PySpark SQL, the floors; hours, ~12 GB free (bench/results/latest.*)
	$(BIN)/python bench/harness.py

bench-quick: $(BIN)/.bench-installed sail-setup ## the same harness at small sizes, one run each, no S4 (about 10 minutes)
	$(BIN)/python bench/kafka_codec.py --batches 16 --repeat 3 --out out/bench-quick
	$(BIN)/python bench/harness.py --quick

bench-codec: $(BIN)/.bench-installed ## Kafka batch codec MB/s vs kafka-python, one core (bench/results/kafka_codec.*)
	$(BIN)/python bench/kafka_codec.py --codecs none,gzip,snappy,lz4,zstd

lint: setup ## ruff (lint and format), mypy (strict on compaction/), the layer contract (import-linter), dead code (vulture)
	$(BIN)/ruff check compaction tests bench jobs dags dagster-defs scripts pyspark_compaction.py
	$(BIN)/ruff format --check compaction tests bench jobs dags dagster-defs scripts pyspark_compaction.py
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/vulture compaction .vulture-allow.py --min-confidence 60

clean: ## remove the demo store, reports, packages and caches (keeps the virtualenvs)
	rm -rf $(STORE) out dist build compaction.egg-info .pytest_cache .mypy_cache .ruff_cache mutants mutants.log
