#!/usr/bin/env python3
"""A hybrid model of a real shape for the chat benchmark: LFM2-1.2B's width, depth and layer pattern (short
convolutions and 6 attention layers in 16) with random weights and the test model's vocabulary, written with gguf-py
(tests/fixtures/tiny_arch_models.py, LFM2_1_2B) and quantized Q4_K_M by llama.cpp's own quantizer. Cached under
--out; prints the file's path.
Run: .venv/bin/python bench/hybrid_model.py, then bench/run.py chat --model PATH (bench/CHAT-HYBRID.md)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.config import BENCH_DIR, find_model
from tests.fixtures.tiny_arch_models import LFM2_1_2B, write_tiny_model
from worker.engine.host import quantize_model
from worker.logs import configure


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    p.add_argument("--quant", default="q4_k_m")
    args = p.parse_args(argv)
    configure("console", "info")  # the quantizer's progress, not llama.cpp's every line
    target = args.out / f"lfm2-1.2b-shape.{args.quant}.gguf"
    if not target.exists():
        args.out.mkdir(parents=True, exist_ok=True)
        f16 = args.out / "lfm2-1.2b-shape.f16.gguf"
        if not f16.exists():
            write_tiny_model("lfm2", f16, find_model(None), quant="F16", shape=LFM2_1_2B)
        quantize_model(f16, target, args.quant)
        f16.unlink()
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
