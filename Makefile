# Self-documenting: every target with a "##" comment shows up in `make help`.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STORE ?= demo-store
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: help setup run test lint clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-14s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

setup: $(BIN)/.installed ## create .venv and install the project with its dev tools

run: setup ## generate a demo store under ./demo-store (once), compact it with local Spark, show before/after
	@if [ ! -d "$(STORE)" ]; then \
		$(BIN)/compaction generate $(STORE) --topics orders,payments --partitions 4 --records 400000 \
			--keys 40000 --segment-records 10000 --tombstone-ratio 0.02 --keyless-ratio 0.001 --seed 42; fi
	@echo "== before"; $(BIN)/compaction status $(STORE)
	$(BIN)/compaction run $(STORE) --conf conf/local.toml --report out/last-run.json
	@echo "== after"; $(BIN)/compaction status $(STORE)
	$(BIN)/compaction verify $(STORE) --metadata-only > /dev/null && echo "verify: ok"

test: setup ## run every test: unit, Spark, S3 (moto on 127.0.0.1)
	$(BIN)/python -m pytest

lint: setup ## ruff and mypy
	$(BIN)/ruff check compaction tests bench
	$(BIN)/mypy

clean: ## remove the demo store and caches (keeps .venv)
	rm -rf $(STORE) .pytest_cache .mypy_cache .ruff_cache
