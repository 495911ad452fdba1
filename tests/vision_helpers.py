"""A test projector for the test model, and images to show it.

No vision model is within reach of these machines, so the tests build a projector for SmolLM2-135M with gguf-py,
whose answers can be checked: an image of one colour arrives in the prompt as the input embedding of that colour's
word, so asking the model what colour it sees answers with the word.

It is llama.cpp's `janus_pro` projector (a SigLIP encoder and a two-layer MLP, tools/mtmd/clip.cpp), with no encoder
layers: the patch embedding averages each 16x16 patch's red, green and blue into three features (images are read
with mean 0 and std 1, so a channel is 0..1), the MLP's first layer scales them up past GELU's bend (GELU(10x) = 10x
for x in 0..1 to 1e-7, and 0 at 0) and its second layer maps them onto the colour words' embeddings, taken from the
model's own token_embd. SmolVLM pairs an idefics3 projector with this very model, but mtmd wraps idefics3 images in
SmolVLM's added tokens (<fake_token_around_image>, <global-img>), which SmolLM2's vocabulary lacks: the worker
refuses such a pair at load (tests/e2e/test_vision.py), and janus_pro takes no marker tokens.
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from tests.gguf_files import read_gguf

PATCH = 16
IMAGE_SIZE = 64  # 4 x 4 patches: 16 tokens an image
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2
SCALE = 10.0  # the first layer's gain: past GELU's bend
COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}
# The word each channel turns into: the token the model reads where the image is.
WORDS = (" red", " green", " blue")
QUESTION = "Which colour is shown?"


def token_embeddings(model: Path, words: tuple[str, ...]) -> np.ndarray:
    """Each word's input embedding (one token each) from the model's token_embd, dequantized: (len(words), n_embd)."""
    reader = read_gguf(model)
    tokens = _vocab(reader)
    table = next(t for t in reader.tensors if t.name == "token_embd.weight")
    rows = gguf.quants.dequantize(table.data, table.tensor_type)  # (n_vocab, n_embd)
    return np.stack([rows[tokens.index(_gpt2_piece(word))] for word in words]).astype(np.float32)


def _vocab(reader: gguf.GGUFReader) -> list[str]:
    field = reader.fields["tokenizer.ggml.tokens"]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def _gpt2_piece(word: str) -> str:
    """A word as the byte-level BPE vocab spells it (a leading space is Ġ)."""
    return word.replace(" ", "\u0120")


@dataclass(frozen=True)
class Encoder:
    """A vision tower's shape: `layers` pre-norm transformer blocks of width `hidden`. None in the colour projector
    (no encoding to time); SIGLIP_BASE is SigLIP-base-patch16-384's, what a benchmark times."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    # The scale of the weights that write into the residual stream (attention-out, FFN-down): small, the colours
    # pass through; near 1, each block's random output swamps them.
    residual_scale: float = 1e-4


SIGLIP_BASE = Encoder(layers=12, hidden=768, ffn=3072, heads=12)


def build_projector(model: Path, out: Path, width: int | None = None, image_size: int = IMAGE_SIZE,
                    encoder: Encoder | None = None) -> Path:
    """The colour projector for `model`, written to `out`. `width`: the output width, when a test wants one that
    does not match the model (the embeddings are then cut or padded); `image_size`: the side images are resized to,
    (image_size / 16)^2 tokens an image (a benchmark's real-sized images: 384 gives SigLIP's 576); `encoder`: encoder
    layers of that shape between the patches and the MLP, whose every product costs what a real tower's does. Their
    weights are random, F16, and those writing into the residual stream small (Encoder.residual_scale), so the
    colours pass through and the model still names them."""
    words = token_embeddings(model, WORDS)  # (3, n_embd)
    n_embd = width or words.shape[1]
    words = np.pad(words, ((0, 0), (0, max(0, n_embd - words.shape[1]))))[:, :n_embd]
    hidden = encoder.hidden if encoder else 4  # r, g, b and the rest left at zero: the encoder's width
    writer = vision_writer(out, "janus_pro", image_size, PATCH, hidden, encoder.ffn if encoder else hidden,
                           encoder.layers if encoder else 0, n_embd, encoder.heads if encoder else 1)
    writer.add_tensor("v.patch_embd.weight", channel_means(hidden, PATCH))
    if encoder:
        _add_encoder_layers(writer, encoder)
    add_colour_mlp(writer, ("mm.0", "mm.1"), np.eye(hidden, dtype=np.float32) * SCALE, words)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def vision_writer(out: Path, projector_type: str, image_size: int, patch: int, hidden: int, ffn: int, blocks: int,
                  n_embd: int, heads: int) -> gguf.GGUFWriter:
    """A projector file's writer with its vision tower's keys: pixels read as 0..1 (mean 0, std 1)."""
    writer = gguf.GGUFWriter(out, "clip")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", projector_type)
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.image_size", image_size)
    writer.add_uint32("clip.vision.patch_size", patch)
    writer.add_uint32("clip.vision.embedding_length", hidden)
    writer.add_uint32("clip.vision.feed_forward_length", ffn)
    writer.add_uint32("clip.vision.block_count", blocks)
    writer.add_uint32("clip.vision.projection_dim", n_embd)
    writer.add_uint32("clip.vision.attention.head_count", heads)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_array("clip.vision.image_mean", [0.0, 0.0, 0.0])
    writer.add_array("clip.vision.image_std", [1.0, 1.0, 1.0])
    return writer


def channel_means(hidden: int, patch: int, share: float = 1.0) -> np.ndarray:
    """A patch embedding whose output c is `share` of input channel c's mean over the patch (the rest 0). ggml's conv
    kernel is [KW, KH, IC, OC]: numpy (OC, IC, KH, KW)."""
    kernel = np.zeros((hidden, 3, patch, patch), np.float32)
    for channel in range(3):
        kernel[channel, channel] = share / (patch * patch)
    return kernel


def add_colour_mlp(writer: gguf.GGUFWriter, layers: tuple[str, str], first: np.ndarray, words: np.ndarray) -> None:
    """A projector's two-layer MLP: `first` (numpy (out, in)) takes the patch features past GELU's bend (SCALE), the
    second maps feature c onto colour word c's embedding (`words`: token_embeddings' rows), biases 0."""
    hidden, n_embd = first.shape[0], words.shape[1]
    writer.add_tensor(f"{layers[0]}.weight", first)
    writer.add_tensor(f"{layers[0]}.bias", np.zeros(hidden, np.float32))
    up = np.zeros((n_embd, hidden), np.float32)
    up[:, :3] = words.T / SCALE
    writer.add_tensor(f"{layers[1]}.weight", up)
    writer.add_tensor(f"{layers[1]}.bias", np.zeros(n_embd, np.float32))


def _add_encoder_layers(writer: gguf.GGUFWriter, encoder: Encoder) -> None:
    """clip.cpp's ViT blocks (tools/mtmd/clip.cpp, build_vit) of the encoder's shape."""
    rng = np.random.default_rng(0)
    for layer in range(encoder.layers):
        add_vit_block(writer, f"v.blk.{layer}", encoder.hidden, encoder.ffn, encoder.residual_scale, rng)


def add_vit_block(writer: gguf.GGUFWriter, block: str, hidden: int, ffn: int, residual_scale: float,
                  rng: np.random.Generator, biased: tuple[str, ...] = ("attn_q", "attn_k", "attn_v")) -> None:
    """One pre-norm ViT block as clip.cpp's build_vit reads it: layer norms, q/k/v (with biases where `biased`
    says), out, a GELU FFN; random F16 weights, numpy (out, in), those writing into the residual stream (out, FFN
    down) at `residual_scale`."""

    def weights(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float16)

    for norm in ("ln1", "ln2"):
        writer.add_tensor(f"{block}.{norm}.weight", np.ones(hidden, np.float32))
        writer.add_tensor(f"{block}.{norm}.bias", np.zeros(hidden, np.float32))
    for name in ("attn_q", "attn_k", "attn_v"):
        writer.add_tensor(f"{block}.{name}.weight", weights(hidden, hidden, 0.02))
        if name in biased:
            writer.add_tensor(f"{block}.{name}.bias", np.zeros(hidden, np.float32))
    writer.add_tensor(f"{block}.attn_out.weight", weights(hidden, hidden, residual_scale))
    writer.add_tensor(f"{block}.attn_out.bias", np.zeros(hidden, np.float32))
    writer.add_tensor(f"{block}.ffn_up.weight", weights(ffn, hidden, 0.02))
    writer.add_tensor(f"{block}.ffn_up.bias", np.zeros(ffn, np.float32))
    writer.add_tensor(f"{block}.ffn_down.weight", weights(hidden, ffn, residual_scale))
    writer.add_tensor(f"{block}.ffn_down.bias", np.zeros(hidden, np.float32))


def png(rgb: tuple[int, int, int], width: int = IMAGE_SIZE, height: int = IMAGE_SIZE) -> bytes:
    """A PNG of one colour (8-bit RGB), written with zlib alone."""
    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    raw = zlib.compress(row * height, 9)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_message(*images: bytes, text: str = QUESTION) -> list[dict]:
    """One OpenAI user message: the images as image_url parts, then the text."""
    parts = [{"type": "image_url", "image_url": {"url": data_url(image)}} for image in images]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]
