"""Reusable cells as blocks of BLOCK_TOKENS tokens, each named by a hash chained from the blocks before it, and what
changed between two looks as vLLM's KV events say it (BlockStored, BlockRemoved): what a cluster router's prefix index
reads (lifecycle/kv_events.py; docs/operations.md, "KV events").

A block is announced in a medium while any place there holds it, and removed when the last one lets it go: the index
counts holders, so cells that move from a slot to host memory are removed from one medium and stored in the other,
and two slots holding the same system prompt are one block."""

from __future__ import annotations

import hashlib
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from worker.engine.kv.held_cells import HeldCells
from worker.engine.kv.prefix_cache import ALIGN
from worker.engine.media import text_end
from worker.engine.requests import NO_ADAPTERS, AdapterSet

# A block is the prefix cache's grid on the CPU: a router that matches a prompt block by block finds what a prompt
# reuses here to within one block. A router keys blocks by its own tokenization, so this is the worker's own.
BLOCK_TOKENS = ALIGN


@dataclass(frozen=True)
class Block:
    hash: int  # unsigned 64 bits, from the parent's hash, the adapter set (first block) and the block's tokens
    parent: int | None  # the block before it; None: the first
    tokens: list[int]


@dataclass(frozen=True)
class Stored:
    """Blocks that follow one another in one chain, newly held in `medium`."""

    medium: str
    blocks: list[Block]
    adapters: AdapterSet = NO_ADAPTERS


@dataclass(frozen=True)
class Removed:
    medium: str
    hashes: list[int]


def chain(cells: HeldCells) -> list[Block]:
    """The whole blocks of the cells' leading text: an image's cells are named by no token, and a prompt matches them
    only by what the image holds, which a router cannot see."""
    tokens = cells.tokens
    end = text_end(tokens)
    blocks: list[Block] = []
    parent: int | None = None
    salt = str(cells.adapters).encode() if cells.adapters else b""  # cells under other adapters are other cells
    for start in range(0, end - end % BLOCK_TOKENS, BLOCK_TOKENS):
        block = tokens[start:start + BLOCK_TOKENS]
        head = parent.to_bytes(8, "big") if parent is not None else salt
        digest = hashlib.blake2b(head + array("i", block).tobytes(), digest_size=8).digest()
        blocks.append(Block(int.from_bytes(digest, "big"), parent, block))
        parent = blocks[-1].hash
    return blocks


class BlockIndex:
    def __init__(self) -> None:
        self._chains: dict[int, tuple[HeldCells, list[Block]]] = {}  # by id(); the entry keeps its HeldCells alive
        self._holders: Counter[tuple[str, int]] = Counter()  # (medium, hash) -> places holding it

    def update(self, held: Iterable[HeldCells]) -> list[Stored | Removed]:
        """What changed since the last update, for places now holding `held`: a HeldCells seen before (the same
        object) is unchanged and costs nothing."""
        now = {id(cells): cells for cells in held}
        came = [cells for key, cells in now.items() if key not in self._chains]
        gone = [self._chains.pop(key) for key in list(self._chains) if key not in now]
        events: list[Stored | Removed] = []
        for cells in came:  # counted before the others leave: a block that only moved stays stored
            blocks = chain(cells)
            self._chains[id(cells)] = (cells, blocks)
            run: list[Block] = []
            for block in blocks:
                self._holders[cells.medium, block.hash] += 1
                if self._holders[cells.medium, block.hash] == 1:
                    run.append(block)
                elif run:
                    events.append(Stored(cells.medium, run, cells.adapters))
                    run = []
            if run:
                events.append(Stored(cells.medium, run, cells.adapters))
        removed: dict[str, list[int]] = {}
        for cells, blocks in gone:
            for block in blocks:
                key = (cells.medium, block.hash)
                self._holders[key] -= 1
                if not self._holders[key]:
                    del self._holders[key]
                    removed.setdefault(cells.medium, []).append(block.hash)
        events.extend(Removed(medium, hashes) for medium, hashes in removed.items())
        return events
