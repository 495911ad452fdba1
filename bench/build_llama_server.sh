#!/usr/bin/env bash
# Build llama.cpp's llama-server from the exact llama.cpp source that the installed
# llama-cpp-python vendors, with the flags of the CMakePresets.json variant its wheel
# was built with, so the benchmark compares servers rather than compilers or
# llama.cpp revisions.
#
# The default preset is cpu-native: a plain `pip install llama-cpp-python` (what
# `make install` does) compiles with llama.cpp's defaults, which means GGML_NATIVE=ON.
# After `llm-worker build-backend PRESET`, pass the same PRESET here.
#
# Built from the same patched source as the worker (patches/llama.cpp), as its build is: the peer then runs the
# kernels the worker's fast mode runs (the batch-invariance switch stays off: servers.py never passes it on), 0006's
# faster Q4_1 product and 0013's KV pages included, so a comparison measures the servers, not our patches.
# LLAMA_CPP_PATCHES= (set, empty) builds llama.cpp as upstream ships it; each summary records which (report.py).
#
# Usage: bench/build_llama_server.sh [PRESET]     # prints the binary path on the last line
# Env:   see scripts/build-llama-cpp (PYTHON, LLAMA_CPP_PYTHON_SDIST, CMAKE_ARGS, JOBS, ...)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHON="${PYTHON:-$here/../.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
# The version of the installed llama-cpp-python, unless the caller asked for another.
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-$("$PYTHON" -c 'import llama_cpp; print(llama_cpp.__version__)')}"
export LLAMA_CPP_PYTHON_VERSION
export LLAMA_CPP_PATCHES="${LLAMA_CPP_PATCHES-$here/../patches/llama.cpp}"
bin="$("$here/../scripts/build-llama-cpp" "${1:-cpu-native}" llama-server | tail -n 1)"
echo "$bin/llama-server"
