# Warden developer tasks. `make` alone lists them.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-runtime
LINT_PATHS := services tests bench examples

# `make run CONFIG=path/to/warden.toml` uses that config file instead of the default one.
CONFIG ?=
CONFIG_ARG := $(if $(CONFIG),--config $(CONFIG))

.DEFAULT_GOAL := help
# The web UI (frontend/): npm packages, and the build the gateway serves.
NPM_STAMP := frontend/node_modules/.installed
UI_SOURCES := $(shell find frontend/src frontend/public -type f 2>/dev/null) \
	frontend/index.html frontend/vite.config.ts frontend/tsconfig.json
UI_BUILD := frontend/dist/index.html

.PHONY: help install api-types frontend run wheels demo test test-unit test-ui test-faults test-deploy lint docs docs-reference screenshots bench bench-quick clean distclean

help: ## list the targets
	@echo "Warden make targets:"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "} {printf "  %-12s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv and install Warden with its dev tools (tests, linters, docs)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstalls only when pyproject.toml changes (the install is editable, code changes need none).
# `make run` needs the runtime alone (RUN_STAMP); the dev tools' install has it too.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@ $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(NPM_STAMP): frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund
	@touch $@

$(UI_BUILD): $(NPM_STAMP) $(UI_SOURCES)
	cd frontend && npm run build

api-types: install $(NPM_STAMP) ## regenerate the web UI's API types from the gateway's OpenAPI document
	$(BIN)/python -m services.gateway.openapi > frontend/src/api/openapi.json
	cd frontend && npm run --silent api:types

frontend: $(UI_BUILD) ## build the web UI into frontend/dist (npm ci, type-check, vite build)

# A quiet start: what installing, building the UI and migrating print goes to RUN_LOG (its tail
# is shown when a step fails), so that Warden's own lines follow, with the set-up banner last.
# `warden init` reads no terminal here (</dev/null): with no admin yet, the gateway prints a
# one-time set-up link instead of `make run` stopping at a password prompt.
RUN_LOG := .data/make-run.log
LOGGED = >>$(RUN_LOG) 2>&1 || { tail -n 40 $(RUN_LOG) >&2; \
	echo "make run: that step failed; all it printed is in $(RUN_LOG)" >&2; exit 1; }

run: ## install the runtime, build the UI, write a config if there is none, migrate, start every service (http://127.0.0.1:8080; with no admin yet it prints a one-time set-up link)
	@mkdir -p $(dir $(RUN_LOG)) && date >$(RUN_LOG)
	@echo "make run: installing, building the web UI and migrating (what they print: $(RUN_LOG))"
	@$(MAKE) --no-print-directory $(RUN_STAMP) $(UI_BUILD) $(LOGGED)
	@$(BIN)/warden init $(CONFIG_ARG) </dev/null $(LOGGED)
	@$(BIN)/warden db upgrade $(CONFIG_ARG) $(LOGGED)
	@echo "make run: starting Warden. The warden command of this checkout: bin/warden"
	@echo "          (e.g. \`bin/warden user list\`), or plain \`warden\` after \`source .venv/bin/activate\`."
	@$(BIN)/warden run all $(CONFIG_ARG)

# The wheels (into dist/): gpu-warden, the server (with the web UI built into it), and
# gpu-warden-client, the CLI alone for researchers (bin/build-client). Versions from git.
# The server's wheel is built from its sdist (the UI goes in through MANIFEST.in), so that no
# leftover of an earlier in-tree build (build/) gets in.
wheels: install frontend ## build the server's and the client's wheels (and the server's sdist) into dist/
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python bin/build-client --outdir dist

demo: install frontend ## a 4-host simulated fleet over SSH with a lived-in week; prints the logins
	$(BIN)/warden demo

# The Python tests run in PYTEST_WORKERS processes (pytest-xdist); every test has its own
# vhost, database, ports and sshd, so they do not meet. PYTEST_WORKERS=0 runs them in one.
PYTEST_WORKERS ?= 2

test: install frontend ## the suite: Python (in PYTEST_WORKERS processes, 2 by default) but the fault and deploy tests, then the web UI's unit tests
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) -m "not faults and not deploy"
	cd frontend && npm test

test-browser: install frontend ## the web UI end to end: the real services, Debian's Chromium at 1440 and 390 px (minutes)
	cd frontend && npm run test:e2e

test-ui: install frontend ## the web UI: Vitest unit tests, then end-to-end in Debian's Chromium
	cd frontend && npm test && npm run test:e2e

test-faults: install ## the fault tests: real brokers, databases and replicas killed, stopped or frozen, and the recovery checked (minutes)
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) -m faults

test-deploy: install frontend ## the wheels built and installed in clean venvs, then docker-compose.yml really deployed with podman-compose (root; see docker/test-deploy.py)
	$(BIN)/pytest -q -m deploy
	$(BIN)/python docker/test-deploy.py

test-unit: install ## unit tests only (no servers needed)
	$(BIN)/pytest -q tests/unit

lint: install $(NPM_STAMP) ## ruff (lint + format check), mypy, the import layers, files of 600 lines at most, the web UI's type check
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python bin/check-file-length services tests bench
	cd frontend && npm run --silent typecheck

# --strict: a broken link, or a page missing from mkdocs.yml's nav, fails the build.
docs: install ## build the documentation site (docs/, mkdocs.yml) into site/, strictly
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-reference: install ## regenerate the generated reference pages in docs/reference/
	$(BIN)/python -m services.docs_reference

# frontend/e2e/screenshots.mjs starts a Warden of its own as the browser tests do, books a few
# GPUs and writes docs/images/*.png (committed). A plain `make test` never writes them.
screenshots: install frontend ## take the documentation's screenshots (docs/images/) in Debian's Chromium
	cd frontend && npm run --silent screenshots -- ../docs/images

bench: install frontend ## run every benchmark in bench/
	@for f in bench/[!_]*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

bench-quick: install frontend ## run every benchmark with --quick
	@for f in bench/[!_]*.py; do echo "== $$f --quick"; $(BIN)/python $$f --quick || exit 1; done

clean: ## remove caches and build output (keeps .venv)
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info .data/demo
	rm -rf frontend/dist frontend/test-results site

distclean: clean ## clean, and remove .venv and frontend/node_modules too
	rm -rf $(VENV) frontend/node_modules
