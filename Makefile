# picoflow — developer commands. `make run` and `make test` are the two Quickstart commands.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

HOST ?= 127.0.0.1
PORT ?= 8000
STORE ?= sqlite:///picoflow.sqlite3
# Empty: PICOFLOW_MODEL, else the provider of an API key you have set, else the embedded model.
MODEL ?=

.PHONY: install run test lint typecheck bench format clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,local]'
	@rm -f $(VENV)/.installed-*
	@touch $@

## Start the hotel demo with its web page on the embedded local model and a SQLite store.
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

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis test-artifacts
