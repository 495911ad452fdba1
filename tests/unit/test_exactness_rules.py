"""What exact and off modes choose before a model loads, from the flags alone: the attention (exactness/kv_plan.py);
tests/model/test_exactness_rules.py holds the llama.cpp library (exactness/build_choice.py) and the ggml CPU settings
(exactness/ggml_switches.py) per weight type. Rules only; tests/model/test_numerics.py measures what they buy."""

from __future__ import annotations

from collections import Counter

import gguf
import numpy as np
import pytest

from worker.engine.config import EngineConfig
from worker.engine.exactness.kv_plan import Attention, config_attention, plan_attention
from worker.engine.exactness.tensor_table import weight_product_types
from worker.engine.modes import CacheMode, SpecType
from worker.worker_error import WorkerError

EXACT, OFF, FAST = CacheMode.EXACT, CacheMode.OFF, CacheMode.FAST
PINNED = Attention("on", "q8_0", "f16", pinned=True)
UNFUSED = Attention("off", "f16", "f16", pinned=False)


@pytest.mark.parametrize(("backend", "rpc", "mode", "flash", "k", "v", "expected"), [
    ("cpu", False, EXACT, "auto", None, None, PINNED),
    ("cpu", False, OFF, "auto", None, None, PINNED),  # off computes as exact does: their texts are compared
    ("cpu", False, EXACT, "on", None, None, PINNED),
    ("cpu", False, EXACT, "auto", "f16", None, Attention("on", "f16", "bf16", pinned=True)),
    ("cpu", False, EXACT, "auto", "q8_0", "q8_0", Attention("on", "q8_0", "q8_0", pinned=True)),  # K not F16: no tiling
    ("cpu", False, EXACT, "auto", "f16", "f16", UNFUSED),  # one F16 type would let llama.cpp pick by shape
    ("cpu", False, EXACT, "off", None, None, UNFUSED),
    ("cpu", False, EXACT, "off", "q8_0", None, Attention("off", "q8_0", "f16", pinned=False)),
    ("cpu", True, EXACT, "auto", None, None, UNFUSED),
    ("cuda", False, EXACT, "auto", None, None, UNFUSED),
    ("cpu", False, FAST, "auto", None, None, Attention("auto", "f16", "f16", pinned=False)),
    ("cuda", False, FAST, "on", "q8_0", "q8_0", Attention("on", "q8_0", "q8_0", pinned=False)),
])
def test_attention_plan(backend, rpc, mode, flash, k, v, expected):
    assert plan_attention(backend, rpc, mode, flash, k, v) == expected


@pytest.mark.parametrize(("backend", "rpc", "flash", "v", "named"), [
    ("cpu", False, "on", "f16", "--cache-type-v other than f16"),  # with --cache-type-k f16, below
    ("cuda", False, "on", None, "needs the cpu backend"),
    ("cpu", True, "on", None, "without --rpc"),
    ("cpu", False, "off", "q8_0", "--cache-type-v q8_0 needs flash attention"),
    ("cuda", False, "auto", "bf16", "--cache-type-v bf16 needs flash attention"),
])
def test_attention_flags_that_break_exactness_say_what_to_change(backend, rpc, flash, v, named):
    with pytest.raises(WorkerError, match=named):
        plan_attention(backend, rpc, EXACT, flash, "f16" if v == "f16" else None, v)


def test_weight_types_of_files_that_are_not_gguf(tmp_path):
    for name, content in (("truncated", b"GGUF" + b"\0" * 64), ("empty", b""), ("other", b"PK\3\4" + b"\0" * 60)):
        bogus = tmp_path / f"{name}.gguf"
        bogus.write_bytes(content)
        assert not weight_product_types(bogus)
    assert not weight_product_types(tmp_path / "missing.gguf")


def test_weight_types_are_read_past_a_vocabulary_and_a_header_cut_in_it_is_not_read(tmp_path):
    """The header's string arrays (a vocabulary, its merges) are walked by their lengths alone: the tensors after
    them are found, and a file cut inside them, or a length running past its end, reads as no GGUF."""
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_token_list([f"token-{i}" for i in range(5000)])
    writer.add_array("tokenizer.ggml.merges", [f"t {i}" for i in range(3000)])
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), np.float16))
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((4, 32), np.float16))
    writer.add_tensor("blk.0.attn_norm.weight", np.zeros(32, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    # the embedding counts too: no output.weight, so the model ties its output to it
    assert weight_product_types(path) == Counter({"F16": 2})
    whole = path.read_bytes()
    vocabulary_at = whole.index(b"token-2500")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:vocabulary_at])
    assert not weight_product_types(cut)
    overlong = tmp_path / "overlong.gguf"
    length_at = vocabulary_at - 8  # token-2500's byte count, just before it
    overlong.write_bytes(whole[:length_at] + (len(whole)).to_bytes(8, "little") + whole[length_at + 8:])
    assert not weight_product_types(overlong)


def test_heads_too_narrow_for_q8_0_blocks_keep_k_in_f16_and_v_in_bf16():
    """q8_0 packs 32 values a block; a model with 16-wide heads cannot store K that way, so exact mode takes the
    other pinned pair (and a K type the user named is left to llama.cpp to accept or refuse)."""
    assert plan_attention("cpu", False, EXACT, "auto", None, None, head_size=16) == Attention("on", "f16", "bf16", True)
    assert plan_attention("cpu", False, EXACT, "auto", None, None, head_size=64) == PINNED
    assert plan_attention("cpu", False, EXACT, "auto", "q8_0", None, head_size=16).cache_type_k == "q8_0"


def test_a_mode_given_by_its_name_is_that_mode():
    """The engine tells modes apart by identity: a config built with the name "fast" must not run as exact."""
    config = EngineConfig(prefix_cache="fast", spec_type="ngram")
    assert config.prefix_cache is FAST and config.spec_type is SpecType.NGRAM
    assert config_attention(config) == Attention("auto", "f16", "f16", pinned=False)
    with pytest.raises(ValueError):
        EngineConfig(prefix_cache="fastest")


@pytest.mark.parametrize("mode, backend, rpc, drafting_there", [
    ("exact", "cpu", (), SpecType.NGRAM), ("off", "cpu", (), SpecType.NGRAM),
    ("fast", "cpu", (), SpecType.NONE), ("exact", "cuda", (), SpecType.NONE),
    ("exact", "cpu", ("10.0.0.2:50052",), SpecType.NONE)])
def test_auto_drafts_by_prompt_lookup_only_where_rows_are_kept_apart(mode, backend, rpc, drafting_there):
    """--spec-type auto (the default) drafts where a drafted row computes as a one-token decode would, so drafts cannot
    change the text; where llama.cpp picks kernels by batch shape it drafts none. A flag given is what runs."""
    def drafting(spec_type: str) -> SpecType:
        return EngineConfig(prefix_cache=mode, backend=backend, rpc_servers=rpc, spec_type=spec_type).drafting

    assert drafting("auto") is drafting_there
    assert drafting("ngram") is SpecType.NGRAM and drafting("none") is SpecType.NONE
