"""Probe: the RMS norm epsilon a qwen2vl GGUF (Qwen2-VL, Qwen2.5-VL) loads with, and what it changes (patch 0011).

The test model rewritten as qwen2vl (tests/mrope_helpers.py: its keys renamed, its Q/K rows in NEOX order, so that
text computes as the source's) against the source itself and against the source with its epsilon set to 0: the
epsilon llama.cpp's print_info reports for the rewrite, the largest difference of the first answer token's logits
over a chat prompt, and whether greedy answers of 32 tokens are equal. Run with a build's libraries, before and after
the patch: LLAMA_CPP_LIB_PATH=DIR .venv/bin/python bench/probes/qwen2vl_epsilon.py [MODEL.gguf]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from llama_cpp import Llama

from bench.config import find_model
from tests.gguf_files import read_gguf
from tests.mrope_helpers import build_mrope_model

PROMPTS = ("List three prime numbers and say why each is prime.", "What is the capital of France?",
           "Write one sentence about the sea.")
EPSILON_KEY = "llama.attention.layer_norm_rms_epsilon"


def with_epsilon(source: Path, out: Path, epsilon: float) -> Path:
    """`source` with its RMS norm epsilon set to `epsilon`, every other key and tensor as it is."""
    import gguf

    reader = read_gguf(source)
    writer = gguf.GGUFWriter(out, reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = epsilon if field.name == EPSILON_KEY else field.contents()
        kind = field.types[0]
        writer.add_key_value(field.name, value, kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def loaded_epsilon(model: Path) -> str:
    """What llama.cpp's print_info says the model's epsilon is (its log goes to stderr: read back from a file)."""
    with tempfile.TemporaryFile("w+") as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            Llama(str(model), n_ctx=256, verbose=True)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        return next(line.split("=")[1].strip() for line in log if "f_norm_rms_eps" in line)


def answers(model: Path) -> tuple[np.ndarray, list[str]]:
    """The first answer token's logits for PROMPTS[0], and each prompt's greedy answer."""
    llm = Llama(str(model), n_ctx=512, n_batch=512, logits_all=True, verbose=False)
    llm.create_chat_completion([{"role": "user", "content": PROMPTS[0]}], max_tokens=1, temperature=0)
    logits = np.array(llm.scores[llm.n_tokens - 1], np.float32)  # the prompt's last row
    texts = [llm.create_chat_completion([{"role": "user", "content": prompt}], max_tokens=32, temperature=0)
             ["choices"][0]["message"]["content"] for prompt in PROMPTS]
    return logits, texts


def main() -> None:
    source = find_model(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"library: {os.environ.get('LLAMA_CPP_LIB_PATH', 'llama-cpp-python own')}")
    with tempfile.TemporaryDirectory() as folder:
        rewrite = build_mrope_model(source, Path(folder) / "qwen2vl.gguf")
        no_epsilon = with_epsilon(source, Path(folder) / "epsilon0.gguf", 0.0)
        print(f"qwen2vl rewrite loads with f_norm_rms_eps = {loaded_epsilon(rewrite)} "
              f"(the file says {read_gguf(rewrite).fields['qwen2vl.' + EPSILON_KEY.split('.', 1)[1]].contents():.1e})")
        ours, our_texts = answers(rewrite)
        for name, model in (("source", source), ("source with epsilon 0", no_epsilon)):
            theirs, their_texts = answers(model)
            equal = sum(a == b for a, b in zip(our_texts, their_texts))
            print(f"against the {name}: first token's logits differ by at most {np.abs(ours - theirs).max():.4f}; "
                  f"greedy answers equal: {equal} of {len(PROMPTS)}")


if __name__ == "__main__":
    main()
