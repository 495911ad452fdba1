"""The tokenizer into GGUF: BPE from tokenizer.json, SentencePiece from tokenizer.model, token lists as llama.cpp's
converter makes them (get_vocab_base, _create_vocab_sentencepiece).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

import gguf

from worker.source.convert.pretokenizers import CHECK_TEXT, PRE_TOKENIZERS
from worker.worker_error import WorkerError

_SPACE_MARK = "\u2581"  # SentencePiece's visible space


@dataclass(frozen=True)
class Vocab:
    model: str  # tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    pre: str  # tokenizer.ggml.pre
    tokens: list[bytes]
    types: list[int]
    scores: list[float] | None = None


def looks_special(token: str) -> bool:
    """Added tokens some models forget to mark special (llama.cpp's does_token_look_special)."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
            or (token.startswith("<unused") and token.endswith(">")))


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def pre_tokenizer(tokenizer_json: Path) -> str:
    """llama.cpp's name for this tokenizer's pre-tokenizer, identified as its converter does."""
    from tokenizers import Tokenizer  # the Rust tokenizer, no torch

    ids = Tokenizer.from_file(str(tokenizer_json)).encode(CHECK_TEXT).ids
    digest = sha256(str(ids).encode()).hexdigest()
    name = PRE_TOKENIZERS.get(digest)
    if name is None:
        raise WorkerError(
            f"{tokenizer_json}: unrecognised BPE pre-tokenizer (check hash {digest[:16]}); llama.cpp would "
            "split text differently from the original tokenizer, so it is not converted: use a GGUF "
            "made by a llama.cpp that knows this tokenizer"
        )
    return name


def bpe_vocab(folder: Path, vocab_size: int | None) -> Vocab:
    path = folder / "tokenizer.json"
    tokenizer = _json(path)
    model = tokenizer.get("model", {})
    kind = model.get("type")
    if kind != "BPE":
        found = f"a {kind} model" if kind else "no model.type (so no tokenizer kind)"
        raise WorkerError(f"{path} has {found}; only BPE tokenizer.json files are supported")
    by_id = {i: token for token, i in model["vocab"].items()}
    added = {a["id"]: a for a in tokenizer.get("added_tokens", [])}
    by_id.update({i: a["content"] for i, a in added.items()})
    size = vocab_size or max(by_id) + 1
    tokens, types = [], []
    for i in range(size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]".encode())
            types.append(gguf.TokenType.UNUSED)
            continue
        if i not in added:
            types.append(gguf.TokenType.NORMAL)
        elif added[i].get("special") or looks_special(token):
            types.append(gguf.TokenType.CONTROL)
        else:
            token = token.replace(_SPACE_MARK, " ")  # llama.cpp expects user-defined tokens pre-normalized
            types.append(gguf.TokenType.USER_DEFINED)
        tokens.append(token.encode("utf-8"))
    return Vocab("gpt2", pre_tokenizer(path), tokens, types)


def sentencepiece_vocab(folder: Path, vocab_size: int | None) -> Vocab:
    from sentencepiece import SentencePieceProcessor

    sp = SentencePieceProcessor()
    sp.LoadFromFile(str(folder / "tokenizer.model"))
    size = vocab_size or sp.vocab_size()
    tokens = [f"[PAD{i}]".encode() for i in range(size)]
    scores = [-10000.0] * size
    types = [gguf.TokenType.UNUSED] * size
    kinds = ((sp.IsUnknown, gguf.TokenType.UNKNOWN), (sp.IsControl, gguf.TokenType.CONTROL),
             (sp.IsUnused, gguf.TokenType.UNUSED), (sp.IsByte, gguf.TokenType.BYTE))
    for i in range(min(size, sp.vocab_size())):
        tokens[i] = sp.IdToPiece(i).encode("utf-8")
        scores[i] = sp.GetScore(i)
        types[i] = next((kind for test, kind in kinds if test(i)), gguf.TokenType.NORMAL)
    for token, i in _json(folder / "added_tokens.json").items():
        if i < size:
            tokens[i], scores[i], types[i] = token.encode("utf-8"), -1000.0, gguf.TokenType.USER_DEFINED
    decoder = _json(folder / "tokenizer_config.json").get("added_tokens_decoder", {})
    for key, data in decoder.items():
        i, token = int(key), data["content"]
        if i >= size:
            continue
        if data.get("special") or looks_special(token):
            types[i] = gguf.TokenType.CONTROL
        else:
            token = token.replace(_SPACE_MARK, " ")
            types[i] = gguf.TokenType.USER_DEFINED
        tokens[i], scores[i] = token.encode("utf-8"), -1000.0
    return Vocab("llama", "default", tokens, types, scores)


def read_vocab(folder: Path, vocab_size: int | None) -> Vocab:
    """SentencePiece when the folder has tokenizer.model (as llama.cpp's converter prefers), else BPE."""
    if (folder / "tokenizer.model").is_file():
        return sentencepiece_vocab(folder, vocab_size)
    if (folder / "tokenizer.json").is_file():
        return bpe_vocab(folder, vocab_size)
    raise WorkerError(f"{folder} has no tokenizer (neither tokenizer.json nor tokenizer.model); add the model's "
                      "tokenizer files")


# Merges, special token ids, add-BOS/EOS flags and the chat template come from gguf-py's SpecialVocab, which reads
# tokenizer.json, tokenizer_config.json and config.json.
def write_vocab(writer: gguf.GGUFWriter, vocab: Vocab, folder: Path, add_space_prefix: bool | None) -> None:
    writer.add_tokenizer_model(vocab.model)
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    if vocab.scores is not None:
        writer.add_token_scores(vocab.scores)
    prefix = _json(folder / "tokenizer_config.json").get("add_prefix_space")
    if vocab.model == "llama" and add_space_prefix is not None:
        prefix = add_space_prefix
    if prefix is not None:
        writer.add_add_space_prefix(prefix)
    special = gguf.SpecialVocab(folder, load_merges=vocab.model == "gpt2", n_vocab=len(vocab.tokens))
    special.add_to_gguf(writer, quiet=True)
