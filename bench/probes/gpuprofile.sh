#!/usr/bin/env bash
# Probe: where the engine thread's time goes on a GPU, for one device call after `scripts/gpu-check stage` of part1
# (docs/gpu-check-commands.txt): the fast worker at 8 and 1 streams (bench/probes/streamload.py), without and then
# under py-spy (raw folded stacks to $OUT/spyN.txt), then the bundle's llama-server under the same load. The py-spy
# wheel travels in .gpu-probe/ (git-ignored there):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .gpu-probe py-spy
#   run(command="bash bench/probes/gpuprofile.sh", carry=[".gpu-bundle/part2", ".gpu-probe"])
# Env: STREAMS (default "8 1"), SPY_ARGS (more py-spy flags: --native shows the C frames under a Python call),
#      SERVERS (default "worker py-spy llama-server"; worker@S: the worker with sys.setswitchinterval(S), the time a
#      thread holds the GIL before one waiting for it may take it)
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
for streams in ${STREAMS:-8 1}; do
    for server in ${SERVERS:-worker py-spy llama-server}; do
        port=$((8090 + streams))
        serve=(python3 -m worker serve --backend cuda --model "$model" --parallel 8 --ctx-size 32768
               --prefix-cache fast --port "$port" --log-level warning)
        if [ "$server" = llama-server ]; then
            "$stage/core/lib/llama-server" -m "$model" -ngl 999 -np 8 -c 32768 --port "$port" > /dev/null 2>&1 &
        elif [ "${server%@*}" = worker ] && [ "$server" != worker ]; then
            python3 -c 'import runpy, sys; sys.setswitchinterval(float(sys.argv.pop(1))); sys.argv[0] = "worker"
runpy.run_module("worker", run_name="__main__")' "${server#worker@}" "${serve[@]:3}" > /dev/null 2>&1 &
        elif [ "$server" = py-spy ]; then
            /tmp/pyspy/bin/py-spy record ${SPY_ARGS:-} -r 250 -f raw -o "$OUT/spy$streams.txt" -- "${serve[@]}" \
                > "$OUT/server$streams.log" 2>&1 &
        else
            "${serve[@]}" > /dev/null 2>&1 &
        fi
        for _ in $(seq 60); do sleep 0.5; curl -sf "localhost:$port/health" > /dev/null && break; done
        echo "== streams=$streams $server"
        timeout 120 python3 bench/probes/streamload.py "http://127.0.0.1:$port" "$streams" 6
        pkill -INT -f "serve --backend cuda|llama-server -m"
        for _ in $(seq 30); do pgrep -f "serve --backend cuda|llama-server -m" > /dev/null || break; sleep 0.5; done
        pkill -9 -f "serve --backend cuda|llama-server -m"
        wait
    done
done
