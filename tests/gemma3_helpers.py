"""A Gemma 3-style test projector for the test model: images that llama.cpp decodes with non-causal attention.

No Gemma 3 is within reach of these machines, so the tests build, with gguf-py, llama.cpp's `gemma3` projector
(tools/mtmd/models/siglip.cpp: a SigLIP encoder, an average pool, an RMS norm and a projection) for SmolLM2-135M,
made like tests/vision_helpers.py's janus_pro projector to turn an image of one colour into that colour's word. What
sets gemma3 apart is how its images are decoded: mtmd_decode_use_non_causal is true for it, so mtmd_helper turns the
context's causal attention off (llama_set_causal_attn) while it decodes an image, and each image token attends to
every cell of its sequence in the KV cache and every token of its ubatch, the image's later tokens included
(llama-kv-cache.cpp: the non-causal mask drops no position); llama_decode asserts that such a batch fits one ubatch.

- The patch embedding averages each 8x8 patch's red, green and blue into three features (mean 0, std 1: a channel
  is 0..1), no encoder layers (the siglip graph, unlike qwen2vl's, needs none) and no position embedding (optional).
- The graph pools 4x4 patches into a token (clip.cpp's default for gemma3, n_merge 4, left to it: no
  clip.vision.projector.scale_factor key, as in a real Gemma 3's file), so an IMAGE_SIZE square (mtmd resizes every
  image to it, bilinear) is 8 x 8 patches and 2 x 2 tokens. Why 4 tokens: this model's answers sit near ties, and
  with 4 it names all three colours under both the default build and exact mode's (tests/mrope_helpers.py,
  libmtmd_answer), with its embeddings scaled by anything in 0.8..1.25; with 16 or 1 it misses one colour or another
  under one of them. And decoded causally instead (as a worker that ignored mtmd_decode_use_non_causal would), the
  blue image is answered "The image is a classic example of a color wheel": the answers tell the two apart.
- mm.soft_emb_norm is an RMS norm over a token's features: one channel of HIDDEN lit becomes sqrt(HIDDEN) there, which
  the norm's weight, 1 / sqrt(HIDDEN), brings back to 1 (so a colour's brightness is lost, not its hue).
- mm.input_projection maps feature c onto colour word c's input embedding, from the model's own token_embd, as it is:
  a real Gemma 3 scales its text embeddings by sqrt(n_embd) and not the image's, but the test model is llama, which
  scales neither.

mtmd writes Gemma 3's "<start_of_image>" and "<end_of_image>" as text around the image (IMAGE_BEGIN, IMAGE_END);
SmolLM2's vocabulary lacks them, so they are tokenized as plain text (no LLAMA_TOKEN_NULL), which the model reads past.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.vision_helpers import WORDS, channel_means, token_embeddings, vision_writer

PATCH = 8
POOL = 4  # clip.cpp's n_merge for gemma3: the side of the patches a token averages
IMAGE_SIZE = 64  # 8 x 8 patches
GRID = IMAGE_SIZE // (PATCH * POOL)  # 2 x 2 tokens
IMAGE_TOKENS = GRID * GRID  # 4
HIDDEN = 4  # the vision tower's width: r, g, b and a zero
# The text mtmd writes around a gemma3 image (tools/mtmd/mtmd.cpp).
IMAGE_BEGIN = "<start_of_image>"
IMAGE_END = "<end_of_image>"


def build_gemma3_projector(model: Path, out: Path, image_size: int = IMAGE_SIZE) -> Path:
    """The colour projector for `model` (its token_embd gives the words) as a gemma3 projector, written to `out`;
    every image becomes (image_size / 32)^2 tokens."""
    words = token_embeddings(model, WORDS)  # (3, n_embd)
    n_embd = words.shape[1]
    writer = vision_writer(out, "gemma3", image_size, PATCH, HIDDEN, HIDDEN, 0, n_embd, 1)
    writer.add_tensor("v.patch_embd.weight", channel_means(HIDDEN, PATCH))
    writer.add_tensor("mm.soft_emb_norm.weight", np.full(HIDDEN, 1 / np.sqrt(HIDDEN), np.float32))
    # ggml multiplies by its transpose: numpy (HIDDEN, n_embd), row c the embedding feature c becomes.
    projection = np.zeros((HIDDEN, n_embd), np.float32)
    projection[:3] = words
    writer.add_tensor("mm.input_projection.weight", projection)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
