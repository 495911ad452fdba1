"""The load-time check: are an answer's KV cells, made one token at a time, bitwise what a prefill makes, and does a
row ignore its neighbours and its cells' slot? Flags and tensor types cannot tell which kernels a model takes, so the
numerics are asked (docs/cache-and-exactness.md, "Prefix cache"); a yes is trusted on the CPU backend alone."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Literal

import llama_cpp

from worker.engine.modes import SpecType
from worker.engine.native.model import LlamaModel
from worker.engine.requests import NO_ADAPTERS, AdapterSet

# The probe: PROBE_TOKENS prefilled as one chunk (as large as a real prompt's chunks, so that kernels which change
# with size are taken), then, for each (kept, decoded), its cells from `kept` on made again: `decoded` of them one
# token at a time (as an answer's are), the rest as one chunk (as a next turn's prompt is). Several shapes, because
# kernels that differ by shape can agree on one: llamafile's GEMM agreed with one-row decode on 1 of 10 shapes.
PROBE_TOKENS = 64
# Four shapes, 30 one-token decodes: a check with 98 made a worker's start take minutes when two workers started
# at once on 2 cores (ggml's threads spin against each other).
SHAPES = ((21, 16), (48, 8), (58, 4), (60, 2))
# Speculative decoding's verify call (a sequence's last decode row and its draft in one llama_decode, beside a decode
# row of slot 1) is measured at every row count a draft can make, against the same tokens decoded one at a time:
# llamafile's GEMM agreed with one-row decode at 2 rows of the test model and not at 3 to 17, and agreed at 5 in a
# worker's own context, where a check of 5 rows alone let drafts change its greedy text.
# Rows of another slot beside the probe's last row: one (a decode row) and a prefill chunk's worth, past the
# 8 rows where ggml's tiled K-quant matmul takes over.
BESIDE_ROWS = 16


@dataclass(frozen=True)
class Numerics:
    """What the load-time check measured; None where it did not measure (see measure())."""

    decoded_cells_exact: bool | None  # an answer's cells, made token by token, bitwise what a prefill makes
    batch_invariant: bool | None  # a row's logits the same whatever other sequences share its llama_decode
    # A yes here stands for every shape: the CPU backend alone, without rpc, whose kernels the code holds to one path
    # per row (exactness/); a GPU library picks kernels by batch size in ways a few shapes cannot cover.
    trusted: bool = False
    # A sequence's rows decoded together (a decode row and its draft) each get a one-token decode's logits;
    # None: not measured (no speculative decoding).
    verify_rows_exact: bool | None = None
    # Cells saved to host memory and loaded into another slot, or copied there, give the logits they gave where they
    # were made; None: not measured (one slot).
    moved_cells_exact: bool | None = None

    @property
    def answers_reusable(self) -> bool:
        return bool(self.trusted and self.decoded_cells_exact and self.batch_invariant)

    @property
    def drafts_keep_text(self) -> bool:
        """Verified drafts leave every logits row as decoding without them makes it (speculative/speculator.py)."""
        return bool(self.trusted and self.batch_invariant and self.verify_rows_exact)


def measure(model: LlamaModel) -> Numerics:
    """The two measurements exact mode rests on, on any backend; None where a sequence or a micro-batch is too
    small for the probe. Runs on the engine thread before any request, in slots 0 and 1, which it leaves empty.
    With LoRA adapters loaded it measures again under all of them at once, so that their own F16 or F32 products
    (exactness/build_choice.py) are measured too: a yes needs both."""
    config = model.config
    if model.n_ctx_seq < PROBE_TOKENS or config.micro_batch < PROBE_TOKENS:
        return Numerics(None, None)
    every_adapter = AdapterSet.of(dict.fromkeys(range(len(model.adapters.adapters)), 1.0))
    with _Probe(model) as probe:
        found = [_measured(probe, adapters) for adapters in dict.fromkeys((NO_ADAPTERS, every_adapter))]
    model.adapters.use(NO_ADAPTERS)

    def agreed(index: int) -> bool | None:
        values = [each[index] for each in found]
        return None if values[0] is None else all(values)

    return Numerics(agreed(0), agreed(1), trusted=config.on_cpu_alone,
                    verify_rows_exact=agreed(2), moved_cells_exact=agreed(3))


def decode_matches_prefill(model: LlamaModel) -> bool:
    """The first measurement alone (the probes in bench/probes/ ask it of shapes of their own)."""
    with _Probe(model) as probe:
        return _decode_matches_prefill(probe)


class _Probe:
    """The probe's tokens and one batch for the measurements, which run one after another and start from the cells
    the last one left: each makes its own prefix of the probe from what slot 0 holds (hold()), so that the
    64-token prefill is made once, not once a measurement (~0.3 s each on 2 cores). A measurement compares two
    ways of making the same rows from the same cells, so where those cells came from does not change its answer.
    Leaves the slots it used empty."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self.tokens = [(101 + 7 * i) % model.n_vocab for i in range(PROBE_TOKENS)]
        self.batch = llama_cpp.llama_batch_init(PROBE_TOKENS, 0, 1)

    def __enter__(self) -> _Probe:
        return self

    def __exit__(self, *_: object) -> None:
        llama_cpp.llama_batch_free(self.batch)
        for slot in range(min(2, self.model.config.parallel)):  # llama.cpp logs an error for a slot it does not have
            llama_cpp.llama_memory_seq_rm(self.model.memory, slot, -1, -1)

    def hold(self, slot: int, kept: int) -> None:
        """Leave the slot holding the probe's first `kept` tokens: what it holds cut back where the memory allows it,
        else (a recurrent state: native/memory.py) dropped whole and those tokens prefilled again as one chunk."""
        memory = self.model.memory
        held = llama_cpp.llama_memory_seq_pos_max(memory, slot) + 1
        if held == kept or (held > kept and self.model.memory_kind.cuts_anywhere
                            and llama_cpp.llama_memory_seq_rm(memory, slot, kept, -1)):
            return
        llama_cpp.llama_memory_seq_rm(memory, slot, -1, -1)
        if kept:
            self.decode([(self.tokens[pos], pos, slot, False) for pos in range(kept)])

    def logits_after(self, chunks: list[tuple[int, int]]) -> bytes | None:
        """Decode each chunk of the probe in slot 0 as one llama_decode call; the logits of its last row (None if a
        call failed)."""
        logits, last = None, PROBE_TOKENS - 1
        for start, end in chunks:
            decoded = self.decode([(self.tokens[pos], pos, 0, pos == last) for pos in range(start, end)])
            if decoded is False:
                return None
            logits = decoded
        return logits

    def decode(self, rows: list[tuple[int, int, int, bool]]) -> bytes | Literal[False] | None:
        """One llama_decode over (token, position, slot, wants logits) rows: the first wanted row's logits, None if
        no row wants them, False if the call failed."""
        batch, wanted = self.batch, None
        for i, (token, pos, slot, want) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = slot, want
            if want and wanted is None:
                wanted = i
        batch.n_tokens = len(rows)
        if llama_cpp.llama_decode(self.model.ctx, batch) != 0:
            return False
        if wanted is None:
            return None
        return self.row_logits(wanted)

    def row_logits(self, row: int) -> bytes:
        """The last call's logits of batch row `row`, as bytes (compared bitwise)."""
        size = self.model.n_vocab * ctypes.sizeof(ctypes.c_float)
        return ctypes.string_at(llama_cpp.llama_get_logits_ith(self.model.ctx, row), size)


def _measured(probe: _Probe, adapters: AdapterSet) -> tuple[bool, bool, bool | None, bool | None]:
    """decoded cells exact, rows independent of their batch, verify rows exact (None: no drafts), moved cells exact
    (None: one slot), under `adapters`: the first measurement prefills the probe cold, under them."""
    config = probe.model.config
    probe.model.adapters.use(adapters)
    several = config.parallel > 1
    decoded_exact = _decode_matches_prefill(probe)
    independent = _row_ignores_batch(probe) if several else True
    verify = _verify_rows_match_decodes(probe) if config.drafting is not SpecType.NONE else None
    return decoded_exact, independent, verify, _moved_cells_match(probe) if several else None


def _decode_matches_prefill(probe: _Probe) -> bool:
    """The measurement itself: prefill the probe in an emptied slot, then make its tail again in each shape; the
    same logits?"""
    probe.hold(0, 0)
    cold = probe.logits_after([(0, PROBE_TOKENS)])
    for kept, decoded in SHAPES:
        probe.hold(0, kept)
        one_by_one = [(pos, pos + 1) for pos in range(kept, kept + decoded)]
        tail = (kept + decoded, PROBE_TOKENS)
        if cold is None or probe.logits_after([*one_by_one, tail]) != cold:
            return False
    return True


def _row_ignores_batch(probe: _Probe) -> bool:
    """Slot 0's next row decoded alone, then beside slot 1's rows in the same call (a decode row, then a prefill
    chunk, as the engine's steps mix them): the same logits?"""
    last = PROBE_TOKENS - 1
    row = (probe.tokens[last], last, 0, True)
    probe.hold(0, last)
    probe.hold(1, 0)
    alone = probe.decode([row])
    for beside in (1, BESIDE_ROWS):
        probe.hold(0, last)
        probe.hold(1, 0)
        others = [(probe.tokens[pos], pos, 1, False) for pos in range(beside)]
        if not alone or probe.decode([row, *others]) != alone:
            return False
    return True


def _moved_cells_match(probe: _Probe) -> bool:
    """Slot 0's cells saved and loaded into slot 1 (host memory, --cache-ram), then copied into it
    (llama_memory_seq_cp, a shared prefix): slot 1's next row the same logits as slot 0's? The batch-invariant
    attention kernel sums the cells in 64-cell tiles and 256-cell segments counted from the stream's first cell, so
    this holds where moved cells land at the index of their position, as llama.cpp puts them into an emptied stream
    (its find_slot from head 0, its whole-stream copy)."""
    model, last = probe.model, PROBE_TOKENS - 1
    row = (probe.tokens[last], last, 0, True)
    probe.hold(0, last)
    probe.hold(1, 0)
    size = llama_cpp.llama_state_seq_get_size(model.ctx, 0)
    saved = (ctypes.c_uint8 * size)()
    if llama_cpp.llama_state_seq_get_data(model.ctx, saved, size, 0) != size:
        return False
    alone = probe.decode([row])
    probe.hold(0, last)
    if llama_cpp.llama_state_seq_set_data(model.ctx, saved, size, 1) != size:
        return False
    restored = probe.decode([(*row[:2], 1, True)])
    probe.hold(1, 0)
    llama_cpp.llama_memory_seq_cp(model.memory, 0, 1, -1, -1)  # slot 0's stream whole, at the next decode
    copied = probe.decode([(*row[:2], 1, True)])
    return isinstance(alone, bytes) and restored == alone and copied == alone


def _verify_rows_match_decodes(probe: _Probe) -> bool:
    """Slot 0's next tokens decoded one at a time, then, for each row count a verify call can have (a decode row and
    up to --draft-max drafted tokens), that many together in one call beside a row of slot 1: each row the same
    logits? (Slot 1 needs a second slot; with one, the rows are decoded alone.)"""
    most = min(probe.model.config.draft_max, PROBE_TOKENS - 1) + 1
    start = PROBE_TOKENS - most
    rows = [(probe.tokens[pos], pos, 0, True) for pos in range(start, PROBE_TOKENS)]
    several = probe.model.config.parallel > 1
    beside = [(probe.tokens[0], 0, 1, False)] if several else []
    probe.hold(0, start)
    alone = [probe.decode([row]) for row in rows]
    if not all(isinstance(logits, bytes) for logits in alone):
        return False
    for count in range(2, most + 1):
        probe.hold(0, start)
        if several:
            probe.hold(1, 0)
        if probe.decode(rows[:count] + beside) is False:
            return False
        if [probe.row_logits(i) for i in range(count)] != alone[:count]:
            return False
    return True
