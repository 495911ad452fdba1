"""LoRA adapters without a model: what a request runs under, how adapter sets take turns at the context, and that
cells made under one set are never offered to another."""

from __future__ import annotations

import ctypes
import time
from collections import deque
from pathlib import Path

import click
import pytest

from worker.api.adapters import Adapters, read_lora
from worker.api.problems import InvalidRequest, Reader
from worker.cli import _lora_refs
from worker.engine.config import Lora
from worker.engine.core.adapter_turns import SWITCH_SHARE, Turns
from worker.engine.core.scheduler import Pace, Scheduler
from worker.engine.kv.host_cache import MIB, HostCache, SavedCells
from worker.engine.kv.prefix_cache import PrefixCache, Reuse, held
from worker.engine.modes import CacheMode
from worker.engine.requests import NO_ADAPTERS, AdapterSet, Request
from worker.engine.sequence import Sequence, SequenceState
from worker.settings import LoraRef

A, B = AdapterSet.of({0: 1.0}), AdapterSet.of({1: 0.5})
PROMPT = list(range(1000, 1300))


def test_an_adapter_set_is_what_llama_cpp_computes():
    """Zero scales are left out (llama.cpp leaves them out of the graph), scales are float32, ids sorted."""
    assert AdapterSet.of({0: 0.0, 1: 0.0}) == NO_ADAPTERS and not AdapterSet.of({2: 0.0})
    assert AdapterSet.of({1: 0.5, 0: 1.0}) == AdapterSet(((0, 1.0), (1, 0.5)))
    assert AdapterSet.of({0: 0.1}) == AdapterSet.of({0: ctypes.c_float(0.1).value})  # the same float32
    assert AdapterSet.of({0: 0.1}) != AdapterSet.of({0: 0.1000001})


def test_a_request_runs_under_its_lora_list_its_model_or_else_the_workers_scales():
    loras = (Lora(Path("a.gguf"), "a", 1.0), Lora(Path("b.gguf"), "b", 0.25))
    adapters = Adapters.loaded(loras, init_without_apply=False)
    assert adapters.resolve(None, None) == AdapterSet.of({0: 1.0, 1: 0.25})
    assert adapters.resolve({1: 2.0}, None) == AdapterSet.of({1: 2.0})  # the list replaces: a is off
    assert adapters.resolve({}, None) == NO_ADAPTERS
    assert adapters.resolve(None, "b") == AdapterSet.of({1: 0.25})  # vLLM's way: the adapter alone, at its scale
    assert adapters.resolve({0: 0.5}, "b") == AdapterSet.of({0: 0.5, 1: 0.25})
    assert Adapters.loaded(loras, init_without_apply=True).resolve(None, None) == NO_ADAPTERS


def test_every_bad_lora_entry_is_listed():
    r = Reader({"lora": [{"id": 5, "scale": 1.0}, {"id": 0, "scale": float("inf")}, {"id": 0, "scale": 1.0},
                         {"id": True, "scale": 1}, {"scale": 1}, "a", {"id": 1.0, "scale": 2}]})
    read_lora(r, 2)
    with pytest.raises(InvalidRequest) as refused:
        r.done()
    fields = [p.field for p in refused.value.problems]
    assert fields == ["lora[0].id", "lora[1].scale", "lora[2].id", "lora[3].id", "lora[4]", "lora[5]"]
    assert refused.value.problems[1].value == "inf"  # JSON holds no infinity: echoed as text
    r = Reader({"lora": {"id": 0}})
    assert read_lora(r, 2) == {} and r.problems[0].constraint == "a list of {id, scale}"
    assert read_lora(Reader({}), 2) is None
    assert read_lora(Reader({"lora": [{"id": 1.0, "scale": 2}]}), 2) == {1: 2.0}  # JSON's 1.0 is the id 1


def test_lora_flags_read_a_scale_after_the_last_colon():
    refs = _lora_refs(None, None, ("a.gguf", "b.gguf:0.5", "hf:owner/repo", "hf:owner/repo/x.gguf@v1:-1", "c:d"))
    assert refs == (LoraRef("a.gguf"), LoraRef("b.gguf", 0.5), LoraRef("hf:owner/repo"),
                    LoraRef("hf:owner/repo/x.gguf@v1", -1.0), LoraRef("c:d"))
    with pytest.raises(click.BadParameter):
        _lora_refs(None, None, ("a.gguf:nan",))


def test_sets_take_turns_of_ten_switches_and_two_steps_each_and_the_longest_waiting_goes_next():
    turns = Turns()
    switch = 0.04
    turn = switch / SWITCH_SHARE
    assert turns.choose([A], NO_ADAPTERS, switch, now=0.0) == A  # the only set with work: at once
    assert turns.choose([A, B], A, switch, now=1.0) == A  # A's turn is long over, but a turn is two steps at least
    assert turns.choose([A, B], A, switch, now=1.0) == B  # now B, which has waited
    assert turns.choose([A, B], B, switch, now=1.0 + turn / 2) == B  # B keeps the context for its turn
    assert turns.choose([A, B, NO_ADAPTERS], B, switch, now=1.1 + turn) == NO_ADAPTERS  # never served yet
    assert turns.choose([A, B, NO_ADAPTERS], NO_ADAPTERS, switch, now=1.2 + turn) == NO_ADAPTERS  # its 2nd step
    assert turns.choose([A, B, NO_ADAPTERS], NO_ADAPTERS, switch, now=1.2 + 2 * turn) == A  # then A: longest wait
    assert turns.choose([B], A, switch, now=1.2 + 2 * turn) == B  # A's requests are done: B at once
    assert turns.choose([B], B, switch, now=100.0) == B  # alone, a set keeps the context
    assert turns.choose([], B, switch, now=101.0) == B


def sequence(prompt: list[int], adapters: AdapterSet, slot: int, state: SequenceState, n_past: int) -> Sequence:
    seq = Sequence(Request(prompt_tokens=prompt, max_tokens=8, adapters=adapters))
    seq.slot, seq.state, seq.n_past = slot, state, n_past
    return seq


def test_requests_of_each_adapter_set_are_placed_on_adjacent_slots():
    """A set's step decodes its rows in one micro-batch per run of adjacent slots (slot_placement.py): a burst of
    requests alternating between two sets fills slots 0-3 with one set and 4-7 with the other, where the least
    recently used order would have interleaved them."""
    scheduler = Scheduler(PrefixCache(CacheMode.EXACT, 8), budget=256)
    burst = [Sequence(Request(prompt_tokens=[7, i, 8, 9], max_tokens=8, adapters=(A, B)[i % 2])) for i in range(8)]
    admitted = scheduler.admit(deque(burst), list(range(8)), [])
    slots = {sets: sorted(a.slot for a in admitted if a.sequence.request.adapters == sets) for sets in (A, B)}
    assert slots == {A: [0, 1, 2, 3], B: [4, 5, 6, 7]}
    # One set alone is placed as the prefix cache alone chooses; a long reuse keeps its slot beside another set.
    alone = Scheduler(PrefixCache(CacheMode.EXACT, 8), budget=256)
    assert [a.slot for a in alone.admit(deque(burst[::2]), list(range(8)), [])] == [0, 1, 2, 3]
    cache = PrefixCache(CacheMode.EXACT, 8)
    for slot in range(8):
        cache.claim(slot)
    cache.release(2, PROMPT, prefilled=len(PROMPT), adapters=A)
    under_b = sequence(PROMPT, B, 0, SequenceState.DECODING, 10)
    (admission,) = Scheduler(cache, budget=256).admit(deque([Sequence(Request(prompt_tokens=[*PROMPT, 5],
                                                                              max_tokens=8, adapters=A))]),
                                                       [1, 2, 3, 4, 5, 6, 7], [under_b])
    assert (admission.slot, admission.reuse) == (2, len(PROMPT) // 16 * 16)


def test_a_step_runs_one_adapter_set_and_the_others_wait_their_turn():
    pace = Pace(switch_s=0.04)
    scheduler = Scheduler(PrefixCache(CacheMode.EXACT, 4), budget=256, pace=pace)
    under_a = sequence(PROMPT, A, 0, SequenceState.DECODING, len(PROMPT))
    under_b = sequence(PROMPT, B, 1, SequenceState.DECODING, len(PROMPT))
    prefilling_b = sequence(PROMPT, B, 2, SequenceState.PREFILLING, 0)
    running = [under_a, under_b, prefilling_b]
    scheduler.turns.since, scheduler.turns.steps = time.monotonic(), 1  # A's turn has just begun: its first step ran
    plan = scheduler.plan(running, [3], 0, False, adapters=A)
    assert plan.adapters == A and plan.decode == [under_a] and plan.prefill == []
    scheduler.turns.since -= 1.0  # and now it is over (0.4 s: ten switches of 40 ms)
    plan = scheduler.plan(running, [3], 0, False, adapters=A)
    assert plan.adapters == B and plan.decode == [under_b] and [c.sequence for c in plan.prefill] == [prefilling_b]


def test_cells_made_under_one_adapter_set_are_never_offered_to_another():
    cache = PrefixCache(CacheMode.EXACT, 3)
    for slot in range(3):
        cache.claim(slot)
    cache.release(0, PROMPT, prefilled=len(PROMPT), adapters=A)
    question = [*PROMPT, 7, 8, 9]
    assert cache.choose(question, [0, 1, 2], {}, B).cells == 0
    assert cache.choose(question, [0, 1, 2], {}, NO_ADAPTERS).cells == 0
    assert cache.choose(question, [0, 1, 2], {}, A) == Reuse(0, len(PROMPT) // 16 * 16)
    # A running stream under A is no copy source for B, and is one for A.
    busy = {0: held(PROMPT, len(PROMPT), A)}
    assert cache.choose(question, [1, 2], busy, B).source is None
    assert cache.choose(question, [1, 2], busy, A).source == 0


def test_host_memory_keeps_cells_by_adapter_set():
    host = HostCache(limit_mib=8)
    under_a = SavedCells(PROMPT, len(PROMPT), (ctypes.c_uint8 * MIB)(), A)
    under_b = SavedCells(PROMPT, len(PROMPT), (ctypes.c_uint8 * MIB)(), B)
    host.add(under_a)
    host.add(under_b)  # the same tokens under another set: kept beside it, not for it
    assert host.entries == [under_a, under_b]
    assert host.holds(PROMPT, A) and not host.holds(PROMPT, NO_ADAPTERS)
    cache = PrefixCache(CacheMode.EXACT, 2, host)
    assert cache.choose([*PROMPT, 1, 2], [0, 1], {}, B) == Reuse(0, len(PROMPT) // 16 * 16, saved=under_b)
    assert cache.choose([*PROMPT, 1, 2], [0, 1], {}, NO_ADAPTERS) == Reuse(0, 0)


def test_a_free_slot_is_settled_under_the_set_its_cells_were_made_under():
    cache = PrefixCache(CacheMode.EXACT, 1)
    cache.claim(0)
    cache.release(0, PROMPT, prefilled=100, adapters=B)
    settle = cache.unsettled([0])
    assert settle is not None and settle.adapters == B
