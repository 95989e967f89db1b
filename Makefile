# Two entry points: `make demo` and `make test`. Each creates the virtual
# environment it needs from nothing but Python 3.11+ and pip.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo demo-core test lint typecheck unit bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	# Compiled once here: a machine with PYTHONDONTWRITEBYTECODE set would
	# otherwise compile every module of the project at every command's start.
	$(PY) -m compileall -q flowcore hosts
	touch $@

DEMO_INPUT := '{"incident_id": "INC-7"}'
DEMO := specs/examples/incident.yaml --input $(DEMO_INPUT) --tools specs/examples/demo_tools.py --db demo.db --run-id demo

# The incident-response flow on the local host: start it, send the "fix
# deployed" signal early (the run buffers it), then process the run to the
# end, answering the human question at the terminal.
demo: $(VENV)/.installed
	rm -f demo.db demo.db-wal demo.db-shm
	$(VENV)/bin/flowcore run $(DEMO) --detach
	$(VENV)/bin/flowcore signal demo fix-deployed --data '{"commit": "a1b2c3"}' --db demo.db
	$(VENV)/bin/flowcore run $(DEMO)
	@echo "The run is kept in demo.db: $(VENV)/bin/flowcore show demo --db demo.db"

# The pure core alone: a scripted flow, every effect printed.
demo-core: $(VENV)/.installed
	$(PY) examples/demo.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

# The reference TypeScript host's compiler (tests/test_ts_host.py runs it).
# Without Node and npm the host's tests are skipped, saying so.
hosts/ts/node_modules/.installed: hosts/ts/package-lock.json
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		cd hosts/ts && npm ci --no-audit --no-fund && touch node_modules/.installed; \
	else \
		echo "node or npm not found: the TypeScript host's tests will be skipped"; \
	fi

# On two pytest-xdist workers, in about half the time (specs/testing.md §5 says
# what keeps a run on workers alike to one in a single process).
unit: $(VENV)/.installed hosts/ts/node_modules/.installed
	$(PY) -m pytest -n 2

test: lint typecheck unit

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_advance.py

clean:
	rm -rf $(VENV)
