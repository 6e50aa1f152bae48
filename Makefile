# sgdsim: two commands do everything on a fresh machine with Python 3.11 and make.
#   make run    set up .venv, run the pipeline on config/config.yaml (snakemake --cores 8)
#   make test   set up .venv, run the whole test suite (CI runs the same)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
CORES  ?= 8
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast lint dashboard setup system-deps clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)

system-deps:
	@bash tools/system-deps.sh

test: $(STAMP) system-deps
	$(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

lint: $(STAMP)
	$(BIN)/python -m pytest tests/test_lint.py

dashboard: $(STAMP)
	$(BIN)/python -m dashboard.app --db results/sgdsim.duckdb --port 8050

clean:
	rm -rf results .snakemake
