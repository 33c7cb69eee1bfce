# Warden developer tasks. `make` alone lists them.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LINT_PATHS := services tests bench examples

# `make run CONFIG=path/to/warden.toml` uses that config file instead of the default one.
CONFIG ?=
CONFIG_ARG := $(if $(CONFIG),--config $(CONFIG))

.DEFAULT_GOAL := help
.PHONY: help install run demo test test-unit lint bench bench-quick clean distclean

help: ## list the targets
	@echo "Warden make targets:"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "} {printf "  %-12s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv and install Warden with its dev tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstalls only when pyproject.toml changes (the install is editable, code changes need none).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

run: install ## write a config if there is none, migrate, start every service (http://127.0.0.1:8080)
	$(BIN)/warden init $(CONFIG_ARG)
	$(BIN)/warden db upgrade $(CONFIG_ARG)
	$(BIN)/warden run all $(CONFIG_ARG)

demo: install ## everything against a 4-host simulated fleet over SSH, live GPUs in the terminal
	$(BIN)/warden demo

test: install ## the whole test suite (needs RabbitMQ and PostgreSQL; see .ci/run)
	$(BIN)/pytest -q

test-unit: install ## unit tests only (no servers needed)
	$(BIN)/pytest -q tests/unit

lint: install ## ruff (lint + format check) and mypy
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy

bench: install ## run every benchmark in bench/
	@for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

bench-quick: install ## run every benchmark with --quick
	@for f in bench/*.py; do echo "== $$f --quick"; $(BIN)/python $$f --quick || exit 1; done

clean: ## remove caches and build output (keeps .venv)
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info .data/demo

distclean: clean ## clean, and remove .venv too
	rm -rf $(VENV)
