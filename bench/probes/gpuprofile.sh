#!/usr/bin/env bash
# Probe: where the engine thread's time goes on a GPU, for one device call after `scripts/gpu-check stage` of part1
# (docs/gpu-check-commands.txt): the fast worker at 8 and 1 streams (bench/probes/streamload.py), without and then
# under py-spy (raw folded stacks to $OUT/spyN.txt). The py-spy wheel travels in .gpu-probe/ (git-ignored there):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .gpu-probe py-spy
#   run(command="bash bench/probes/gpuprofile.sh", carry=[".gpu-bundle/part2", ".gpu-probe"])
set -u
stage=.gpu-stage
scripts/gpu-check stage .gpu-bundle/part2 > /dev/null || exit 1
scripts/gpu-check smoke > /dev/null
model=$stage/model.gguf
[ -f "$model" ] || cat "$stage"/*.gguf.xz.[0-9]* | xz -dc > "$model"
cublas=$(python3 -c 'import glob, os, sys; print(":".join(sorted({os.path.dirname(p) for d in sys.path if d
         for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcublas.so.*"))})))')
export LLAMA_CPP_LIB_PATH=$PWD/$stage/core/lib LD_LIBRARY_PATH=$PWD/$stage/core/lib:$cublas PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/$stage/core/python:$PWD/$stage/core/site:$PWD
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .gpu-probe/py_spy*.whl
for streams in 8 1; do
    for spy in no yes; do
        port=$((8090 + streams))
        serve=(python3 -m worker serve --backend cuda --model "$model" --parallel 8 --ctx-size 32768
               --prefix-cache fast --port "$port" --log-level warning)
        if [ "$spy" = yes ]; then
            /tmp/pyspy/bin/py-spy record -r 250 -f raw -o "$OUT/spy$streams.txt" -- "${serve[@]}" \
                > "$OUT/server$streams.log" 2>&1 &
        else
            "${serve[@]}" > /dev/null 2>&1 &
        fi
        for _ in $(seq 60); do sleep 0.5; curl -sf "localhost:$port/health" > /dev/null && break; done
        echo "== streams=$streams py-spy=$spy"
        timeout 120 python3 bench/probes/streamload.py "http://127.0.0.1:$port" "$streams" 6
        pkill -INT -f "worker serve --backend cuda"
        for _ in $(seq 30); do pgrep -f "worker serve --backend cuda" > /dev/null || break; sleep 0.5; done
        pkill -9 -f "worker serve --backend cuda"
        wait
    done
done
