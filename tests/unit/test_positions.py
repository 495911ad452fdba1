"""Tokens and positions counted apart: an M-RoPE image's grid takes fewer positions than tokens (engine/positions.py),
and the prefix cache reuses such an image's cells whole or not at all."""

from __future__ import annotations

import ctypes

from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.prefix_cache import PrefixCache, held
from worker.engine.media import MediaSpan, stand_ins
from worker.engine.modes import CacheMode
from worker.engine.positions import TOKENS, Positions

# Two 4x4 grids (16 tokens, 4 positions each) at tokens 3 and 25, text around them.
FIRST, SECOND = MediaSpan(3, 16, 4, None, 1), MediaSpan(25, 16, 4, None, 2)
FOLDED = Positions.of_media((FIRST, SECOND))


def test_an_image_whose_tokens_take_their_own_positions_changes_nothing():
    assert Positions.of_media((MediaSpan(3, 16, 16, None, 1),)) is TOKENS
    assert [TOKENS.cell(i) for i in range(5)] == [0, 1, 2, 3, 4]
    assert TOKENS.cut(7) == 7 and TOKENS.held_end(7) == 6 and TOKENS.whole(7) == 7


def test_a_folded_image_sits_at_its_first_position_and_the_text_after_it_goes_on_past_its_grid():
    assert [FOLDED.cell(i) for i in (0, 2, 3, 10, 18)] == [0, 2, 3, 3, 3]  # the grid's cells share position 3
    assert FOLDED.cell(19) == 3 + 4  # the text after: 4 positions past the image's first
    assert FOLDED.cell(24) == 12
    assert FOLDED.cell(25) == FOLDED.cell(40) == 13  # the second image
    assert FOLDED.cell(41) == 13 + 4


def test_cells_end_where_the_last_token_before_sits():
    assert FOLDED.held_end(0) == -1
    assert FOLDED.held_end(3) == 2
    assert FOLDED.held_end(10) == 3  # halfway into the image: its cells so far at 3
    assert FOLDED.held_end(19) == 3  # the whole image: still 3, and the text goes on at 7


def test_a_cut_keeps_whole_images_only():
    assert FOLDED.cut(3) == 3  # before the image: drops it whole
    assert FOLDED.cut(19) == 7  # after it: keeps it
    assert FOLDED.cut(10) is None  # inside: its cells share one position
    assert FOLDED.whole(10) == 3 and FOLDED.whole(19) == 19 and FOLDED.whole(30) == 25


def test_the_prefix_cache_reuses_a_folded_image_whole_or_not_at_all():
    prompt = [7, 8, 9, *stand_ins(1, 16), *range(100, 106), *stand_ins(2, 16), 200, 201, 202]
    other_second = [*prompt[:25], *stand_ins(3, 16), 200, 201, 202]  # the same first image, another second one
    fast = PrefixCache(CacheMode.FAST, 1)
    record = held(other_second, len(other_second))
    assert fast.reusable(record, prompt) == 25  # token by token: up to the second image
    assert fast.reusable(record, prompt, positions=FOLDED) == 25
    exact = PrefixCache(CacheMode.EXACT, 1, grid=16)
    # Exact mode stops on the grid: 16 is inside the first image, so that image is prefilled again, whole.
    assert exact.reusable(record, prompt) == 16
    assert exact.reusable(record, prompt, positions=FOLDED) == 0


def test_a_recurrent_state_goes_on_from_no_checkpoint_inside_a_folded_image():
    prompt = [7, 8, 9, *stand_ins(1, 16), *range(100, 140)]
    record = held([*prompt[:50], 999], 51)  # the state ends past where the prompt parts: a checkpoint it must be
    record.checkpoints = [Checkpoint(16, (ctypes.c_uint8 * 1)()), Checkpoint(32, (ctypes.c_uint8 * 1)())]
    cache = PrefixCache(CacheMode.FAST, 1, cuts_anywhere=False)
    assert cache.reusable(record, prompt) == 32
    record.checkpoints = record.checkpoints[:1]
    assert cache.reusable(record, prompt) == 16
    assert cache.reusable(record, prompt, positions=Positions.of_media((FIRST,))) == 0  # 16 is inside the grid
