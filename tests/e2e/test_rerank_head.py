"""The rank route: a GGUF with pooling_type rank and a classification head, as Qwen3-Reranker's conversion makes one
(cls.output = the LM head's "yes" and "no" rows, llama.cpp's rank pooling softmaxes them). Made here from a tiny
random-weight Qwen3 (tests/fixtures/tiny_models.py), whose scores mean nothing in themselves, so the assertion is
the recipe's identity: the head's p(yes) equals what the same model without the head scores by the yes/no route
(sigmoid of its own yes and no logits) for the same prompts, the GGUF's rerank template on both."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType, GGUFWriter, Keys, PoolingType

from tests.conftest import start_worker
from tests.convert_helpers import oracle, post
from tests.fixtures.tiny_models import make_tiny
from tests.gguf_files import read_gguf
from worker.source.convert import Conversion, converted_model

TEMPLATE = "<|im_start|>user\nQuery: {query}\nDocument: {document}<|im_end|>\n<|im_start|>assistant\n"
QUERY = "Where do lions live?"
DOCUMENTS = ["Lions live in Africa.", "The piano has 88 keys.", "Rain falls from clouds.", "Lions hunt at night."]


def rewritten(source: Path, out: Path, head: tuple[int, int] | None) -> Path:
    """`source` with a rerank template, and with `head` (the yes and no token ids) also a rank head and pooling."""
    reader = read_gguf(source)
    arch = reader.fields[Keys.General.ARCHITECTURE].contents()
    writer = GGUFWriter(out, arch)
    for field in reader.fields.values():
        if field.name != Keys.General.ARCHITECTURE and not field.name.startswith("GGUF."):
            sub = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    writer.add_string(f"{Keys.Tokenizer.CHAT_TEMPLATE}.rerank", TEMPLATE)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    if head is not None:
        writer.add_pooling_type(PoolingType.RANK)
        writer.add_classifier_output_labels(["yes", "no"])
        rows = next(t for t in reader.tensors if t.name == "token_embd.weight").data  # tied: the LM head too
        writer.add_tensor("cls.output.weight", np.stack([rows[head[0]], rows[head[1]]]))  # F16, as the rows
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def scores(url: str) -> list[float]:
    ranked = post(url + "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})["results"]
    return [score for _, score in sorted((r["index"], r["relevance_score"]) for r in ranked)]


def test_a_rank_head_from_the_lm_heads_yes_and_no_rows_scores_as_the_yes_no_route(model_path, tmp_path, monkeypatch):
    folder = make_tiny("qwen3", tmp_path / "tiny-qwen3", oracle(model_path).f32)  # the oracle from the user cache
    monkeypatch.setenv("LLM_WORKER_CACHE", str(tmp_path / "cache"))  # the conversion in this test's own
    tiny = converted_model(folder, Conversion())
    plain = rewritten(tiny, tmp_path / "generative.gguf", None)
    worker = start_worker(tmp_path, "--model", str(plain), "--parallel", "2", "--ctx-size", "512")
    try:
        yes, no = (post(worker.url + "/tokenize", {"content": word})["tokens"][0] for word in ("yes", "no"))
        by_logits = scores(worker.url)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    ranker = start_worker(tmp_path, "--model", str(rewritten(tiny, tmp_path / "ranker.gguf", (yes, no))),
                          "--parallel", "2", "--ctx-size", "512")
    try:
        by_head = scores(ranker.url)
        assert by_head == scores(ranker.url)  # the same every time
        assert '"rerank": "rank"' in ranker.log() or '"rerank":"rank"' in ranker.log()
    finally:
        assert ranker.stop() == 0, ranker.log()[-3000:]
    assert by_head == pytest.approx(by_logits, abs=1e-4)
    assert len(set(by_head)) == len(DOCUMENTS)  # the scores depend on the document
