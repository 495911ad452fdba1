"""Admission decisions, without a model: who goes to which slot, on which cells, and who waits."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from dataclasses import replace

from worker.engine.config import EngineConfig
from worker.engine.core.scheduler import STALL_FACTOR, Pace, Scheduler, chunk_budget, chunk_grid
from worker.engine.kv.prefix_cache import ALIGN, PrefixCache, Reuse, align_down
from worker.engine.media import MediaSpan, stand_ins
from worker.engine.modes import CacheMode
from worker.engine.requests import Request
from worker.engine.sequence import Sequence, SequenceState

SHARED = list(range(1000, 1600))  # a 600-token system prompt


def sequence(prompt: list[int]) -> Sequence:
    return Sequence(Request(prompt_tokens=prompt, max_tokens=8))


def running(prompt: list[int], slot: int, n_past: int, state: SequenceState) -> Sequence:
    seq = sequence(prompt)
    seq.slot, seq.n_past, seq.state = slot, n_past, state
    return seq


def scheduler() -> Scheduler:
    return Scheduler(PrefixCache(CacheMode.EXACT, 4), budget=256)


def test_a_burst_with_one_new_prefix_admits_one_and_lets_an_unrelated_request_pass():
    first, second = sequence([*SHARED, 1, 2, 3]), sequence([*SHARED, 4, 5, 6])
    unrelated = sequence(list(range(50, 90)))
    waiting = deque([first, second, unrelated])
    admitted = scheduler().admit(waiting, [0, 1, 2, 3], [])
    assert [a.sequence for a in admitted] == [first, unrelated]
    assert list(waiting) == [second]  # waits for the cells `first` is prefilling, keeping its place


def test_a_prefix_still_being_prefilled_is_waited_for_then_copied():
    holder = running([*SHARED, 1, 2, 3], slot=0, n_past=256, state=SequenceState.PREFILLING)
    follower = sequence([*SHARED, 4, 5, 6])
    waiting = deque([follower])
    assert scheduler().admit(waiting, [1, 2, 3], [holder]) == []
    holder.n_past, holder.state = len(holder.prompt), SequenceState.DECODING
    (admission,) = scheduler().admit(waiting, [1, 2, 3], [holder])
    assert admission.source == 0 and admission.slot != 0
    assert admission.reuse == len(SHARED) // ALIGN * ALIGN  # whole prefill-made blocks only (exact)


def test_a_short_shared_prefix_is_not_worth_a_copy():
    holder = running([*SHARED[:20], 1, 2, 3], slot=0, n_past=23, state=SequenceState.DECODING)
    waiting = deque([sequence([*SHARED[:20], 4, 5, 6])])
    (admission,) = scheduler().admit(waiting, [1, 2, 3], [holder])
    assert admission.source is None and admission.reuse == 0


def test_a_request_needing_more_slots_than_are_free_holds_back_those_behind_it():
    wide = sequence(list(range(10, 60)))
    wide.forks = [sequence(wide.prompt) for _ in range(3)]
    small = sequence(list(range(70, 90)))
    waiting = deque([wide, small])
    assert scheduler().admit(waiting, [0, 1], []) == []
    assert list(waiting) == [wide, small]


ANSWERED = SHARED[:100]  # a turn's prompt (100 tokens), then its answer (30 tokens, decoded one at a time)
NEXT_TURN = ANSWERED + list(range(2000, 2030)) + list(range(3000, 3020))


def cache_after_a_turn(trusted: bool) -> PrefixCache:
    cache = PrefixCache(CacheMode.EXACT, 2)
    if trusted:
        cache.trust_decoded_cells()
    cache.claim(0)
    cache.release(0, NEXT_TURN[:130], prefilled=100)
    return cache


def test_exact_mode_reuses_only_whole_prefilled_blocks_by_default():
    cache = cache_after_a_turn(trusted=False)
    assert cache.choose(NEXT_TURN, [0, 1], {}).cells == 96  # 100 prefilled, down to a block; no answer cells
    assert cache.unsettled([0, 1]) is not None  # the answer waits to be prefilled again while idle


def test_exact_mode_reuses_the_answer_where_the_numerics_make_it_as_prefill_does():
    cache = cache_after_a_turn(trusted=True)
    assert cache.choose(NEXT_TURN, [0, 1], {}).cells == 130  # the whole turn, answer included, unaligned
    assert cache.cells_held(0) == 130 and cache.unsettled([0, 1]) is None


def test_trusting_decoded_cells_changes_nothing_when_the_cache_is_off():
    cache = PrefixCache(CacheMode.OFF, 1)
    cache.trust_decoded_cells()
    assert not cache.every_cell and cache.choose(NEXT_TURN, [0], {}).cells == 0


def cache_holding(*streams: list[int]) -> PrefixCache:
    """Slots 0, 1, ... holding these finished requests' cells, in that order of use."""
    cache = PrefixCache(CacheMode.EXACT, 4)
    cache.trust_decoded_cells()
    for slot, tokens in enumerate(streams):
        cache.claim(slot)
        cache.release(slot, tokens, prefilled=len(tokens))
    return cache


def test_a_prompt_sharing_only_a_short_prefix_leaves_another_conversation_in_its_slot():
    cache = cache_holding(SHARED[:20] + list(range(3000, 3400)))
    # An empty slot takes it: the conversation in slot 0 is still whole for its next turn; 20 tokens: no copy.
    assert cache.choose(SHARED[:20] + list(range(5000, 5300)), [0, 1, 2, 3], {}) == Reuse(1, 0)


def test_a_free_slots_longer_prefix_is_copied_into_an_empty_slot_rather_than_overwritten():
    cache = cache_holding(SHARED + list(range(3000, 3400)))
    assert cache.choose([*SHARED, 7, 8, 9], [0, 1, 2, 3], {}) == Reuse(1, len(SHARED), source=0)


def test_with_no_empty_slot_a_prompt_takes_one_in_place_only_if_it_keeps_more_cells_than_it_drops():
    cache = cache_holding(SHARED[:20] + list(range(3000, 3400)), SHARED + list(range(4000, 4100)))
    assert cache.choose([*SHARED, 7, 8, 9], [0, 1], {}) == Reuse(1, len(SHARED))  # keeps 600, drops 100
    assert cache.choose([*SHARED[:20], 7, 8, 9], [0, 1], {}) == Reuse(0, 20)  # keeps 20 of 420: LRU, no copy
    assert cache.choose(list(range(9000, 9200)), [0, 1], {}) == Reuse(0, 0)  # shares nothing: LRU


def test_prefill_beside_running_streams_is_held_to_the_measured_pace():
    """Every running stream waits for a step's prefill: while any decodes, a step prefills only what fits in
    STALL_FACTOR decode steps at the measured speed (whole blocks); with none decoding, the whole budget."""
    pace = Pace()
    pace.observe_decode(0.050, 1)  # a step of decode rows: 50 ms
    pace.observe_prefill(0.640, 256)  # 2.5 ms a prompt token
    plan = Scheduler(PrefixCache(CacheMode.EXACT, 4), budget=256, pace=pace).plan
    new = running(list(range(10, 510)), slot=1, n_past=0, state=SequenceState.PREFILLING)
    streaming = running(list(range(600, 640)), slot=0, n_past=45, state=SequenceState.DECODING)
    (chunk,) = plan([streaming, new], [2, 3], 0, False).prefill
    assert chunk.end - chunk.start == align_down(int(STALL_FACTOR * 0.050 / 0.0025)) == 48
    (alone,) = plan([new], [0, 2, 3], 0, False).prefill
    assert alone.end - alone.start == 256
    # Nothing measured yet (a stream's first decode step), or one speed only: two blocks, the least a step holds.
    assert Pace().prefill_tokens_beside_streams(256) == 2 * ALIGN
    decoded_only = Pace()
    decoded_only.observe_decode(0.050, 1)
    assert decoded_only.prefill_tokens_beside_streams(256) == 2 * ALIGN
    assert Pace().prefill_tokens_beside_streams(16, grid=16) == 16  # never more than the budget


def test_a_gpu_cuts_exact_and_off_prompts_on_micro_batches_and_prefills_whole_batches():
    """ggml-cuda computes a row by the rows of its micro-batch: only one cut as the cold prefill cuts it makes the
    same cells (chunk_grid). A chunk there is the whole batch, which llama.cpp cuts into micro-batches from the
    chunk's start; on the CPU a chunk is one micro-batch, on ALIGN."""
    for config in (EngineConfig(backend="cuda", batch_size=2048, ubatch_size=512),
                   EngineConfig(backend="vulkan", batch_size=2048, ubatch_size=512, prefix_cache=CacheMode.OFF),
                   EngineConfig(rpc_servers=("h:1",), batch_size=2048, ubatch_size=512)):
        assert (chunk_grid(config), chunk_budget(config)) == (512, 2048), config
    # llama.cpp's own micro-batch, not a multiple of ALIGN: the grid is what llama.cpp cuts on.
    assert (chunk_grid(EngineConfig(backend="cuda", batch_size=2048, ubatch_size=500)),
            chunk_budget(EngineConfig(backend="cuda", batch_size=2048, ubatch_size=500))) == (500, 2000)
    assert chunk_grid(EngineConfig(backend="cuda", prefix_cache=CacheMode.FAST)) == ALIGN
    for config in (EngineConfig(batch_size=512, ubatch_size=256), EngineConfig(prefix_cache=CacheMode.OFF,
                                                                                 batch_size=512, ubatch_size=256)):
        assert (chunk_grid(config), chunk_budget(config)) == (ALIGN, 256), config


def prefill_chunks(scheduler: Scheduler, prompt: list[int], n_past: int,
                   beside: list[Sequence]) -> list[tuple[int, int]]:
    """The chunks a prompt is prefilled in from n_past, step by step."""
    seq = running(prompt, slot=1, n_past=n_past, state=SequenceState.PREFILLING)
    chunks = []
    while seq.n_past < len(prompt):
        (chunk,) = scheduler.plan([*beside, seq], [2, 3], 0, False).prefill
        chunks.append((chunk.start, chunk.end))
        seq.n_past = chunk.end
    return chunks


def test_on_a_micro_batch_grid_a_prompt_is_cut_as_its_cold_prefill_is_whatever_was_cached_or_runs_beside():
    grid = 64  # the micro-batch; chunks of two
    pace = Pace()
    pace.observe_decode(0.050, 1)
    pace.observe_prefill(0.640, 64)  # 10 ms a token: on ALIGN the pace would allow 16-token chunks
    cache = PrefixCache(CacheMode.EXACT, 4, grid=grid)
    scheduler = Scheduler(cache, budget=2 * grid, pace=pace)
    streaming = running(list(range(600, 640)), slot=0, n_past=45, state=SequenceState.DECODING)
    prompt = list(range(10, 10 + 4 * grid + 1))  # a lone last row past the grid: a cold prefill runs it so too
    cold = prefill_chunks(scheduler, prompt, 0, [])
    assert cold == [(0, 128), (128, 192), (192, 257)]
    assert prefill_chunks(scheduler, prompt, 0, [streaming]) == cold
    # A turn's prompt of 150 tokens and its answer: the next turn reuses the whole prefilled micro-batches alone,
    # and its chunks from there start on the grid, as the cold prefill's micro-batches do.
    cache.claim(0)
    cache.release(0, prompt[:150] + list(range(2000, 2030)), prefilled=150)
    reuse = cache.choose(prompt, [0], {})
    assert reuse.cells == 128
    assert prefill_chunks(scheduler, prompt, reuse.cells, [streaming]) == cold[1:]
    # While idle, an answer is prefilled again a whole micro-batch at a time: a prompt of 150 and 60 answer tokens.
    cache.release(0, prompt[:150] + list(range(2000, 2060)), prefilled=150)
    settle = cache.unsettled([0])
    assert settle is not None and (settle.start, settle.end) == (128, 192)


def test_a_chunk_never_ends_inside_an_image_decoded_whole():
    """Gemma 3's images attend both ways (MediaSpan.whole): one llama_decode each. A chunk whose budget ends inside
    one stops before it; a chunk that starts at it takes all of it, past the budget."""
    image = MediaSpan(start=200, n_tokens=256, n_pos=256, chunk=None, pixel_hash=7, whole=True)
    prompt = [*range(10, 210), *stand_ins(7, 256), *range(300, 340)]
    seq = running(prompt, slot=0, n_past=0, state=SequenceState.PREFILLING)
    seq.request = replace(seq.request, media=(image,))
    seq.embeddings[200] = encoded()
    plan = scheduler().plan
    (first,) = plan([seq], [1, 2, 3], 0, False).prefill
    assert (first.start, first.end) == (0, 200)  # the budget's 256 would end 56 tokens into the image
    seq.n_past = 200
    (second,) = plan([seq], [1, 2, 3], 0, False).prefill
    assert (second.start, second.end) == (200, 456)  # the whole image, though the next block boundary is 448
    causal = replace(image, whole=False)
    seq.request, seq.n_past = replace(seq.request, media=(causal,)), 0
    assert plan([seq], [1, 2, 3], 0, False).prefill[0].end == 256


def encoded() -> Future:
    done: Future = Future()
    done.set_result(None)
    return done


def test_a_prompt_is_prefilled_up_to_an_image_still_being_encoded_and_waits_there():
    """Images are encoded on the encoder thread from admission (core/runner.py): the steps meanwhile prefill the text
    before one, and a prompt whose next token is the image has no work until it is encoded."""
    image = MediaSpan(start=40, n_tokens=16, n_pos=16, chunk=None, pixel_hash=7)
    seq = running([*range(10, 50), *stand_ins(7, 16), *range(300, 340)], slot=0, n_past=0,
                  state=SequenceState.PREFILLING)
    seq.request = replace(seq.request, media=(image,))
    seq.embeddings[40] = Future()  # encoding
    plan = scheduler().plan
    (chunk,) = plan([seq], [1, 2, 3], 0, False).prefill
    assert (chunk.start, chunk.end) == (0, 40) and not seq.waits_for_encoder()
    seq.n_past = 40
    assert plan([seq], [1, 2, 3], 0, False).prefill == [] and seq.waits_for_encoder()
    seq.cancelled = True
    assert not seq.waits_for_encoder()  # a step drops it
    seq.cancelled = False
    seq.embeddings[40].set_result(None)
    (chunk,) = plan([seq], [1, 2, 3], 0, False).prefill
    assert (chunk.start, chunk.end) == (40, 96) and not seq.waits_for_encoder()
