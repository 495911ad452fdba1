# Two commands do everything on a fresh machine:
#   make serve   venv, install, fetch the default model, serve it on 127.0.0.1:$(PORT)
#   make test    venv, install with the test extras, fetch the test model, run every test but the probes and the slow
#                ones
#   make test-unit  tests/unit alone: no model, no worker, no llama.cpp build beyond the venv's; seconds once the
#                   venv exists (a fresh checkout makes it first, compiling llama.cpp unless cached: minutes)
#   make lint    ruff, mypy and import-linter (their rules: pyproject.toml); make test runs it first
#   make test-probes  the probes that run long by design (~15 minutes): the batch-invariance probes of the patched
#                     kernels per weight type and at 1-4 threads (after a change to patches/ or the build), the
#                     fuzzer, the 2,000-request soak, whole-model conversions; CI runs it after make test
#   make test-slow  the tests that compile llama.cpp again, build a Docker image or need a GPU (tens of minutes)
#   make test-builds  of those, the one that builds a llama.cpp variant (rpc), ~5-10 minutes, cached after;
#                     CI runs it after those, time allowing
#   make test-gpu   of those, the GPU backends: Vulkan on Mesa's lavapipe, CUDA compiled for one architecture,
#                   the GPU check rehearsed from its bundle, the cuda and vulkan images (hours the first time)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8080

.PHONY: serve test test-unit test-slow test-probes test-builds test-gpu install lint

# llama.cpp is compiled once, by scripts/build-llama-cpp, with our patches (patches/llama.cpp: batch-invariant CPU
# kernels behind GGML_CPU_BATCH_INVARIANT, off unless set) and this machine's CPU features (cpu-native), cached in
# ~/.cache/llm-worker/llama.cpp per flags and patches. scripts/install-llama-cpp-libs installs llama-cpp-python's
# Python side alone (its own compile off) and puts the libraries in its llama_cpp/lib, before pip sees llm-worker's
# pin, which it then finds met. Fast mode loads them there; exact and off modes load the copy in
# $(VENV)/lib/llm-worker/batch-invariant with the switch on (worker/engine/exactness/build_choice.py): the same build,
# kept apart so that `llm-worker build-backend` can replace llama_cpp/lib with a GPU build. libmtmd (images) and the
# chat ABI (worker/engine/native/chat_abi: llama.cpp's chat templates and parsers) come with them, as they must call
# the libllama loaded. The target is the chat ABI: an install from before it had none, and its source is ours.
PATCHES := $(wildcard patches/llama.cpp/*.patch)
CHAT_ABI := $(wildcard worker/engine/native/chat_abi/*)
LLAMA_CPP := LLAMA_CPP_PATCHES=$(CURDIR)/patches/llama.cpp scripts/install-llama-cpp-libs cpu-native $(VENV)
# The stamps are files of their own: pip rewrites bin/llm-worker whenever it installs the worker again (the test
# extras do), which would make every target after it look out of date.
WORKER := $(VENV)/.worker-installed
$(WORKER): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(LLAMA_CPP)
	$(BIN)/python -m pip install --disable-pip-version-check -e .
	touch $@

# The test extras (pytest, the outside clients, the linters): what the test and lint targets need and serving does not.
TEST_EXTRAS := $(VENV)/.test-extras
$(TEST_EXTRAS): $(WORKER) tests/requirements.lock
	$(BIN)/python -m pip install --disable-pip-version-check -c tests/requirements.lock -e '.[test]'
	touch $@

BATCH_INVARIANT := $(VENV)/lib/llm-worker/batch-invariant
$(BATCH_INVARIANT)/libllm-worker-chat.so: $(WORKER) $(PATCHES) $(CHAT_ABI)
	$(LLAMA_CPP)
	scripts/install-batch-invariant cpu-native $(VENV)

install: $(WORKER) $(BATCH_INVARIANT)/libllm-worker-chat.so

serve: install
	$(BIN)/llm-worker serve --port $(PORT)

lint: $(TEST_EXTRAS)
	$(BIN)/ruff check worker tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: install lint
	$(BIN)/python -m pytest -q

test-unit: $(TEST_EXTRAS)
	$(BIN)/python -m pytest -q tests/unit

test-slow: install $(TEST_EXTRAS)
	$(BIN)/python -m pytest -q -m slow

test-probes: install $(TEST_EXTRAS)
	$(BIN)/python -m pytest -q -m probe

test-builds: install $(TEST_EXTRAS)
	$(BIN)/python -m pytest -q -m slow tests/e2e/test_rpc.py

test-gpu: install $(TEST_EXTRAS)
	$(BIN)/python -m pytest -q -m slow tests/e2e/test_gpu_backends.py
