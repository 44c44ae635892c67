# Keystream: `make test` and `make run` are the whole set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
# Two distributions: the server (this directory: app/ aescore/ hwsim/) and the client (clients/python).
CLIENT := clients/python
# `make run` installs the server and the client (the tour's `keystream` command); `make test` adds the test extras.
RUN_STAMP := $(VENV)/.run-stamp
STAMP  := $(VENV)/.installed-stamp
# What the editable install compiles (it builds the extension in place, in an isolated build environment);
# the .c files Cython generates (aescore/*/_*.c) are outputs, not sources: a build must not make `make run` reinstall.
EXTENSION_SOURCES := $(filter-out aescore/%/_%.c,$(wildcard $(addprefix aescore/*/*.,pyx pxd pxi c h)))
BENCH_ARGS ?=

.PHONY: test run build lint typecheck unit audit lock asan bench bench-aescore report load docker-test tools clean \
        prometheus compose-up compose-down compose-test scaleout-up scaleout-unseal scaleout-down scaleout-test \
        load-figures ui ui-screenshots

# Every dependency comes from a hash-pinned lock (requirements/, $(CLIENT)/requirements.txt; `make lock`
# refreshes them): PyPI's files only (PIP_FIND_LINKS emptied: local wheels with other hashes would fail the
# check), then the two distributions themselves without dependencies, built with the locked build tools.
LOCKED_INSTALL := PIP_FIND_LINKS= $(PY) -m pip install -q --require-hashes
EDITABLE_INSTALL := PIP_FIND_LINKS= $(PY) -m pip install -q --no-deps --no-build-isolation -e . -e ./$(CLIENT)
BUILD_LOCK := requirements/build.txt
RUN_LOCKS := requirements/server.txt $(CLIENT)/requirements.txt
TEST_LOCK := requirements/test.txt

$(RUN_STAMP): pyproject.toml setup.py $(CLIENT)/pyproject.toml scripts/bootstrap-venv.sh $(EXTENSION_SOURCES) \
              $(BUILD_LOCK) $(RUN_LOCKS)
	PYTHON=$(PYTHON) scripts/bootstrap-venv.sh $(VENV) $(BUILD_LOCK)
	$(LOCKED_INSTALL) $(addprefix -r ,$(RUN_LOCKS))
	$(EDITABLE_INSTALL)
	$(PY) -m pip check
	# Lean: Cython (17 MB) only built the extension; a test venv keeps it for `make build`.
	[ -e $(STAMP) ] || $(PY) -m pip uninstall -q -y cython
	touch $@

$(STAMP): pyproject.toml setup.py $(CLIENT)/pyproject.toml scripts/bootstrap-venv.sh $(BUILD_LOCK) $(TEST_LOCK)
	PYTHON=$(PYTHON) scripts/bootstrap-venv.sh $(VENV) $(BUILD_LOCK)
	$(LOCKED_INSTALL) -r $(TEST_LOCK)
	$(EDITABLE_INSTALL)
	$(PY) -m pip check
	touch $@ $(RUN_STAMP)

# Refresh every lock file to the newest versions pyproject.toml allows, from one resolution (scripts/lock.sh).
lock:
	PYTHON=$(PYTHON) scripts/lock.sh

# The locked set against PyPI's advisory data (pip-audit, scripts/audit_locks.py); fails on a known
# vulnerability not listed with its reason in requirements/audit-allow.toml. AUDIT_ARGS=--strict also fails
# on packages older than their latest release when PyPI's per-version advisories are out of reach.
audit: $(STAMP)
	$(PY) scripts/audit_locks.py $(AUDIT_ARGS)

# Build the Cython/C extension in place (the editable install imports it from the source tree).
build: $(STAMP)
	$(PY) setup.py -q build_ext --inplace

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: build
	$(BIN)/mypy

# The suite. Its Python processes (pytest, the servers and workers it starts, a few hundred CLI runs) keep
# their bytecode in build/pycache, even where the environment says PYTHONDONTWRITEBYTECODE, instead of
# compiling the project's sources again in each (collection alone: 23 s of CPU without, 11 s with).
# It runs in two phases: every test not marked `serial` on TEST_WORKERS pytest-xdist processes (a test file
# goes to one process whole, the files of slow and end-to-end tests first: tests/conftest.py), then the
# `serial` ones alone, because they measure time or load the whole machine; both phases always run, either
# failing fails the target. On the 2-core reference machine, idle, from a fresh clone (2026-11-27): 10.3 min +
# 4.7 min, then with the core-image and core-dump tests moved to the first phase (they measure no time):
# 10.7 min + 3.5 min (one process: 26 min, measured earlier). TEST_WORKERS=1: one process.
# PYTEST_ARGS go to every pytest run (e.g. PYTEST_ARGS="--durations=50").
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/build/pycache
unit: build
ifeq ($(TEST_WORKERS),1)
	$(TEST_ENV) $(BIN)/pytest $(PYTEST_ARGS)
else
	status=0; \
	$(TEST_ENV) $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" $(PYTEST_ARGS) || status=$$?; \
	$(TEST_ENV) $(BIN)/pytest -m serial $(PYTEST_ARGS) || status=$$?; \
	exit $$status
endif

# The web console (docs/console.md): ui/'s TypeScript checked (tsc, strict) and bundled by esbuild into
# app/ui/static, from ui/package-lock.json. The output is committed: `make run` and the image need no Node.
ui:
	cd ui && npm ci --no-audit --no-fund && npx --no-install tsc --noEmit && node build.mjs

# The console's screenshots in docs/img (console-dashboard.png, console-keys.png, 1280x800) from a real server
# under a short load, in Debian's headless Chromium (scripts/console_screenshots.py, ~2 min). Look at them
# before committing them. E.g. make ui-screenshots SCREENSHOT_ARGS="--load-seconds 120".
ui-screenshots: tools build
	$(PY) -m scripts.console_screenshots $(SCREENSHOT_ARGS)

# Operations tools the deploy/ checks run (Debian's prometheus/promtool, docker-compose); quick when present.
tools:
	scripts/install-tools.sh

test: tools lint typecheck unit audit

# The commands live in .venv/bin, which is not on PATH: the hint says how another terminal reaches them.
run: $(RUN_STAMP)
	@echo "make run: in another terminal, 'source $(VENV)/bin/activate' puts keystream and keystream-server on PATH"
	$(BIN)/keystream-server serve

# The aescore suite under AddressSanitizer: a separate build, then back to the normal one.
asan: $(STAMP)
	KEYSTREAM_ASAN=1 $(PY) setup.py -q build_ext --inplace --force
	# PYTHONMALLOC=malloc: objects come from malloc, so ASan sees their bounds (pymalloc arenas hide them);
	# pycryptodome's RTLD_DEEPBIND dlopen is incompatible with ASan; --capture=sys keeps ASan's report visible.
	# The normal build is restored even when the tests fail (an ASan .so cannot be imported without LD_PRELOAD).
	PYTHONMALLOC=malloc PYCRYPTODOME_DISABLE_DEEPBIND=1 ASAN_OPTIONS=detect_leaks=0 \
	    LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" \
	    $(BIN)/pytest -p no:cacheprovider --capture=sys tests/aescore -q; \
	status=$$?; $(PY) setup.py -q build_ext --inplace --force && exit $$status

# Bounded Locust load test against a fresh local service; reports in loadtests/reports/<timestamp>/.
# Pass options with LOAD_ARGS, e.g. make load LOAD_ARGS="--users 24 --duration 120 --backends aesni".
load: build
	$(PY) -m loadtests.run $(LOAD_ARGS)

# Build the Docker image for real (debootstrap base, host-built wheelhouse) and round-trip through it, then
# run the scale-out stack (deploy/compose/scaleout.yml: PostgreSQL, 3 replicas, HAProxy, Prometheus) and its
# checks, under the file seal and again under the shamir and pkcs11 seals (deploy/compose/scaleout/check_seal.py).
# Not part of `make test`: as root it installs docker.io/debootstrap and starts (then stops) dockerd when
# missing; ~10 min on a fresh machine, ~4 min warm (212 s measured with the image cached: 17 s image check,
# 50 s file-seal stack, 79 s shamir, 65 s pkcs11).
docker-test: build
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/docker-test.sh
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/compose.sh scaleout-test
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/compose.sh scaleout-test --seal shamir
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/compose.sh scaleout-test --seal pkcs11

# The docker-compose stack without an image registry (deploy/compose.sh): builds the image as docker-test
# does plus a Prometheus image from Debian's package, then `docker-compose up -d keystream prometheus`.
# compose-test: up, /healthz, a sealed round trip, Prometheus scraping, down -v (~75 s warm).
# The host side needs only a Python with pip (the wheelhouse, free ports): the lean `make run` venv.
compose-up: $(RUN_STAMP)
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/compose.sh up

compose-down:
	deploy/compose.sh down

compose-test: $(RUN_STAMP)
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/compose.sh test

# The scale-out stack (deploy/compose/scaleout.yml, docs/operations.md "Scale-out stack with docker-compose"):
# up on 127.0.0.1:8000 (HAProxy), 8001-8003 (the replicas), 9090 (Prometheus), secrets in build/scaleout.
# SEAL=shamir or SEAL=pkcs11 selects a seal (deploy/compose/scaleout-SEAL.yml; default: the one the stack
# was brought up with, else file); scaleout-unseal gives a shamir stack's replicas their shares.
# Up, unseal and down need the lean venv only (the client CLI unseals); scaleout-test runs
# deploy/compose/scaleout/check.py or check_seal.py (httpx: test venv) on free ports in a project of its own,
# then down -v (also part of docker-test).
scaleout-up: $(RUN_STAMP)
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/compose.sh scaleout-up $(if $(SEAL),--seal $(SEAL))

scaleout-unseal: $(RUN_STAMP)
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/compose.sh unseal

scaleout-down:
	deploy/compose.sh scaleout-down

scaleout-test: build
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/compose.sh scaleout-test $(if $(SEAL),--seal $(SEAL))

# Debian's Prometheus on 127.0.0.1:9090 scraping a local Keystream (`make run`) with deploy/prometheus's rules;
# config and data in build/prometheus. E.g. make prometheus PROMETHEUS_ARGS="--target 127.0.0.1:8001".
prometheus: tools $(STAMP)
	$(PY) scripts/prometheus_local.py $(PROMETHEUS_ARGS)

# The docs' load-test figures (docs/img/prometheus-crypto-p99-by-backend.png, locust-report.png) from a real
# step load with Prometheus scraping (scripts/load_figures.py, ~5 min; needs chromium: apt-get install chromium).
load-figures: tools build
	$(PY) -m scripts.load_figures $(FIGURE_ARGS)

# Every benchmark (aescore, the service, the hwsim model), then bench/results/report.md with PNG plots.
# BENCH_ARGS="--quick" for a smoke run; "--results DIR" to write elsewhere.
bench: build
	$(PY) -m bench.report $(BENCH_ARGS)

# The report and plots again from the JSON already in bench/results (no benchmark runs).
report: $(STAMP)
	$(PY) -m bench.report --report-only $(BENCH_ARGS)

# The aescore throughput table alone.
bench-aescore: build
	$(PY) -m bench.bench_aescore

clean:
	rm -rf build $(VENV) aescore/*/_*.c aescore/*/_*.so .mypy_cache .pytest_cache .ruff_cache
