"""Host memory for slots' cells pushed out by other prompts: what is kept, what is dropped, what comes back."""

from __future__ import annotations

import ctypes

from worker.engine.kv.host_cache import MIB, HostCache, SavedCells
from worker.engine.kv.prefix_cache import PrefixCache, Reuse, held
from worker.engine.modes import CacheMode

SYSTEM = list(range(1000, 1100))  # a 100-token system prompt


def saved(tokens: list[int], mib: int = 1) -> SavedCells:
    return SavedCells(tokens, len(tokens), (ctypes.c_uint8 * (mib * MIB))())


def test_the_oldest_entries_go_first_past_the_limit():
    cache = HostCache(limit_mib=2)
    first, second, third = saved([*SYSTEM, 1]), saved([*SYSTEM, 2]), saved([*SYSTEM, 3])
    for entry in (first, second, third):
        cache.add(entry)
    assert cache.entries == [second, third] and cache.bytes_held == 2 * MIB
    cache.add(saved([*SYSTEM, 4], mib=3))  # larger than the whole cache: not kept, nothing dropped for it
    assert cache.entries == [second, third]


def test_out_of_memory_the_cache_holds_less_from_then_on():
    cache = HostCache(limit_mib=8)
    entries = [saved([*SYSTEM, n]) for n in range(5)]
    for entry in entries:
        cache.add(entry)
    cache.shrink()  # 5 MiB held: at most 2 MiB from now on, the newest kept
    assert cache.limit_bytes == 2 * MIB and cache.entries == entries[3:]
    cache.add(saved([*SYSTEM, 9]))
    assert len(cache.entries) == 2


def test_an_entry_that_begins_a_longer_one_gives_way_to_it():
    cache = HostCache(limit_mib=8)
    turn = saved([*SYSTEM, 1, 2])
    cache.add(turn)
    longer = saved([*SYSTEM, 1, 2, 3, 4])
    cache.add(longer)
    assert cache.entries == [longer]
    assert cache.holds([*SYSTEM, 1, 2]) and not cache.holds([*SYSTEM, 9])


def test_a_prompt_continuing_saved_cells_loads_them_into_the_least_recently_used_slot():
    host = HostCache(limit_mib=8)
    cache = PrefixCache(CacheMode.EXACT, 2, host)
    cache.trust_decoded_cells()
    conversation = SYSTEM + list(range(2000, 2200))
    for slot, tokens in enumerate((SYSTEM + list(range(3000, 3100)), SYSTEM + list(range(4000, 4100)))):
        cache.claim(slot)
        cache.release(slot, tokens, prefilled=len(tokens))
    entry = saved(conversation)
    host.add(entry)
    next_turn = [*conversation, 7, 8, 9]
    assert cache.choose(next_turn, [0, 1], {}) == Reuse(0, len(conversation), saved=entry)
    # A prompt that shares only the system prompt with it: the slots hold as much, nothing is loaded.
    assert cache.choose([*SYSTEM, 5, 6, 7], [0, 1], {}).saved is None


def test_where_moved_cells_are_inexact_exact_mode_copies_and_loads_none():
    """The load-time check found cells copied between slots or loaded back from host memory unequal to where they
    were made: exact mode reuses a slot's own cells only; fast mode still moves them."""
    conversation = SYSTEM + list(range(2000, 2200))
    entry = saved(conversation)
    running = {1: held(conversation, len(conversation))}  # a running slot holding the same prefix: a copy source
    chosen = {}
    for mode in (CacheMode.EXACT, CacheMode.FAST):
        host = HostCache(limit_mib=8)
        host.add(entry)
        cache = PrefixCache(mode, 3, host)
        cache.trust_decoded_cells()
        cache.distrust_moved_cells()
        chosen[mode] = (cache.choose([*conversation, 7, 8, 9], [0, 2], {}),
                        cache.choose([*conversation, 7, 8, 9], [0, 2], running))
    assert chosen[CacheMode.EXACT] == (Reuse(0, 0), Reuse(0, 0))
    assert chosen[CacheMode.FAST] == (Reuse(0, len(conversation), saved=entry), Reuse(0, len(conversation), 1))


def test_a_slot_given_to_another_prompt_saves_the_cells_this_mode_may_reuse():
    cache = PrefixCache(CacheMode.EXACT, 1, HostCache(limit_mib=8))
    answered = SYSTEM + list(range(2000, 2040))  # a 100-token prompt, prefilled, and a 40-token answer
    cache.claim(0)
    cache.release(0, answered, prefilled=len(SYSTEM))
    record = cache.worth_saving(0, kept=0)
    assert record.tokens == SYSTEM[:96]  # not trusted: the prefilled blocks only, as the slot would reuse
    cache.trust_decoded_cells()
    assert cache.worth_saving(0, kept=0).tokens == answered
    assert cache.worth_saving(0, kept=len(answered) - 8) is None  # kept nearly whole: nothing worth saving
    assert PrefixCache(CacheMode.EXACT, 1).worth_saving(0, kept=0) is None  # --cache-ram 0
