# The commands the README names. Each installs what it needs from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install serve test test-needs tier test-fast fuzz lint docs docs-serve bench synth clean triton-env checkov-env console console-test chromium test-rewrite test-warm

# The virtualenv without pip of its own (ensurepip alone takes seconds, before anything else
# can start): uv is put in it by the interpreter's own pip, or, where that has none, by a pip
# installed in it as before.
$(UV):
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(VENV)/bin/python install --quiet --disable-pip-version-check uv 2>/dev/null || \
		{ $(VENV)/bin/python -m ensurepip --default-pip >/dev/null && $(VENV)/bin/pip install --quiet --disable-pip-version-check uv; }

# Installed with bytecode for what sluice's processes import (site-packages and sluice's own
# modules, an editable install outside it), so that a process reads bytecode rather than
# compiling every module it imports, even where PYTHONDONTWRITEBYTECODE keeps it from writing
# any (`sluice batch list`: 3.7 CPU-s without, 1.3 with). A module edited since is compiled
# again in memory, as Python does whenever bytecode is older than its source. Left to compile
# when first imported: the CDK library (196 MB of bytecode, of which `cdk synth` reads a fifth;
# a third of the compile's CPU) and what no sluice process imports (sympy, networkx,
# databricks' SDK, mypy, pip, setuptools, fontTools, mpmath): ~40 CPU-s less at every install.
NO_COMPILE := /site-packages/(aws_cdk|sympy|networkx|databricks|mypy|mypyc|pip|setuptools|fontTools|mpmath)/
COMPILE := $(PY) -m compileall -q -j 0 -x '$(NO_COMPILE)' functions/sluice \
	$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')

# The packages alone (DEPS), then their bytecode (STAMP). The suite asks for DEPS only: it runs
# with bytecode written as its processes import (below), so it compiles what it imports (its
# collection first, while the other prerequisites build), not all of site-packages, which
# compiling whole cost the suite ~85 CPU-s of its ~1,000. `make install`, `serve`, `bench` and
# `synth` compile the lot, as before.
DEPS := $(VENV)/.packages

$(DEPS): pyproject.toml | $(UV)
	$(UV) pip install --quiet --python $(PY) -e '.[dev]'
	touch $(DEPS)

$(STAMP): $(DEPS)
	$(COMPILE)
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP) console
	$(VENV)/bin/sluice serve --demo --host $(HOST) --port $(PORT)

# The suite runs on TEST_WORKERS processes (pytest-xdist); the tests of a folder that shares one
# session fixture (the CDK synth, the local Triton server) stay on one worker (tests/conftest.py).
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=10

# The suite starts hundreds of Python processes (its workers, `sluice serve` and the servers'
# workers, the CLI, checkov), each importing much the same modules: bytecode is written
# as they go (into the virtualenvs and the __pycache__ folders git ignores), even where the
# environment asks for none, so that each reads it rather than compiling every module it
# imports again (a pytest worker's collection 49 CPU-s without, 13 with; a
# process importing what `sluice serve` imports, 3.7 and 1.2).
test tier test-fast fuzz test-rewrite test-warm: export PYTHONDONTWRITEBYTECODE :=

# What the suite needs is built side by side (make -j): the install compiling bytecode is
# CPU-bound while the Triton and checkov environments, npm and apt mostly wait on downloads.
TEST_NEEDS := $(DEPS) triton-env checkov-env docs console console-test chromium test-rewrite test-warm

test:
	@$(MAKE) --no-print-directory -j 4 --output-sync=target test-needs
	$(VENV)/bin/lint-imports
	$(PYTEST)

test-needs: $(TEST_NEEDS)

# pytest rewrites the asserts of every test module it imports (~15 CPU-s for the suite) and keeps
# the result beside the module; in a fresh clone each of the suite's workers would rewrite them
# all, side by side. One collection writes them while the other prerequisites build (a failed
# collection here is left for the suite's own to report).
test-rewrite: $(DEPS)
	@$(PY) -m pytest --collect-only -q -p no:xdist -p no:cacheprovider >/dev/null 2>&1 || true

# That collection runs on one core. Beside it, on the other, the heaviest libraries the tests
# import later (not while collecting) are imported once, so their bytecode is written then rather
# than by the suite's workers, and some that the collection imports are compiled first: ~10 CPU-s
# of the suite moved out of it. A library not installed is passed over.
WARM := mlflow pandas sklearn feast skl2onnx xgboost moto.stepfunctions moto.dynamodb moto.s3 moto.sqs \
	moto.kinesis moto.sagemaker moto.scheduler moto.glue moto.lambda_ playwright.sync_api tritonclient.http aiohttp
test-warm: $(DEPS)
	@$(PY) -c 'import importlib.util as u, sys; [__import__(m) for m in sys.argv[1:] if u.find_spec(m.split(".")[0])]' $(WARM) >/dev/null 2>&1 || true

# One tier of the suite: make tier TIER=unit (or integration, e2e, infra).
TIER ?= unit
tier: $(DEPS) triton-env checkov-env console
	$(PYTEST) tests/$(TIER)

test-fast: $(DEPS)
	$(PY) -m pytest -q tests/unit

# The data plane's differential fuzzer (tests/integration/test_differential.py) with many more
# examples than `make test` runs (SLUICE_FUZZ_SCALE times, 10 by default), random ones, a failure
# shrunk to a minimal example (no per-test timeout), and hypothesis's statistics.
fuzz: $(DEPS)
	SLUICE_FUZZ=1 $(PY) -m pytest -q --timeout=0 --hypothesis-show-statistics tests/integration/test_differential.py

lint: $(DEPS)
	$(VENV)/bin/ruff check functions infra tests benchmarks scripts

# The documentation site (mkdocs.yml, docs/), built strictly: a broken link, anchor or include
# fails it. The variable silences the theme's end-of-life banner, which is not about this site.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
DOCS_PORT ?= 8001

docs: $(DEPS)
	$(MKDOCS) build --strict --quiet --site-dir site

docs-serve: $(STAMP)
	$(MKDOCS) serve --dev-addr $(HOST):$(DOCS_PORT)

# BENCH_ARGS=--quick for a ~2-minute smoke run. wrk comes from Debian when apt-get can run (else
# a Python load generator stands in); the Triton peer needs triton-env and is skipped without it.
bench: $(STAMP)
	$(UV) pip install --quiet --python $(PY) -e '.[bench]'
	$(COMPILE)
	@command -v wrk >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }; }; } || \
		echo "bench: wrk is not installed; the Python load generator stands in"
	-@$(MAKE) --no-print-directory triton-env
	$(PY) -m benchmarks.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-triton .venv-checkov .pytest_cache cdk.out node_modules site console/node_modules functions/sluice/console/static

# The web console (console/, docs/console.md): built with Vite and uPlot, pinned by
# console/package-lock.json, into the package (functions/sluice/console/static/), which the
# API serves at /console and the Lambda function's asset ships.
CONSOLE := functions/sluice/console/static/index.html
CONSOLE_SOURCES := console/index.html console/vite.config.js $(wildcard console/src/*.ts console/src/*.css console/src/pages/*.ts)

console/node_modules/.package-lock.json: console/package.json console/package-lock.json
	cd console && npm ci --no-audit --no-fund

$(CONSOLE): console/node_modules/.package-lock.json $(CONSOLE_SOURCES)
	cd console && npx --no-install vite build --logLevel warn

console: $(CONSOLE)

# The console's pure parts (policy walking, revision diffs, monitoring series) under vitest; its pages are tested
# in a browser by tests/e2e/test_console.py.
console-test: console/node_modules/.package-lock.json
	cd console && npx --no-install vitest run

# The console's browser tests (tests/e2e/test_console.py) drive Debian's Chromium, installed
# when apt-get can run; without it they are skipped, saying why. No browser is downloaded.
# Its old headless shell (chromium-headless-shell) is what they launch where it is installed:
# the same pages for ~30% less of the browser's CPU than Chromium's own headless mode.
CHROMIUMS := chromium chromium-headless-shell
chromium:
	@{ command -v chromium && command -v chromium-headless-shell; } >/dev/null 2>&1 || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -qq $(CHROMIUMS) >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq $(CHROMIUMS) >/dev/null 2>&1; } || \
		apt-get install -y -qq chromium >/dev/null; }; } || \
		{ command -v chromium >/dev/null 2>&1 && echo "chromium-headless-shell is not installed: the console's browser tests use chromium"; } || \
		echo "chromium is not installed: the console's browser tests will be skipped"

# The local Triton (CPU, python backend) in its own virtualenv: nvidia-pytriton pins numpy<2.
TRITON_VENV := .venv-triton
TRITON_STAMP := $(TRITON_VENV)/.installed

$(TRITON_STAMP): | $(UV)
	$(UV) venv --clear $(TRITON_VENV) --python python3.11
	$(UV) pip install --quiet --python $(TRITON_VENV)/bin/python 'nvidia-pytriton==0.7.*' onnxruntime 'numpy<2'
	touch $(TRITON_STAMP)

triton-env: $(TRITON_STAMP)

# The CDK CLI version comes from package-lock.json; layers are built with uv, not Docker.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

# The layers carry bytecode compiled by the runtime's Python: found on this machine, else
# installed by uv where the machine reaches its downloads (infra/constructs/bytecode.py).
synth: $(STAMP) node_modules/.package-lock.json console
	$(PY) -m infra.constructs.bytecode
	npx --no-install cdk synth

# checkov (tests/infra/test_checkov.py scans the synthesized templates with it) pins many
# packages of its own: its own virtualenv, called as a subprocess.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

$(CHECKOV_STAMP): | $(UV)
	$(UV) venv --clear $(CHECKOV_VENV) --python python3.11
	$(UV) pip install --quiet --python $(CHECKOV_VENV)/bin/python 'checkov==3.2.533'
	touch $(CHECKOV_STAMP)

checkov-env: $(CHECKOV_STAMP)
