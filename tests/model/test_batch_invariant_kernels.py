"""The batch-invariant build as exact mode loads it (patches/llama.cpp with GGML_CPU_BATCH_INVARIANT=1, K and V cells
in f16, flash attention on), for every weight type of the per-type table: a 575-token prompt's last logits are
bitwise the whole prompt's whether it is cut into chunks of 1, 16, 48, 64, 100, 256 or 512 rows; an answer's cells,
decoded one at a time past the 512 cells where llama.cpp's own kernel splits a lone row's KV, continue as a
prefill's do; a row's logits are its own beside other streams' decode rows and prefill chunks; and cells loaded from
host memory into another stream (llama_state_seq_set_data, --cache-ram), or copied there (llama_memory_seq_cp),
continue as where they were made. bench/probes/batchinvariance.py measures it, in a child process: a process binds
one libllama, and this one has llama-cpp-python's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.probes.batchinvariance import TYPES, kernel_env
from worker.engine.exactness.build_choice import BATCH_INVARIANT_DIR, LIB_PATH_ENV, SWITCH_ENV, default_dir

PROBE = Path(__file__).parents[2] / "bench" / "probes" / "batchinvariance.py"
REPEAT = 35  # the probe's filler sentences: a 575-token prompt (its default 690), past 512 cells all the same


def _gaps(path: Path, qtype: str, threads: int = 2) -> dict[str, float]:
    env = {**os.environ, **kernel_env("patched", qtype, str(BATCH_INVARIANT_DIR))}
    run = subprocess.run([sys.executable, str(PROBE), f"--repeat={REPEAT}", f"--threads={threads}", "--child",
                          str(path)], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.probe
@pytest.mark.parametrize("qtype", TYPES)
def test_a_row_ignores_its_batch_its_cuts_and_where_its_cells_came_from(qtype, model_path, quantized):
    """Each type at the 2 threads the tests run with. A probe of the patched kernels (~30 s a type on 2 cores): make
    test-probes runs it, after a change to patches/ or the build, and CI after make test; make test's exact-mode
    tests hold the worker's text to it on the test model (Q4_1) and Q4_K_M."""
    gaps = _gaps(model_path if qtype == "q4_1" else quantized(qtype), qtype)  # the test model is Q4_1
    assert gaps == dict.fromkeys(gaps, 0.0), gaps


@pytest.mark.probe
@pytest.mark.parametrize(("qtype", "threads"), [("q4_1", 1), ("q4_1", 3), ("q4_1", 4), ("q4_k_m", 3)])
def test_at_any_thread_count_as_at_two(qtype, threads, model_path, quantized):
    """patches/README.md: a row's sums do not depend on how many threads share them (0005's segments are fixed
    cells, not one per thread). Every case at 1, 3 and 4 threads (past the 2 cores: only bits are compared), and
    the prompt's logits against 2 threads'; K-quants (0003's tiled vec_dot) at 3, which splits rows unevenly. Each
    type at 2 threads: the test above. A probe too (about 3.5 minutes on 2 cores): make test-probes runs it; the
    worker itself runs at the one thread count it is given."""
    gaps = _gaps(model_path if qtype == "q4_1" else quantized(qtype), qtype, threads)
    assert "2 threads" in gaps and gaps == dict.fromkeys(gaps, 0.0), gaps


@pytest.mark.parametrize(("library", "switch", "on"), [("patched", "1", True), ("patched", "0", False),
                                                       ("default", "1", True), ("default", "0", False)])
def test_the_switch_is_asked_of_the_loaded_ggml(library, switch, on):
    """ggml_switches.switch_is_on: true only where the loaded ggml has the switch and read it on. make install's
    llama_cpp/lib is the same patched build (fast mode leaves the switch off); a ggml without the switch: below."""
    where = str(BATCH_INVARIANT_DIR) if library == "patched" else str(default_dir())
    code = ("import sys, llama_cpp; from worker.engine.exactness.ggml_switches import switch_is_on; "
            "print(switch_is_on(sys.argv[1]))")
    env = {**os.environ, LIB_PATH_ENV: where, SWITCH_ENV: switch}
    run = subprocess.run([sys.executable, "-c", code, where], env=env, capture_output=True, text=True,
                         cwd=Path(__file__).parents[2], timeout=120)
    assert run.stdout.strip().splitlines()[-1] == str(on), run.stderr[-2000:]


def test_a_ggml_without_the_switch_has_it_off(tmp_path):
    """llama-cpp-python's own compile (a plain pip install) has no ggml_cpu_batch_invariant: a libggml-cpu.so with
    only the CPU backend's registration stands in for it."""
    source = tmp_path / "cpu.c"
    source.write_text("void *ggml_backend_cpu_reg(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libggml-cpu.so"), str(source)], check=True)
    code = ("import sys; from worker.engine.exactness.ggml_switches import switch_is_on; "
            "print(switch_is_on(sys.argv[1]))")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env={**os.environ, SWITCH_ENV: "1"},
                         capture_output=True, text=True, cwd=Path(__file__).parents[2], timeout=120)
    assert run.stdout.strip() == "False", run.stderr[-2000:]
