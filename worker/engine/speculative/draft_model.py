"""Drafts from a smaller model with the same vocabulary (--model-draft): it continues each sequence greedily, in a
context of its own. Its numerics do not matter: a draft only proposes, and the target keeps what it would have
sampled anyway (speculative/speculator.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import llama_cpp

from worker.engine.config import EngineConfig
from worker.engine.modes import CacheMode, SpecType
from worker.engine.native.model import LlamaModel
from worker.engine.speculative.draft_rule import DraftState, Offer
from worker.engine.speculative.sequence_view import DraftingSequence
from worker.worker_error import WorkerError

# The prior acceptance of a draft model's tokens (draft_rule.Acceptance): a draft model of the same family agrees
# with the target most of the time; each sequence's own drafts correct it.
DRAFT_PRIOR = 0.85
KIND = 0  # a draft model's drafts are all of one kind


class DraftModel:
    priors: ClassVar[dict[int, float]] = {KIND: DRAFT_PRIOR}
    decodes = True

    def __init__(self, path: Path, config: EngineConfig, target: LlamaModel) -> None:
        # Llama.cpp's fastest kernels and cells: a draft's numerics only change which tokens are proposed.
        draft_config = replace(config, prefix_cache=CacheMode.FAST, flash_attn="auto", cache_type_k=None,
                               cache_type_v=None, embeddings=False, spec_type=SpecType.NONE, model_draft=None,
                               ctx_size=target.n_ctx)
        self.model = LlamaModel(path, draft_config)
        try:
            if problem := vocabulary_mismatch(target, self.model):
                raise WorkerError(f"the draft model {path.name} cannot draft for {target.path.name}: their "
                                  f"vocabularies differ ({problem}); use a draft model with the model's tokenizer "
                                  "(a smaller model of the same family, or a smaller quantization of it)")
            if not self.model.memory_kind.cuts_anywhere:  # it drops what a rejected draft left in its own cells
                raise WorkerError(f"the draft model {path.name} keeps a recurrent state, which cannot be cut back "
                                  "to a sequence's accepted tokens: use a draft model with attention layers only, "
                                  "or --spec-type ngram")
        except WorkerError:
            self.model.close()
            raise
        self._held: list[list[int]] = [[] for _ in range(config.parallel)]  # each slot's stream, by position
        self._batch = llama_cpp.llama_batch_init(max(config.batch_size, config.parallel), 0, 1)
        self._greedy = llama_cpp.llama_sampler_init_greedy()

    def close(self) -> None:
        llama_cpp.llama_sampler_free(self._greedy)
        llama_cpp.llama_batch_free(self._batch)
        self.model.close()

    def offer(self, seq: DraftingSequence, state: DraftState, limit: int) -> Offer:
        return Offer(KIND, limit)  # drafted only when asked: a decode of its own per token

    def propose(self, chosen: dict[DraftingSequence, tuple[Offer, int]]) -> dict[DraftingSequence, list[int]]:
        counts = {seq: count for seq, (_, count) in chosen.items()}
        drafts: dict[DraftingSequence, list[int]] = {}
        for seq in counts:  # each its own calls: their lengths differ
            row = self._catch_up(seq)
            if row is not None:
                drafts[seq] = [self._sample(row)]
        going = [seq for seq in drafts if len(drafts[seq]) < counts[seq]]
        while going:  # every drafting sequence's next row in one call
            if not self._decode([(drafts[seq][-1], len(self._held[seq.slot]), seq.slot) for seq in going]):
                return {}
            for row, seq in enumerate(going):
                self._held[seq.slot].append(drafts[seq][-1])
                drafts[seq].append(self._sample(row))
            going = [seq for seq in going if len(drafts[seq]) < counts[seq]]
        return drafts

    def _sample(self, row: int) -> int:
        return llama_cpp.llama_sampler_sample(self._greedy, self.model.ctx, row)

    def _catch_up(self, seq: DraftingSequence) -> int | None:
        """Bring the slot's stream to the sequence's tokens, the newest decoded last, in calls of at most a batch;
        the row of the last call that holds its logits (None: a decode failed, and the stream was emptied)."""
        tokens = seq.prompt + seq.generated
        held = self._held[seq.slot]
        common = 0
        for ours, theirs in zip(held, tokens):
            if ours != theirs:
                break
            common += 1
        common = min(common, len(tokens) - 1)  # the newest token is decoded again: its logits draft
        if not llama_cpp.llama_memory_seq_rm(self.model.memory, seq.slot, common, -1):  # (attention cuts anywhere)
            llama_cpp.llama_memory_seq_rm(self.model.memory, seq.slot, -1, -1)
            common = 0
        del held[common:]
        size = self.model.config.batch_size
        for start in range(common, len(tokens), size):
            chunk = tokens[start:start + size]
            if not self._decode([(token, start + i, seq.slot) for i, token in enumerate(chunk)], last_only=True):
                return None
            held.extend(chunk)
        return (len(tokens) - common - 1) % size

    def _decode(self, rows: list[tuple[int, int, int]], last_only: bool = False) -> bool:
        """One llama_decode of (token, position, slot) rows, logits for every row (or the last); False: failed,
        and the rows' slots emptied (nothing they hold can be trusted)."""
        batch = self._batch
        for i, (token, pos, slot) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = slot, not last_only or i == len(rows) - 1
        batch.n_tokens = len(rows)
        if llama_cpp.llama_decode(self.model.ctx, batch) == 0:
            return True
        for _, _, slot in rows:
            llama_cpp.llama_memory_seq_rm(self.model.memory, slot, -1, -1)
            self._held[slot].clear()
        return False


def vocabulary_mismatch(target: LlamaModel, draft: LlamaModel) -> str | None:
    """Why `draft`'s tokens do not mean what `target`'s do, or None: the same type, size, special tokens and
    every token's text."""
    t, d = target.vocab, draft.vocab
    if llama_cpp.llama_vocab_type(t) != llama_cpp.llama_vocab_type(d):
        return f"tokenizer type {llama_cpp.llama_vocab_type(t)} vs {llama_cpp.llama_vocab_type(d)}"
    if target.n_vocab != draft.n_vocab:
        return f"{target.n_vocab} tokens vs {draft.n_vocab}"
    for name in ("bos", "eos"):
        ours, theirs = getattr(llama_cpp, f"llama_vocab_{name}")(t), getattr(llama_cpp, f"llama_vocab_{name}")(d)
        if ours != theirs:
            return f"{name.upper()} token {ours} vs {theirs}"
    for token in range(target.n_vocab):
        if target.token_bytes(token) != draft.token_bytes(token):
            return f"token {token} is {target.token_bytes(token)!r} vs {draft.token_bytes(token)!r}"
    return None
