# perfbench developer entry points. The README's two commands are `make quickstart` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install quickstart lint test browser slurm slurm-up slurm-down mutation clean

LOCK   := requirements.lock

.PHONY: lock

# Python environment with perfbench, MindSpore (CPU), PyTorch (CPU) and the test tools, at the locked versions
# (requirements.lock: every package pinned, installed without the resolver); redone when the lock or pyproject changes.
$(STAMP): pyproject.toml $(LOCK)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (perfbench targets Python 3.11)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-deps -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Move the locked versions forward on purpose: resolve pyproject.toml's dependencies and extras afresh in a scratch
# environment and write requirements.lock from it (then `make test`, and commit the lock with the result).
LOCK_VENV ?= /tmp/perfbench-lock-venv
lock:
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet '.[train,test]'
	$(LOCK_VENV)/bin/python -m pip install --quiet $$($(LOCK_VENV)/bin/python -c "import tomllib; \
	  print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['pytorch'])")
	{ sed -n '/^#/p' $(LOCK); $(LOCK_VENV)/bin/python -m pip freeze --all --exclude-editable \
	  | grep -v -i -e '^pip==' -e '^perfbench'; } > $(LOCK).new && mv $(LOCK).new $(LOCK)
	rm -rf $(LOCK_VENV)

# A real sweep: ResNet-50 on 1 and 2 ranks through msrun, profiled, analyzed, stored in ./perfbench-results.
quickstart: install
	$(BIN)/perfbench sweep examples/quickstart.yaml

# Headless Chromium for the dashboard's browser tests (Debian's package; Playwright drives it).
browser:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# Debian's Slurm and munge for the two-node Slurm tests (tests/slurm/test_slurm.py starts and stops its own cluster).
# Without root or apt-get it says so and succeeds: those tests then skip with the reason.
slurm:
	@test -x $(BIN)/python || { echo "run \`make install\` first"; exit 1; }
	$(BIN)/python tests/local_slurm.py install

# A two-node test Slurm on this machine (partition `debug`; docs/slurm.md). Needs root. State in
# $(SLURM_DIR); use it with `export SLURM_CONF=$(SLURM_DIR)/slurm.conf`.
SLURM_DIR ?= /tmp/perfbench-slurm
slurm-up: slurm
	$(BIN)/python tests/local_slurm.py up $(SLURM_DIR)

slurm-down:
	$(BIN)/python tests/local_slurm.py down $(SLURM_DIR)

# Lint (ruff: pyflakes and pycodestyle, config in pyproject.toml) and types (mypy over analyzers/ and perfbench/).
# A few seconds; the first step of `make test`, so CI runs it too.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The whole test suite (what CI runs: .ci/run), after `make lint`. The Slurm tests start their own two-node cluster and stop it.
# PERFBENCH_MSPROF_FRESH=1: the parity tests run msprof-analyze itself, never its kept output (tests/msprof_cache.py).
test: install lint browser slurm
	PERFBENCH_MSPROF_FRESH=1 $(BIN)/python -m pytest -q -ra --durations=30

# Mutation testing of the metric and decision code with mutmut against the fast tests (docs/testing.md).
# Slow (tens of minutes on 2 cores), so not part of `make test`/CI. Last line: `mutation score: S (killed K of N)`.
MPY ?= $(BIN)/python
mutation:
	@test -x $(MPY) || { echo "run \`make install\` first (or pass MPY=/path/to/python)"; exit 1; }
	$(MPY) tests/mutation_run.py --max-children 2

clean:
	rm -rf $(VENV) perfbench-results .pytest_cache mutants mutation.json mutation.log
