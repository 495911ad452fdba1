"""On a CPU with AMX, a -march=native build of this llama.cpp compiles ggml's AMX matmul and repacks Q4_0, Q4_1, Q8_0
and some K-quant weights into its AMX buffer, where products of several rows died with SIGSEGV: every worker start
on such a machine (bench/probes/RESULTS.md, "AMX"). scripts/build-llama-cpp leaves AMX out of native builds there.
The build make install made, switch on (exact mode) and off (fast mode): no weights in an AMX buffer, and two-row
decodes of the test model, and of a tiny LFM2 over two sequences (a weight times one activation matrix a sequence),
answer; each in a child process, as a crash there must fail the test rather than end the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.tiny_arch_models import write_tiny_model
from worker.engine.exactness.build_choice import BATCH_INVARIANT_DIR, LIB_PATH_ENV, SWITCH_ENV

CPUINFO = Path("/proc/cpuinfo")
pytestmark = pytest.mark.skipif(not (CPUINFO.exists() and "amx_int8" in CPUINFO.read_text().split()),
                                reason="this CPU has no AMX: no build compiles ggml's AMX matmul")

TWO_ROWS = """
import sys
import llama_cpp
sequences = int(sys.argv[2])
llama_cpp.llama_backend_init()
model = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), llama_cpp.llama_model_default_params())
params = llama_cpp.llama_context_default_params()
params.n_ctx, params.n_seq_max, params.n_threads, params.n_threads_batch = 256, sequences, 2, 2
ctx = llama_cpp.llama_init_from_model(model, params)
batch = llama_cpp.llama_batch_init(2, 0, 1)
for i in range(2):
    seq = i % sequences
    batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = 1, i // sequences, 1, seq, 1
batch.n_tokens = 2
print("decoded", llama_cpp.llama_decode(ctx, batch))
"""


def _assert_two_rows_decode(model: Path, sequences: int, switch: str) -> None:
    env = {**os.environ, LIB_PATH_ENV: str(BATCH_INVARIANT_DIR), SWITCH_ENV: switch}
    run = subprocess.run([sys.executable, "-c", TWO_ROWS, str(model), str(sequences)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert "AMX model buffer" not in run.stderr, run.stderr[-2000:]
    assert (run.returncode, run.stdout.split()) == (0, ["decoded", "0"]), run.stderr[-2000:]


@pytest.mark.parametrize("switch", ["1", "0"])
def test_two_rows_decode_without_the_amx_buffer(model_path, switch):
    _assert_two_rows_decode(model_path, 1, switch)


def test_a_weight_times_one_matrix_a_sequence_decodes(model_path, tmp_path):
    """LFM2's short convolutions multiply their in_proj weight by one activation matrix per sequence."""
    lfm2 = write_tiny_model("lfm2", tmp_path / "lfm2-q4_0.gguf", model_path, quant="Q4_0")
    _assert_two_rows_decode(lfm2, 2, "1")
