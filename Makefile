# The README's quick start: `make run` (the main job) and `make test` (the test suite). Both build
# .venv on first use: CPU torch (the pinned 2.13.0), triton 3.6.0, tkreg and every plugin under
# plugins/, installed editable the way a third-party plugin would be. numpy is listed because
# triton's interpreter needs it and torch does not pull it in; pytest-xdist runs the suite on
# every core. Installing tkreg with torch already there (no build isolation) builds its C++ plan key
# (setup.py, tkreg/ops/native).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLUGIN_DIRS := $(patsubst %/pyproject.toml,%,$(sort $(wildcard plugins/*/pyproject.toml)))
STAMP := $(VENV)/.tkreg-installed
# Where an environment already holds tkreg and its plugins (a GPU machine without network):
#   make run BIN=/path/to/venv/bin INSTALL=
INSTALL ?= $(STAMP)
ARGS ?=

.PHONY: run test install clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard tkreg/ops/native/*.cpp tkreg/ops/native/*.h tkreg/launch/native/*.cpp) constraints.txt $(wildcard plugins/*/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=23" "setuptools>=77" wheel
	$(BIN)/python -m pip install -q -c constraints.txt torch
	$(BIN)/python -m pip install -q -c constraints.txt --no-build-isolation numpy ruff pytest-xdist -e . $(addprefix -e ,$(PLUGIN_DIRS))
	touch $@

# The main job: what is installed and where it runs, then every generated item this machine can
# run (Triton interpreter and compile checks without a GPU; correctness and benchmarks on every
# GPU with one). tkreg's runner processes spread the items over the cores and GPUs (no xdist:
# pytest-benchmark switches itself off under xdist); each benchmark result is appended to
# out/bench-<time>.jsonl as it finishes, the whole run's JSON goes to out/bench-<time>.json and
# its report (plots and report.md) to out/report-<time>/.
RUN_STAMP := $(shell date -u +%Y%m%dT%H%M%SZ)
# Benchmark outputs, asked for only where benchmarks run (a GPU): without one they would stay empty.
BENCH_OUTPUTS := --tkreg-bench-jsonl=out/bench-$(RUN_STAMP).jsonl --benchmark-json=out/bench-$(RUN_STAMP).json \
	--tkreg-report=out/report-$(RUN_STAMP)
run: $(INSTALL)
	$(BIN)/tkreg doctor
	$(BIN)/tkreg list
	mkdir -p out
	$(BIN)/python -m pytest --tkreg -m tkreg -p no:cacheprovider $$($(BIN)/python -c "from tkreg.core.platform import current; \
		print('--tkreg-bench $(BENCH_OUTPUTS)' if current().is_gpu else '')") $(ARGS)

# The test suite: lint, the core and plugin tests, and every generated tkreg item.
test: $(INSTALL)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest --tkreg -n auto $(ARGS)

clean:
	rm -rf $(VENV) tkreg/ops/native/*.so tkreg/launch/native/*.so
