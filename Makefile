# sgdsim: two commands do everything on a fresh machine with Python 3.11 and make.
#   make run    set up .venv, run the pipeline on config/config.yaml (snakemake --cores 8)
#   make test   set up .venv, run the whole test suite (CI runs the same)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
CORES  ?= 8
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast lint dashboard setup system-deps clean bench-sweep

# uv installs the same set as pip, faster; compiled to bytecode as pip does (with
# PYTHONDONTWRITEBYTECODE set, each TensorFlow process would compile its sources
# again at import). pip if uv cannot.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/python -m uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[test]' \
	  || $(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)

# Debian packages the tests drive for real: Chromium + ChromeDriver (dashboard
# test), iproute2 + tcpdump (emulated-network testbed and its captures), slurm-wlm + munge (the one-node
# SLURM cluster of tests/test_slurm.py). Installed when running as root and
# missing; otherwise the tests that need them skip and say why.
system-deps:
	@missing=""; \
	test -x /usr/bin/chromium || missing="$$missing chromium"; \
	test -x /usr/bin/chromedriver || missing="$$missing chromium-driver"; \
	{ command -v ip >/dev/null && command -v tc >/dev/null; } || missing="$$missing iproute2"; \
	command -v tcpdump >/dev/null || missing="$$missing tcpdump"; \
	{ command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null; } || missing="$$missing slurm-wlm"; \
	command -v munged >/dev/null || missing="$$missing munge"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing$$missing (apt-get)"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "note:$$missing not installed; the tests that need them will be skipped" >&2; fi

# Two sessions: the tests that neither time nor measure run on both cores at once,
# then those marked `alone` (testbed, throughput, the tiny run) by themselves, so
# nothing else disturbs what they measure. Fails if either fails.
test: $(STAMP) system-deps
	@status=0; \
	$(BIN)/python -m pytest -m 'not alone' -n 2 || status=$$?; \
	$(BIN)/python -m pytest -m alone || status=$$?; \
	exit $$status

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

lint: $(STAMP)
	$(BIN)/python -m pytest tests/test_lint.py

# The 10,000-point sweep of config/sweep.yaml over the profiles `make run` cached,
# timed in a scratch copy (docs/benchmarks.md); BENCH_ARGS e.g. --networks 4.
bench-sweep: $(STAMP)
	$(BIN)/sgdsim bench-sweep --cores 2 $(BENCH_ARGS)

dashboard: $(STAMP)
	$(BIN)/python -m dashboard.app --db results/sgdsim.duckdb --port 8050

clean:
	rm -rf results .snakemake
