# Two commands do everything on a fresh machine:
#   make serve   venv, install, fetch the default model, serve it on 127.0.0.1:$(PORT)
#   make test    venv, install, fetch the test model, run every test but the slow ones
#   make test-slow  the tests that compile llama.cpp again or build a Docker image (tens of minutes)
#   make test-builds  of those, the one that builds a llama.cpp variant (rpc), ~5-10 minutes, cached after;
#                     CI runs it after make test
#   make test-gpu   of those, the GPU backends: Vulkan on Mesa's lavapipe, CUDA compiled for one architecture,
#                   the GPU check rehearsed from its bundle, the cuda and vulkan images (hours the first time)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8080

.PHONY: serve test test-slow test-builds test-gpu install

# llama-cpp-python compiles llama.cpp on first install (minutes); pip caches the wheel after.
$(BIN)/llm-worker: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[test]'
	touch $@

# Exact mode's second build of the same llama.cpp, without llamafile, for F16/BF16/F32 weights
# (worker/engine/exactness/build_choice.py): 2.4 minutes on 2 cores the first time (measured), cached in ~/.cache/llm-worker/llama.cpp.
NO_LLAMAFILE := $(VENV)/lib/llm-worker/no-llamafile
$(NO_LLAMAFILE)/libllama.so: $(BIN)/llm-worker
	scripts/install-no-llamafile cpu-native $(VENV)

install: $(BIN)/llm-worker $(NO_LLAMAFILE)/libllama.so

serve: install
	$(BIN)/llm-worker serve --port $(PORT)

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

test-builds: install
	$(BIN)/python -m pytest -q -m slow tests/test_rpc.py

test-gpu: install
	$(BIN)/python -m pytest -q -m slow tests/test_gpu_backends.py
