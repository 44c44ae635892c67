# Keystream: `make test` and `make run` are the whole set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: test run build lint typecheck unit asan bench load docker-test tools clean

$(STAMP): pyproject.toml setup.py scripts/bootstrap-venv.sh
	PYTHON=$(PYTHON) scripts/bootstrap-venv.sh $(VENV)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Build the Cython/C extension in place (the editable install imports it from the source tree).
build: $(STAMP)
	$(PY) setup.py -q build_ext --inplace

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: build
	$(BIN)/mypy

unit: build
	$(BIN)/pytest

# Operations tools the deploy/ checks run (Debian's prometheus/promtool, docker-compose); quick when present.
tools:
	scripts/install-tools.sh

test: tools lint typecheck unit

run: build
	$(BIN)/keystream serve

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

# Build the Docker image for real (debootstrap base, host-built wheelhouse) and round-trip through it.
# Not part of `make test`: needs root and dockerd, and takes minutes on a fresh machine.
docker-test: build
	KEYSTREAM_HOST_PYTHON=$(PY) deploy/docker-test.sh

bench: build
	$(PY) -m bench.bench_aescore

clean:
	rm -rf build $(VENV) aescore/_aesni.c aescore/_aesni*.so aescore/_pyaes_fast.c aescore/_pyaes_fast*.so aescore/_sealed.c aescore/_sealed*.so .mypy_cache .pytest_cache .ruff_cache
