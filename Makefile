# vidvol: two commands after cloning -- `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vidvol-installed
PIP_FLAGS ?= --disable-pip-version-check --progress-bar off
PYTEST_ARGS ?=
# Every core: each worker takes whole modules (module fixtures such as a test S3 server start once).
PYTEST_PARALLEL ?= -n auto --dist loadscope
# The fast lane has no costly module fixture: an idle worker takes tests from the other's queue (worksteal), so no
# worker waits out a long module alone at the end (78-82 s against 88-97 s for loadscope, quiet, 2 cores).
PYTEST_FAST_PARALLEL ?= -n auto --dist worksteal
# The test lanes write the checkout's own bytecode (__pycache__/, ignored by git) even where PYTHONDONTWRITEBYTECODE
# is set: otherwise every xdist worker compiles vidvol and the test modules again on every run, and every child
# process (decoders, CLIs) vidvol again (collecting the fast lane: 12.3 s of CPU per worker against 7.5 s).
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest
DEMO_DIR ?= demo_out

.PHONY: venv demo lint test test-fast test-long test-all bench bench-quick clean

$(STAMP): setup.cfg setup.py pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# uv resolves and installs the same versions as pip in a tenth of the time (18 s against 160 s here);
	@# INSTALLER=pip uses pip alone. --compile-bytecode writes the .pyc files at install, as pip does: uv does not by
	@# default, and where PYTHONDONTWRITEBYTECODE is set (it is on the development machines) every process would
	@# compile TensorFlow's Python again on import (24-29 s against 16 s per `import tensorflow` on a loaded machine).
ifeq ($(INSTALLER),pip)
	$(PY) -m pip install $(PIP_FLAGS) -q --upgrade pip setuptools wheel
	$(PY) -m pip install $(PIP_FLAGS) -q -e '.[test]'
else
	$(PY) -m pip install $(PIP_FLAGS) -q uv
	$(VENV)/bin/uv pip install --python $(PY) -q --compile-bytecode $${PIP_FIND_LINKS:+--find-links $$PIP_FIND_LINKS} -e '.[test]'
endif
	@# Real RAR3/RAR5 archives for tests/builders/sources/test_archive.py: the test/files/ of the installed
	@# rarfile's source distribution, fetched now so that the tests never reach the network.
	rm -rf $(VENV)/rar-samples
	$(PY) -m pip download $(PIP_FLAGS) -q --no-deps --no-binary :all: --no-build-isolation \
		-d $(VENV)/rar-samples "rarfile==$$($(PY) -c 'import importlib.metadata as m; print(m.version("rarfile"))')"
	tar -xzf $(VENV)/rar-samples/rarfile-*.tar.gz -C $(VENV)/rar-samples
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@# TensorFlow's C++ start-up notes (oneDNN, CPU features) are not the demo's; TF_CPP_MIN_LOG_LEVEL=0 shows them.
	TF_CPP_MIN_LOG_LEVEL=$${TF_CPP_MIN_LOG_LEVEL:-2} $(PY) -m vidvol demo --out $(DEMO_DIR)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# What CI runs: every test but those marked long (the longest scenarios, each also covered by a shorter
# test here); the 25 slowest are listed at the end, so a test that grows shows up.
test: $(STAMP)
	$(PYTEST) -m "not long" --durations=25 $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# The inner loop: everything but the tests marked slow (multi-runner builds, CLIs, notebook, benchmark).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not long" $(PYTEST_FAST_PARALLEL) $(PYTEST_ARGS)

# The long lane, before a release or after touching the build machinery: the quick benchmark run,
# SIGKILLs mid-build on every runner, the cross-process resume of every pipeline.
test-long: $(STAMP)
	$(PYTEST) -m long --durations=25 $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PYTEST) --durations=25 $(PYTEST_PARALLEL) $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run.py --out bench_out

bench-quick: $(STAMP)
	$(PY) benchmarks/run.py --quick --out bench_out

clean:
	rm -rf $(DEMO_DIR) bench_out
