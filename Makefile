# Two commands do everything on a fresh machine:
#   make serve   venv, install, fetch the default model, serve it on 127.0.0.1:$(PORT)
#   make test    venv, install, fetch the test model, run every test but the slow ones
#   make test-unit  tests/unit alone: no model, no worker, no llama.cpp build beyond the venv's; seconds
#   make lint    ruff, mypy and import-linter (their rules: pyproject.toml); make test runs it first
#   make test-slow  the tests that compile llama.cpp again or build a Docker image (tens of minutes)
#   make test-builds  of those, the one that builds a llama.cpp variant (rpc), ~5-10 minutes, cached after;
#                     CI runs it after make test
#   make test-gpu   of those, the GPU backends: Vulkan on Mesa's lavapipe, CUDA compiled for one architecture,
#                   the GPU check rehearsed from its bundle, the cuda and vulkan images (hours the first time)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8080

.PHONY: serve test test-unit test-slow test-builds test-gpu install lint

# llama-cpp-python compiles llama.cpp on first install (minutes); pip caches the wheel after.
$(BIN)/llm-worker: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[test]'
	touch $@

# Exact mode's build of the same llama.cpp with our patches (patches/llama.cpp: batch-invariant CPU kernels behind
# GGML_CPU_BATCH_INVARIANT), loaded for every weight type in exact and off modes (worker/engine/exactness/build_choice.py):
# libllama, ggml and libmtmd (images: it must call the libllama loaded), cached in ~/.cache/llm-worker/llama.cpp per
# flags and patches. The target is libmtmd: an install from before images had none, and is rebuilt.
BATCH_INVARIANT := $(VENV)/lib/llm-worker/batch-invariant
$(BATCH_INVARIANT)/libmtmd.so: $(BIN)/llm-worker $(wildcard patches/llama.cpp/*.patch)
	scripts/install-batch-invariant cpu-native $(VENV)

install: $(BIN)/llm-worker $(BATCH_INVARIANT)/libmtmd.so

serve: install
	$(BIN)/llm-worker serve --port $(PORT)

lint: $(BIN)/llm-worker
	$(BIN)/ruff check worker tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: install lint
	$(BIN)/python -m pytest -q

test-unit: $(BIN)/llm-worker
	$(BIN)/python -m pytest -q tests/unit

test-slow: install
	$(BIN)/python -m pytest -q -m slow

test-builds: install
	$(BIN)/python -m pytest -q -m slow tests/e2e/test_rpc.py

test-gpu: install
	$(BIN)/python -m pytest -q -m slow tests/e2e/test_gpu_backends.py
