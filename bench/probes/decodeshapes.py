"""Probe: on which probe shapes do one-token decode cells give a cold prefill's logits?
(worker/engine/startup/load_check.py)

For each (prompt, kept, decoded): prefill `prompt` tokens as one chunk, then make its cells from `kept` on again,
`decoded` of them one token at a time and the rest as one chunk, and compare the last logits bitwise. One shape
that agrees proves little: startup/load_check.py checks several. Run (LLAMA_CPP_LIB_PATH=<a build's bin> for
another build):
  .venv/bin/python bench/probes/decodeshapes.py MODEL.gguf
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import worker.engine.startup.load_check as numerics
from worker.engine.native.model import EngineConfig, LlamaModel
from worker.logs import configure

SHAPES = [(64, 48, 8), (64, 48, 12), (64, 48, 15), (64, 21, 16), (64, 32, 16), (64, 40, 16), (64, 16, 40),
          (128, 96, 16), (64, 56, 4), (64, 60, 2)]


def main(path: str) -> None:
    configure("console", "warning")  # llama.cpp's load log would bury the results
    model = LlamaModel(Path(path), EngineConfig(ctx_size=4096, parallel=1))
    try:
        agreed = []
        for prompt, kept, decoded in SHAPES:
            numerics.PROBE_TOKENS, numerics.SHAPES = prompt, ((kept, decoded),)
            same = numerics.decode_matches_prefill(model)
            agreed.append(same)
            print(f"prompt {prompt:3d}, kept {kept:2d}, decoded {decoded:2d}: {'equal' if same else 'differ'}")
        print(f"{Path(path).name}: {sum(agreed)} of {len(SHAPES)} shapes equal")
    finally:
        model.close()


if __name__ == "__main__":
    for model_path in sys.argv[1:]:
        main(model_path)
