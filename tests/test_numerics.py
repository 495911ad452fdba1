"""The load-time check behind exact mode's reuse of answers (worker/engine/numerics.py), on this build."""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from worker.engine.model import EngineConfig, LlamaModel
from worker.engine.numerics import decode_matches_prefill, decoded_cells_exact


def test_the_check_sees_what_the_builds_kernels_do(model_path: Path):
    """llamafile's GEMM computes a prefill's rows other than one-row decode does (bench/probes/kvrule.py: 0.51 on
    the test model's logits), which is why a CPU build with it skips the measurement; built without it,
    decode-made cells are bitwise prefilled ones (tests/test_no_llamafile.py)."""
    model = LlamaModel(model_path, EngineConfig(ctx_size=1024, parallel=1))
    try:
        llamafile = b"LLAMAFILE = 1" in llama_cpp.llama_print_system_info()
        assert decode_matches_prefill(model) is (not llamafile)
        assert decoded_cells_exact(model) is (not llamafile)
        assert llama_cpp.llama_memory_seq_pos_max(model.memory, 0) == -1  # slot 0 left empty
    finally:
        model.close()
