"""A Qwen2-VL-style (M-RoPE) test model and projector, built from the test model, and llama.cpp's own answer to them.

No model that places images by M-RoPE is within reach of these machines, so the tests build one with gguf-py:

- build_mrope_model: SmolLM2-135M rewritten as llama.cpp's `qwen2vl` architecture (src/models/qwen2vl.cpp), every
  tensor and key kept. Its rope is M-RoPE (LLAMA_ROPE_TYPE_MROPE): the rotary dimensions are cut into sections
  (qwen2vl.rope.dimension_sections) that turn by a token's time, row and column positions, with NEOX's pairing of
  halves. A text token's three positions are equal (llama-graph.cpp, llm_graph_input_pos::set_input: its position
  thrice, then 0 for the unused fourth section), which makes M-RoPE NEOX rope exactly. The llama architecture pairs
  neighbours instead (NORM rope), for which convert_hf_to_gguf.py permutes the rows of attn_q and attn_k within each
  head (LlamaModel.permute); undoing that permutation gives the same attention under NEOX. A row of a Q4_1 tensor is
  whole blocks: rows are reordered as they are stored. (The vendored llama.cpp's qwen2vl loader read no RMS-norm
  epsilon, so every norm ran with 0 for the file's 1e-5, as a real Qwen2-VL's did: patch 0011 reads it.) Q.K summed
  in another order (NEOX's halves, not pairs) moves the logits as much as another batch size moves the test model's
  own (up to ~1 logit: this model is that sensitive), so a greedy answer can part from the test model's at a
  near-tie.
- build_mrope_projector: llama.cpp's `qwen2vl_merger` projector (tools/mtmd/models/qwen2vl.cpp) made, like
  tests/vision_helpers.py's janus_pro projector, to turn an image of one colour into that colour's word: the two
  patch-embedding kernels (Qwen2-VL's temporal pair, both applied to a still image and summed) each average half of
  each 14x14 patch's red, green and blue into three features (mean 0, std 1: a channel is 0..1); one ViT block,
  the fewest the graph allows (with none, its "positions" input is no graph node and clip.cpp aborts setting it),
  whose writes into the residual stream are ~1e-4, so the features pass through; the merger joins each 2x2 of
  patches, its first layer averages the four and scales them past GELU's bend (as vision_helpers.SCALE), its second
  maps them onto the colour words' embeddings, from the model's own token_embd.

mtmd resizes a qwen2vl image to multiples of 28 (patch 14 x merge 2) holding 8 to 4096 merged tokens
(clip.cpp: set_limit_image_tokens(8, 4096); mtmd-image.cpp: calc_size_preserved_ratio), so an IMAGE_SIZE square
stays as it is: 8 x 8 patches, 4 x 4 merged tokens, and under M-RoPE the image takes max(4, 4) positions
(mtmd_image_tokens_get_n_pos), all its tokens at its first position in time, their rows and columns counting on from
it (mtmd_image_tokens_get_decoder_pos); the text after it goes on 4 positions later (mtmd_helper_eval_chunks).
mtmd writes Qwen2-VL's "<|vision_start|>" and "<|vision_end|>" as text around the image; SmolLM2's vocabulary lacks
them, so they are tokenized as plain text, which the model reads past.

libmtmd_answer is the oracle the worker's answers are held to: the prompt evaluated by llama.cpp's own helper,
which positions every chunk as upstream does, and decoded greedily.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import gguf
import jinja2.sandbox
import numpy as np

from tests.gguf_files import read_gguf
from tests.vision_helpers import (
    SCALE,
    WORDS,
    add_colour_mlp,
    add_vit_block,
    channel_means,
    token_embeddings,
    vision_writer,
)

ARCH = "qwen2vl"
# The rotary dimensions' pairs (head_dim 64: 32) by time, row, column and the unused fourth: Qwen2-VL's proportions.
ROPE_SECTIONS = (8, 12, 12, 0)

PATCH = 14  # Qwen2-VL's
MERGE = 2  # clip.cpp's default spatial_merge_size for qwen2vl: 2 x 2 patches a token
IMAGE_SIZE = 112  # 8 x 8 patches
GRID = IMAGE_SIZE // (PATCH * MERGE)  # 4 x 4 merged tokens
IMAGE_TOKENS = GRID * GRID  # 16
IMAGE_POSITIONS = GRID  # max(rows, columns)

# The vision tower: width HIDDEN (r, g, b and zeros), one head, an FFN wider than it (clip.cpp swaps up and down
# for qwen2vl where ffn_down's input width equals the tower's).
HIDDEN = 8
FFN = 16
RESIDUAL_SCALE = 1e-4

MARKER = "<__media__>"  # mtmd's default media marker, what libmtmd_answer's prompts hold
N_CTX = 1024


def build_mrope_model(source: Path, out: Path) -> Path:
    """`source` (a llama-architecture GGUF) as a qwen2vl model at `out`: its keys under qwen2vl's names, the rope
    sections added, attn_q and attn_k rows in NEOX order, every tensor in its own type."""
    reader = read_gguf(source)
    prefix = f"{reader.fields['general.architecture'].contents()}."
    writer = gguf.GGUFWriter(out, ARCH)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these
        name = ARCH + "." + field.name.removeprefix(prefix) if field.name.startswith(prefix) else field.name
        kind = field.types[0]
        writer.add_key_value(name, field.contents(), kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    writer.add_rope_dimension_sections(list(ROPE_SECTIONS))
    heads = {"attn_q": reader.fields[prefix + "attention.head_count"].contents(),
             "attn_k": reader.fields[prefix + "attention.head_count_kv"].contents()}
    for tensor in reader.tensors:
        data = tensor.data
        kind = tensor.name.split(".")[-2]
        if kind in heads:
            data = data[_neox_order(len(data), heads[kind])]
        writer.add_tensor(tensor.name, data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _neox_order(rows: int, heads: int) -> np.ndarray:
    """The inverse of convert_hf_to_gguf.py's LlamaModel.permute, as row indices: within each head, stored row
    2i + j holds the head's row j * half + i (the HF checkpoint's, whose halves NEOX rope pairs)."""
    half = rows // heads // 2
    return np.arange(rows).reshape(heads, half, 2).swapaxes(1, 2).reshape(rows)


def build_mrope_projector(model: Path, out: Path) -> Path:
    """The colour projector for `model` (its token_embd gives the words) as a qwen2vl_merger, written to `out`."""
    words = token_embeddings(model, WORDS)  # (3, n_embd)
    n_embd = words.shape[1]
    writer = vision_writer(out, "qwen2vl_merger", IMAGE_SIZE, PATCH, HIDDEN, FFN, 1, n_embd, 1)
    writer.add_uint32("clip.vision.spatial_merge_size", MERGE)
    patch = channel_means(HIDDEN, PATCH, share=0.5)  # a still image meets both kernels: each averages half
    writer.add_tensor("v.patch_embd.weight", patch)
    writer.add_tensor("v.patch_embd.weight.1", patch)
    add_vit_block(writer, "v.blk.0", HIDDEN, FFN, RESIDUAL_SCALE, np.random.default_rng(0))
    # The merger's input is the 2x2 patches' features side by side, numpy (out, in): feature c of the four, averaged.
    join = np.zeros((HIDDEN, MERGE * MERGE * HIDDEN), np.float32)
    for part in range(MERGE * MERGE):
        join[np.arange(3), part * HIDDEN + np.arange(3)] = SCALE / (MERGE * MERGE)
    add_colour_mlp(writer, ("mm.0", "mm.2"), join, words)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def chat_prompt(model: Path, content: str, system: str | None = None) -> str:
    """One user message (`content`, MARKER where an image is; after a `system` message, if given) in the model's own
    chat template, the assistant's turn opened, as libmtmd_answer takes it."""
    template = read_gguf(model).fields["tokenizer.chat_template"].contents()
    render = jinja2.sandbox.ImmutableSandboxedEnvironment().from_string(template).render
    messages = [{"role": "system", "content": system}] if system is not None else []
    return render(messages=[*messages, {"role": "user", "content": content}], add_generation_prompt=True)


def libmtmd_answer(model: Path, projector: Path, image_png: bytes, prompt_text: str, max_tokens: int,
                   exact: bool = False) -> str:
    """llama.cpp's greedy answer to `prompt_text` (its MARKER replaced by the image), evaluated by
    mtmd_helper_eval_chunks in a fresh context. `exact`: with exact mode's numerics on the cpu backend (the
    batch-invariant build, its switch on, flash attention on, F16 cells: worker/engine/exactness/), under which a
    row's logits do not depend on how its prompt was cut, so the worker's answer must be this one to the byte. It
    runs in a child process of its own: a second copy of the model and libmtmd's state stay out of the test process,
    the switch is read when the library loads, and a native abort fails the call, not the test run."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_answer, model, projector, image_png, prompt_text, max_tokens, exact).result()


def _answer(model: Path, projector: Path, image_png: bytes, prompt_text: str, max_tokens: int, exact: bool) -> str:
    if exact:
        from worker.engine.exactness.build_choice import BATCH_INVARIANT_DIR, LIB_PATH_ENV, SWITCH_ENV

        os.environ[LIB_PATH_ENV] = str(BATCH_INVARIANT_DIR)
        os.environ[SWITCH_ENV] = "1"
    # libmtmd calls into libllama: it must come from the same build (worker/engine/exactness/build_choice.py).
    if "LLAMA_CPP_LIB_PATH" in os.environ:
        os.environ["MTMD_CPP_LIB"] = os.environ["LLAMA_CPP_LIB_PATH"]
    import llama_cpp
    from llama_cpp import mtmd_cpp as mtmd

    def piece(token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)  # every piece of these vocabularies fits
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
        return buf.raw[:n]

    llama_cpp.llama_backend_init()
    lmodel = llama_cpp.llama_model_load_from_file(str(model).encode(), llama_cpp.llama_model_default_params())
    if not lmodel:
        raise RuntimeError(f"llama.cpp could not load {model} (its log says why)")
    vocab = llama_cpp.llama_model_get_vocab(lmodel)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = N_CTX  # the whole prompt, image included, in one batch
    if exact:
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    lctx = llama_cpp.llama_init_from_model(lmodel, params)
    mparams = mtmd.mtmd_context_params_default()
    mparams.use_gpu = False
    mparams.warmup = False  # no encode of a 1288-pixel square (clip.cpp: set_warmup_n_tokens(46*46)) for nothing
    ctx = mtmd.mtmd_init_from_file(str(projector).encode(), lmodel, mparams)
    if not (lctx and ctx):
        raise RuntimeError(f"llama.cpp could not load {projector} beside {model} (its log says why)")
    sampler = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_greedy())
    buf = (ctypes.c_uint8 * len(image_png)).from_buffer_copy(image_png)
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(ctx, buf, len(image_png), False)
    if not bitmap:
        raise RuntimeError("the image is not one stb_image decodes")
    chunks = mtmd.mtmd_input_chunks_init()
    batch = llama_cpp.llama_batch_init(1, 0, 1)
    try:
        text = prompt_text.encode()
        bos = piece(llama_cpp.llama_vocab_bos(vocab))
        # As the worker tokenizes a chat: BOS where the model asks for one and the template has not written it.
        add_bos = llama_cpp.llama_vocab_get_add_bos(vocab) and not text.startswith(bos)
        source = mtmd.mtmd_input_text(text, len(text), add_bos, True)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        if mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(source), bitmaps, 1) != 0:
            raise RuntimeError("mtmd_tokenize failed")
        n_past = llama_cpp.llama_pos(0)
        if mtmd.mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, N_CTX, True, ctypes.byref(n_past)) != 0:
            raise RuntimeError("mtmd_helper_eval_chunks failed")
        pieces: list[bytes] = []
        for _ in range(max_tokens):
            token = llama_cpp.llama_sampler_sample(sampler, lctx, -1)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            pieces.append(piece(token))
            batch.n_tokens = 1
            batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = token, n_past.value, 1, True
            batch.seq_id[0][0] = 0
            if llama_cpp.llama_decode(lctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            n_past.value += 1
        return b"".join(pieces).decode("utf-8", errors="replace")
    finally:
        llama_cpp.llama_batch_free(batch)
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)
        llama_cpp.llama_sampler_free(sampler)
        mtmd.mtmd_free(ctx)
        llama_cpp.llama_free(lctx)
        llama_cpp.llama_model_free(lmodel)
