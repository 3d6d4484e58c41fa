# vidvol: two commands after cloning -- `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vidvol-installed
PIP_FLAGS ?= --disable-pip-version-check --progress-bar off
PYTEST_ARGS ?=
DEMO_DIR ?= demo_out

.PHONY: venv demo test bench bench-quick clean

$(STAMP): setup.cfg pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) -q --upgrade pip setuptools wheel
	$(PY) -m pip install $(PIP_FLAGS) -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m vidvol demo --out $(DEMO_DIR)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m vidvol.benchmarks.run --out bench_out

bench-quick: $(STAMP)
	$(PY) -m vidvol.benchmarks.run --quick --out bench_out

clean:
	rm -rf $(DEMO_DIR) bench_out
