# The commands the README names. Each installs what it needs from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install serve test test-fast lint bench synth clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv

$(STAMP): pyproject.toml | $(UV)
	$(UV) pip install --quiet --python $(PY) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/sluice serve --demo --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check functions tests benchmarks scripts

bench: $(STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache cdk.out
