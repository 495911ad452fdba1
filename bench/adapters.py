"""LoRA adapters made from a base GGUF's own weights with gguf-py, whose effect is known in advance.

No adapter exists for the test model, and one trained for it would change its text in ways nobody can predict. A
"steering" adapter makes the model write one chosen token at every step, whatever the prompt, through a low-rank
update of one late layer's feed-forward block (layer L = last - 1, so the last layer's KV cells change too):

- ffn_gate and ffn_up each get rank-r updates that add +g z_k to channel k and -g z_k to channel r + k, where
  z_k = x_k / rms(x) is one coordinate of the layer's normalized input (lora_a undoes ffn_norm's weight). SwiGLU
  then gives silu(g z) g z + silu(-g z)(-g z) = (g z)^2 over each pair, whatever the sign: sum_k (g z_k)^2 > 0.
- ffn_down gets a rank-1 update that adds c d times the sum of those 2r channels, with d = n / w_out: n =
  (E^T E)^-1 E[token] is the hidden state whose logits E n stand out most at `token` (least squares over the output
  rows E), w_out the output norm's weight; c makes c |d| outweigh the base ffn_down columns those channels also feed
  by BASE_MARGIN times.

The residual stream then points along d, orders of magnitude over anything else in it, so after the output norm
the logits are E n / rms(n): `token` wins every step (Base.wins checks it by MARGIN; on the test model " zebra"
scores 43.9 against 12.3 for the runner-up). A small scale s does not shrink it as s^3: ffn_down's update also
multiplies the base model's own activations of those 2r channels, s times, so the text tips early (test model,
" The capital of France is": a digit changes at s = 0.001-0.002, " zebra" takes over part way at 0.003-0.004, and
from the first or second word at 0.01). At 0 llama.cpp leaves it out of the graph: the base model, bitwise. Used
by tests/e2e/test_lora.py and bench/lora.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFType, GGUFWriter, Keys
from gguf.quants import dequantize

RANK = 32  # coordinates of the normalized input used; each needs two feed-forward channels
GAIN = 8.0  # g: the gate and up updates' weight
BASE_MARGIN = 1000.0  # how far c d outweighs the base ffn_down columns the 2 RANK channels also feed
MARGIN = 10.0  # logits by which the steered token must lead the runner-up
ZEBRA, PURPLE = 29106, 14230  # " zebra" and " purple" in the test model's vocabulary: tokens that win by far


@dataclass(frozen=True)
class Base:
    """What the adapters are made from: a llama-architecture GGUF's relevant tensors, dequantized."""

    path: Path
    arch: str
    n_layer: int
    tensors: dict[str, np.ndarray]

    @classmethod
    def read(cls, path: Path, reader: GGUFReader | None = None) -> Base:
        """`reader`: the file's reader where the caller has one already (gguf-py takes seconds to read a vocabulary)."""
        reader = reader or GGUFReader(path)
        arch = bytes(reader.fields[Keys.General.ARCHITECTURE].parts[-1]).decode()
        n_layer = int(reader.fields[f"{arch}.block_count"].parts[-1][0])
        layer = n_layer - 2
        wanted = {"token_embd.weight", "output_norm.weight", f"blk.{layer}.ffn_norm.weight",
                  f"blk.{layer}.ffn_down.weight"}
        tensors = {t.name: dequantize(t.data, t.tensor_type).astype(np.float32) for t in reader.tensors
                   if t.name in wanted}
        return cls(path, arch, n_layer, tensors)

    @property
    def embedding(self) -> np.ndarray:
        """(n_vocab, n_embd): the output rows too, on a model that ties them (no output.weight is read here)."""
        return self.tensors["token_embd.weight"]

    def steering_hidden(self, token: int) -> np.ndarray:
        """The normalized hidden state (rms 1) whose logits single `token` out: least squares over the output rows."""
        rows = self.embedding
        hidden = np.linalg.solve((rows.T @ rows).astype(np.float64), rows[token].astype(np.float64))
        return (hidden / np.sqrt(np.mean(hidden**2))).astype(np.float32)

    def wins(self, token: int) -> bool:
        """Whether steering_hidden(token)'s logits put `token` first by MARGIN."""
        logits = self.embedding @ self.steering_hidden(token)
        runner_up = np.partition(logits, -2)[-2]
        return int(np.argmax(logits)) == token and logits[token] - runner_up > MARGIN


def steering_adapter(base: Base, token: int, out: Path, name: str = "steer") -> Path:
    """An adapter under which `base` writes `token` at every step (see the module docstring); written to `out`."""
    if not base.wins(token):
        raise ValueError(f"token {token} does not win along its own output row on {base.path}: pick another")
    layer = base.n_layer - 2
    n_embd = base.embedding.shape[1]
    norm = base.tensors[f"blk.{layer}.ffn_norm.weight"]
    down = base.tensors[f"blk.{layer}.ffn_down.weight"]  # (n_embd, n_ff)
    n_ff = down.shape[1]
    dims = np.arange(RANK) * (n_embd // RANK)
    a = np.zeros((RANK, n_embd), np.float32)  # (rank, n_in): ggml's [n_in, rank]
    a[np.arange(RANK), dims] = 1.0 / norm[dims]
    b = np.zeros((n_ff, RANK), np.float32)  # (n_out, rank): ggml's [rank, n_out]
    b[np.arange(RANK), np.arange(RANK)] = GAIN
    b[RANK + np.arange(RANK), np.arange(RANK)] = -GAIN
    pairs = np.zeros((1, n_ff), np.float32)
    pairs[0, :2 * RANK] = 1.0
    direction = base.steering_hidden(token) / base.tensors["output_norm.weight"]
    reach = BASE_MARGIN * float(np.linalg.norm(down[:, :2 * RANK], axis=0).max()) / float(np.linalg.norm(direction))
    tensors = {
        f"blk.{layer}.ffn_gate.weight": (a, b), f"blk.{layer}.ffn_up.weight": (a, b),
        f"blk.{layer}.ffn_down.weight": (pairs, (reach * direction)[:, None].astype(np.float32)),
    }
    return write_adapter(out, base.arch, tensors, name)


def write_adapter(out: Path, arch: str, tensors: dict[str, tuple[np.ndarray, np.ndarray]], name: str,
                  base_name: str | None = None) -> Path:
    """A LoRA GGUF as llama.cpp reads it (src/llama-adapter.cpp): general.type adapter, adapter.type lora, no
    alpha (so a scale applies as it is, whatever each pair's rank), F16 `<tensor>.lora_a` (rank, n_in) and
    `.lora_b` (n_out, rank) pairs, as convert_lora_to_gguf.py writes them."""
    writer = GGUFWriter(out, arch)
    writer.add_type(GGUFType.ADAPTER)
    writer.add_name(name)
    if base_name is not None:
        writer.add_base_model_count(1)
        writer.add_base_model_name(0, base_name)
    writer.add_string(Keys.Adapter.TYPE, "lora")
    for tensor, (a, b) in tensors.items():
        writer.add_tensor(f"{tensor}.lora_a", a.astype(np.float16))
        writer.add_tensor(f"{tensor}.lora_b", b.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
