# picoflow — developer commands. `make run` and `make test` are the two Quickstart commands.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)

HOST ?= 127.0.0.1
PORT ?= 8000
STORE ?= sqlite:///picoflow.sqlite3
# Empty: PICOFLOW_MODEL, else the provider of an API key you have set, else the embedded model.
MODEL ?=

.PHONY: install run test lint typecheck bench bench-anchors format clean constraints wheel-check docs docs-images

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,local]'
	@rm -f $(VENV)/.installed-*
	@touch $@

## Serve the five demo flows (hotel, orders, travel, invoice, products) with the chat page, on the
## embedded local model (or MODEL=provider:name) and a SQLite store.
run: install
	$(VENV)/bin/picoflow serve --host $(HOST) --port $(PORT) --store '$(STORE)' $(if $(MODEL),--model '$(MODEL)')

## The whole test suite (starts PostgreSQL and installs Chromium for the browser test when needed).
test: install
	@bash scripts/test-services.sh
	@$(PY) -m picoflow.models.local >/dev/null  # the embedded model's weights (fetched once, then cached)
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: install
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format src tests bench
	$(VENV)/bin/ruff check --fix src tests bench

bench: install
	$(PY) bench/overhead.py
	$(PY) bench/store.py
	$(PY) bench/long_session.py
	$(PY) bench/http.py
	$(PY) bench/temporal.py
	$(PY) bench/hotel.py
	$(PY) bench/local_model.py

## picoflow beside LangGraph, PydanticAI and the OpenAI Agents SDK, in a venv of their own (.venv-anchors).
bench-anchors:
	@test -x .venv-anchors/bin/python || $(PYTHON) -m venv .venv-anchors
	.venv-anchors/bin/pip install --quiet -e . -r bench/requirements-anchors.txt
	.venv-anchors/bin/python bench/anchors.py

## Pin what `make install` and CI install to the newest versions pyproject.toml allows today.
constraints:
	rm -rf .venv-constraints && $(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/pip install --quiet --upgrade pip
	.venv-constraints/bin/pip install --quiet -e '.[dev,local]'
	{ echo "# What CI and \`make install\` install: the versions every fresh clone gets. Refresh with \`make constraints\`."; \
	  .venv-constraints/bin/pip freeze --exclude-editable | grep -iv '^picoflow'; } > constraints.txt
	rm -rf .venv-constraints

## Build the sdist and the wheel, twine-check them, install the wheel in a fresh venv and use it.
wheel-check: install
	bash scripts/wheel-smoke.sh

## Serve the docs site with live reload on http://127.0.0.1:8001/picoflow/ (mkdocs.yml's dev_addr).
docs: install
	$(VENV)/bin/mkdocs serve

## Take the docs' screenshots again (docs/images/), from the browser tests that show each view.
docs-images: install
	PICOFLOW_DOCS_IMAGES=1 $(PY) -m pytest -q tests/server/test_browser_inspector.py -k live

clean:
	rm -rf $(VENV) .venv-anchors .pytest_cache .mypy_cache .ruff_cache .hypothesis test-artifacts
