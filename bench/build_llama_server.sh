#!/usr/bin/env bash
# Build llama.cpp's llama-server from the exact llama.cpp source that the
# installed llama-cpp-python vendors, with the flags its wheel build uses, so the
# benchmark compares servers rather than compilers or llama.cpp revisions.
#
# Usage: bench/build_llama_server.sh            # prints the binary path on the last line
# Env:   LLAMA_CPP_PYTHON_VERSION  version to build (default: the one installed in $PYTHON)
#        LLAMA_CPP_PYTHON_SDIST    use this sdist tarball instead of `pip download`
#        CMAKE_ARGS                extra cmake flags, honoured like `pip install llama-cpp-python` does
#        BENCH_CACHE               cache dir (default ~/.cache/llm-worker/bench)
#        JOBS                      parallel build jobs (default: nproc)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-$here/../.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
version="${LLAMA_CPP_PYTHON_VERSION:-$("$PYTHON" -c 'import llama_cpp; print(llama_cpp.__version__)')}"
cache="${BENCH_CACHE:-$HOME/.cache/llm-worker/bench}"
# The flags are part of the cache key: a different CMAKE_ARGS is a different binary.
flags_key="$(printf '%s' "${CMAKE_ARGS:-}" | sha256sum | cut -c1-8)"
src="$cache/llama_cpp_python-$version"
build="$cache/build-$version-$flags_key"
bin="$build/bin/llama-server"

if [ -x "$bin" ]; then
    echo "llama-server already built (delete $build to rebuild)" >&2
    echo "$bin"
    exit 0
fi

mkdir -p "$cache"
if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
    sdist="${LLAMA_CPP_PYTHON_SDIST:-}"
    if [ -z "$sdist" ]; then
        "$PYTHON" -m pip download --no-deps --no-binary :all: \
            --dest "$cache" "llama-cpp-python==$version" >&2
        sdist="$(ls "$cache"/llama_cpp_python-"$version".tar.gz)"
    fi
    tar -xzf "$sdist" -C "$cache"
fi

# These mirror what llama-cpp-python's CMakeLists.txt forces when it builds the
# wheel (scikit-build-core defaults to a Release build): shared libs, the common
# library, no curl. Everything else (GGML_NATIVE, OpenMP, ...) is llama.cpp's
# default in both builds. The web UI is switched off because it is irrelevant to
# throughput and its prebuilt download would need network access.
# $CMAKE_ARGS comes last so it overrides, exactly as with pip.
# shellcheck disable=SC2086
cmake -S "$src/vendor/llama.cpp" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_BUILD_COMMON=ON \
    -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    ${CMAKE_ARGS:-} >&2
cmake --build "$build" --target llama-server -j "${JOBS:-$(nproc)}" >&2

echo "$bin"
