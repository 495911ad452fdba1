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
# Usage: bench/build_llama_server.sh [PRESET]     # prints the binary path on the last line
# Env:   see scripts/build-llama-cpp (PYTHON, LLAMA_CPP_PYTHON_SDIST, CMAKE_ARGS, JOBS, ...)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHON="${PYTHON:-$here/../.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
# The version of the installed llama-cpp-python, unless the caller asked for another.
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-$("$PYTHON" -c 'import llama_cpp; print(llama_cpp.__version__)')}"
export LLAMA_CPP_PYTHON_VERSION
bin="$("$here/../scripts/build-llama-cpp" "${1:-cpu-native}" llama-server | tail -n 1)"
echo "$bin/llama-server"
