"""KV events' bookkeeping without a model: which cells the engine thread says it holds after a step (CellWatch),
and what a router is told when that changes (BlockIndex): stored once where it is held, removed when the last holder
lets go, moved between media, and silent when nothing changed."""

from __future__ import annotations

from worker.engine.core.cell_watch import CellWatch
from worker.engine.kv.blocks import BLOCK_TOKENS, BlockIndex, Removed, Stored, chain
from worker.engine.kv.held_cells import HOST, SLOTS, HeldCells
from worker.engine.kv.host_cache import HostCache
from worker.engine.kv.prefix_cache import PrefixCache
from worker.engine.media import stand_ins
from worker.engine.modes import CacheMode
from worker.engine.requests import AdapterSet, Request
from worker.engine.sequence import Sequence, SequenceState

SYSTEM = list(range(1000, 1000 + 3 * BLOCK_TOKENS))  # three blocks every conversation starts with
TURN = list(range(5000, 5000 + 2 * BLOCK_TOKENS + 5))  # two blocks, and 5 tokens that fill none


def stored_tokens(events: list) -> dict[str, list[int]]:
    """Each medium's stored tokens, in the order announced."""
    tokens: dict[str, list[int]] = {}
    for event in events:
        if isinstance(event, Stored):
            tokens.setdefault(event.medium, []).extend(t for block in event.blocks for t in block.tokens)
    return tokens


def test_a_chain_names_whole_blocks_each_from_its_parent_and_stops_at_an_image():
    blocks = chain(HeldCells(SLOTS, SYSTEM + TURN))
    assert [len(block.tokens) for block in blocks] == [BLOCK_TOKENS] * 5  # the 5 tokens past the last block: none
    assert [block.parent for block in blocks] == [None] + [block.hash for block in blocks[:-1]]
    assert len({block.hash for block in blocks}) == 5
    other_turn = chain(HeldCells(SLOTS, SYSTEM + TURN[::-1]))
    assert [b.hash for b in other_turn[:3]] == [b.hash for b in blocks[:3]]  # the shared system prompt
    assert other_turn[3].hash != blocks[3].hash
    adapted = chain(HeldCells(SLOTS, SYSTEM, AdapterSet(((0, 1.0),))))
    assert not {b.hash for b in adapted} & {b.hash for b in blocks}  # an adapter's cells are other cells
    image = chain(HeldCells(SLOTS, [*SYSTEM[:20], *stand_ins(12345, 8), *SYSTEM[20:]]))
    assert [b.tokens for b in image] == [SYSTEM[:BLOCK_TOKENS]]


def test_a_block_is_stored_once_per_medium_and_removed_when_its_last_holder_lets_go():
    index = BlockIndex()
    first = HeldCells(SLOTS, SYSTEM + TURN)
    events = index.update([first])
    assert stored_tokens(events) == {SLOTS: (SYSTEM + TURN)[:5 * BLOCK_TOKENS]}
    assert index.update([first]) == []  # the same object: nothing changed, nothing said
    second = HeldCells(SLOTS, SYSTEM + TURN[::-1])
    (stored,) = index.update([first, second])
    assert isinstance(stored, Stored) and stored.blocks[0].parent == chain(first)[2].hash  # the system prompt is held
    (removed,) = index.update([second])
    assert removed == Removed(SLOTS, [block.hash for block in chain(first)[3:]])  # its own turn's blocks only
    assert index.update([]) == [Removed(SLOTS, [block.hash for block in chain(second)])]


def test_cells_moved_to_host_memory_leave_one_medium_and_join_the_other():
    index = BlockIndex()
    tokens = SYSTEM + TURN
    index.update([HeldCells(SLOTS, tokens)])
    events = index.update([HeldCells(HOST, tokens)])
    hashes = [block.hash for block in chain(HeldCells(HOST, tokens))]
    assert stored_tokens(events) == {HOST: tokens[:5 * BLOCK_TOKENS]}
    assert [event for event in events if isinstance(event, Removed)] == [Removed(SLOTS, hashes)]
    # A slot that holds a longer copy of what it held before: only the new blocks are news.
    index = BlockIndex()
    index.update([HeldCells(SLOTS, tokens[:3 * BLOCK_TOKENS])])
    (grown,) = index.update([HeldCells(SLOTS, tokens)])
    assert isinstance(grown, Stored) and [b.tokens for b in grown.blocks] == [tokens[48:64], tokens[64:80]]


def test_the_watch_reports_prompt_cells_as_they_are_prefilled_and_answers_once_their_cells_are_exact():
    cache = PrefixCache(CacheMode.EXACT, 2, HostCache(64))
    looks: list[list[HeldCells]] = []
    watch = CellWatch(cache, looks.append)
    watch.after_step([0, 1], [])
    assert looks == [[]]  # the first look is said, empty or not
    seq = Sequence(Request(prompt_tokens=SYSTEM + TURN, max_tokens=8))
    seq.slot, seq.n_past, seq.state = 0, 40, SequenceState.PREFILLING
    watch.after_step([1], [seq])
    assert [cells.tokens for cells in looks[-1]] == [SYSTEM[:32]]  # prefilled, on the grid
    seq.n_past = len(seq.prompt) + 3  # the prompt done, three tokens decoded
    watch.after_step([1], [seq])
    held = looks[-1]
    seq.n_past += 1
    watch.after_step([1], [seq])
    assert len(looks) == 3 and looks[-1] is held  # decoding changes nothing a prompt could reuse
    answer = list(range(7000, 7000 + 24))
    cache.release(0, SYSTEM + TURN + answer, len(seq.prompt))
    watch.after_step([0, 1], [])
    assert [cells.tokens for cells in looks[-1]] == [(SYSTEM + TURN)[:80]]  # exact: the answer's cells are not yet
    watch.after_step([0, 1], [])
    assert len(looks) == 4
