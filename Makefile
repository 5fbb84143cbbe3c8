# mua developer and user entry points. `make demo` and `make test` each set up first.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.mua-installed
CONSTRAINTS ?= constraints-cpu.txt
PIP_ARGS ?=
B ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: setup test test-all demo bench bench-peers lint fmt clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q $(PIP_ARGS) -c $(CONSTRAINTS) -e ".[dev]"
	@touch $(STAMP)

test: setup
	$(BIN)/python -m pytest -q

demo: setup
	$(BIN)/python -m mua.demo

# Benchmark peers (TRL for B1) live in their own environment, never in mua's dependencies. If they
# cannot be installed, the benchmarks still run and B1 reports mua's step times only.
BENCH_VENV := bench/.venv
BENCH_STAMP := $(BENCH_VENV)/.peers-installed

$(BENCH_STAMP): bench/requirements.txt pyproject.toml $(CONSTRAINTS)
	@test -x $(BENCH_VENV)/bin/python || $(PY) -m venv $(BENCH_VENV)
	@if $(BENCH_VENV)/bin/python -m pip install -q $(PIP_ARGS) -c $(CONSTRAINTS) -e . -r bench/requirements.txt; \
	then touch $(BENCH_STAMP); \
	else echo "bench: could not install bench/requirements.txt into $(BENCH_VENV); B1 will report mua's step times only"; fi

bench-peers: $(BENCH_STAMP)

bench: setup bench-peers
	$(BIN)/python -m bench $(B)

lint: setup
	$(BIN)/ruff check mua gyms data_prep tests bench
	$(BIN)/ruff format --check mua gyms data_prep tests bench

fmt: setup
	$(BIN)/ruff format mua gyms data_prep tests bench
	$(BIN)/ruff check --fix mua gyms data_prep tests bench

clean:
	rm -rf $(VENV) runs build *.egg-info .pytest_cache .ruff_cache bench/results
