# Everything a fresh machine needs: `make demo` and `make test` set up .venv themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint install clean-demo

install: $(STAMP)

# The project is installed by uv (from PyPI into the venv first): the same versions pip would
# choose, in a fraction of pip's time. Like pip, it compiles the packages' bytecode as it
# installs them (--compile-bytecode): where PYTHONDONTWRITEBYTECODE is set, no process would
# ever write it, and each would compile every module it imports. The last step compiles the
# numba kernels into their cache (near_dedup_core/**/__pycache__), so that the first `index`
# or `scan` after an install does not (scripts/warm_caches.py).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv
	$(PY) -m uv pip install --quiet --compile-bytecode --python $(PY) -e '.[test]'
	$(PY) scripts/warm_caches.py
	touch $(STAMP)

demo: $(STAMP)
	$(PY) scripts/demo.py

# Three workers, each given whole modules (a module's servers and indexes are built once), the
# longest modules first (tests/conftest.py, LONGEST_FIRST) so that they end together. Three on
# a two-core machine: many tests wait (for a server to start, a run to be launched, a killed
# process), and a third worker fills those waits (728 s against 826 s for the same tests).
PYTEST_XDIST := -n 3 --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_XDIST)
	$(MAKE) --no-print-directory lint

# Everything but the web-UI test (needs Chromium) and the tests marked slow: PostgreSQL, Ray and
# Dagster runs, start-up tests, the whole tamper catalogue, kills of running commands.
test-fast: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_XDIST) -m "not webserver and not slow"

# ruff (lint + import order), mypy (pydantic plugin) and the import floors (import-linter),
# configured in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	@echo "lint: ruff, mypy and lint-imports clean"

clean-demo:
	rm -rf data/demo
