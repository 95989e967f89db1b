# Two entry points: `make demo` and `make test`. Each creates the virtual
# environment it needs from nothing but Python 3.11+ and pip.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint typecheck unit bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(PY) examples/demo.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

unit: $(VENV)/.installed
	$(PY) -m pytest

test: lint typecheck unit

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_advance.py

clean:
	rm -rf $(VENV)
