"""A recurrent state's cells are reused whole or from a checkpoint, never cut where its memory refuses
(kv/prefix_cache.py, kv/checkpoints.py, native/memory.py): the planning, without a model."""

from __future__ import annotations

import ctypes

from worker.engine.config import EngineConfig
from worker.engine.core.scheduler import Scheduler, chunk_budget
from worker.engine.kv import checkpoints
from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.host_cache import MIB, HostCache, SavedCells
from worker.engine.kv.prefix_cache import PrefixCache
from worker.engine.modes import CacheMode
from worker.engine.native.memory import Cuts, MemoryKind
from worker.engine.requests import Request
from worker.engine.sequence import Sequence, SequenceState

TURN = list(range(100, 230))  # a turn's 100-token prompt and its 30-token answer
NEXT = [*TURN[:120], *range(500, 560)]  # the next turn: the answer written again otherwise from token 120 on


def state(size: int = 1024) -> ctypes.Array:
    return (ctypes.c_uint8 * size)()


def recurrent_cache(mode: CacheMode = CacheMode.FAST, mib: int = 8) -> PrefixCache:
    return PrefixCache(mode, 2, HostCache(limit_mib=mib), cuts_anywhere=False)


def test_a_cut_is_allowed_where_the_memory_undoes_it():
    assert MemoryKind(Cuts.ANYWHERE).undoes(5, 1)
    snapshots = MemoryKind(Cuts.LAST_TOKENS, rollback=4)
    assert snapshots.undoes(3, 4) and snapshots.undoes(0, 1)
    assert not snapshots.undoes(4, 4)  # all of the last call's tokens: llama.cpp would hand back a stale snapshot
    assert not snapshots.undoes(5, 8)  # more than the snapshots kept
    assert not MemoryKind(Cuts.WHOLE).undoes(1, 2)


def test_a_recurrent_state_is_reused_whole_or_not_at_all_without_checkpoints():
    cache = recurrent_cache()
    cache.release(0, TURN, prefilled=100)
    assert cache.choose([*TURN, *range(600, 640)], [0, 1], {}).cells == len(TURN)  # it continues all of it
    assert cache.choose(NEXT, [0, 1], {}).cells == 0  # cut at 120, which the state refuses
    attention = PrefixCache(CacheMode.FAST, 2, HostCache(limit_mib=8))
    attention.release(0, TURN, prefilled=100)
    assert attention.choose(NEXT, [0, 1], {}).cells == 120


def test_a_prompt_goes_on_from_the_newest_checkpoint_it_shares():
    cache = recurrent_cache()
    cache.claim(0)
    for pos in (48, 96, 125):
        assert cache.add_checkpoint(0, Checkpoint(pos, state()))
    cache.release(0, TURN, prefilled=100)
    copied = cache.choose(NEXT, [0, 1], {})  # the conversation stays in slot 0; the empty slot takes a copy
    assert (copied.slot, copied.source, copied.cells) == (1, 0, 96)  # 125 lies past the shared 120 tokens
    reuse = cache.choose(NEXT, [0], {})
    assert (reuse.slot, reuse.cells) == (0, 96)
    found = cache.checkpoint(cache.record(0), reuse.cells)
    assert found is not None and found.pos == 96
    cache.claim(0, reuse.cells)
    assert [checkpoint.pos for checkpoint in cache.record(0).checkpoints] == [48, 96]  # the cells kept have theirs


def test_exact_mode_checkpoints_on_the_grid_and_never_settles_a_recurrent_state():
    cache = recurrent_cache(CacheMode.EXACT)
    assert cache.checkpoint_positions(130) == (112,)  # 4 tokens back, down to the 16-cell grid
    assert cache.checkpoint_positions(130, hints=(40,)) == (32, 112)  # and where its system prompt ends
    cache.trust_decoded_cells()
    assert cache.checkpoint_positions(130, hints=(40,)) == (40, 126)
    cache.release(0, TURN, prefilled=100)
    assert cache.unsettled([0, 1]) is None  # the answer's cells cannot be dropped to be prefilled again
    assert PrefixCache(CacheMode.OFF, 2, cuts_anywhere=False).checkpoint_positions(130) == ()
    assert PrefixCache(CacheMode.FAST, 2, HostCache(limit_mib=8)).checkpoint_positions(130) == ()


def test_a_slot_keeps_its_first_checkpoint_and_its_newest():
    made = [Checkpoint(pos, state(8)) for pos in (40, 100, 200, 300, 400, 500)]
    assert [checkpoint.pos for checkpoint in checkpoints.kept(made, 450)] == [40, 200, 300, 400]


def test_a_prompt_is_cut_where_its_checkpoint_goes():
    config = EngineConfig(ctx_size=4096, parallel=2)
    scheduler = Scheduler(recurrent_cache(CacheMode.EXACT), budget=chunk_budget(config))
    seq = Sequence(Request(prompt_tokens=list(range(200)), max_tokens=8))
    seq.slot, seq.state = 0, SequenceState.PREFILLING
    chunks = scheduler.plan([seq], [1], waiting=0, idle=False).prefill
    assert [(chunk.start, chunk.end) for chunk in chunks] == [(0, checkpoints.position(200, 16))]
    hinted = Sequence(Request(prompt_tokens=list(range(200)), max_tokens=8, checkpoints=(70,)))
    hinted.slot, hinted.state = 0, SequenceState.PREFILLING
    assert [(c.start, c.end) for c in scheduler.plan([hinted], [1], waiting=0, idle=False).prefill] == [(0, 64)]


def test_only_a_whole_state_is_worth_saving_to_host_memory():
    cache = recurrent_cache(CacheMode.EXACT)
    cache.release(0, TURN, prefilled=100)  # exact mode: the answer's cells are not reusable, and not cut off either
    assert cache.worth_saving(0, kept=0) is None
    cache.trust_decoded_cells()
    assert cache.worth_saving(0, kept=0) is not None


def test_checkpoints_are_held_within_cache_ram_and_push_out_older_saved_cells():
    cache = recurrent_cache(mib=1)
    host = cache.host
    assert host is not None
    host.add(SavedCells(list(range(64)), 64, state(MIB // 2)))
    cache.claim(0)
    assert cache.add_checkpoint(0, Checkpoint(32, state(MIB // 2 + 1)))  # room is made: the saved cells go
    assert host.entries == [] and host.bytes_held == MIB // 2 + 1
    assert not cache.add_checkpoint(1, Checkpoint(32, state(MIB)))  # no room beside the first checkpoint
    cache.forget(0)
    assert host.bytes_held == 0
    assert not recurrent_cache(mib=0).add_checkpoint(0, Checkpoint(32, state()))  # --cache-ram 0: none kept


def test_a_slots_checkpoints_go_to_host_memory_with_its_cells():
    cache = recurrent_cache()
    cache.claim(0)
    cache.add_checkpoint(0, Checkpoint(96, state()))
    cache.release(0, TURN, prefilled=100)
    saved = cache.worth_saving(0, kept=0)
    assert saved is not None and [checkpoint.pos for checkpoint in saved.checkpoints] == [96]
