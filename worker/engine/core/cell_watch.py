"""The engine thread's look at the reusable cells after each step (kv/held_cells.py): a new list is handed on only
when a place changed, and a place that did not keeps its HeldCells object, so what reads the list (kv/blocks.py) works
on what changed alone."""

from __future__ import annotations

from collections.abc import Callable

from worker.engine.kv.held_cells import HOST, SLOTS, HeldCells
from worker.engine.kv.prefix_cache import PrefixCache, align_down
from worker.engine.requests import AdapterSet
from worker.engine.sequence import Sequence

# A place's identity (a slot, or a host-memory entry) and what makes its HeldCells: the token list (the same object
# while the place holds the same cells: the prefix cache replaces a list, never changes it), how many of its leading
# tokens are reusable, the adapter set.
Place = tuple[str, int]
Shape = tuple[list[int], int, AdapterSet]


class CellWatch:
    def __init__(self, cache: PrefixCache, changed: Callable[[list[HeldCells]], None]) -> None:
        """`changed` is called on the engine thread with every place's reusable cells, whenever one changed: it must
        be quick (hand the list to another thread)."""
        self.cache = cache
        self._changed = changed
        self._held: dict[Place, tuple[Shape, HeldCells]] = {}
        self._first = True

    def after_step(self, free_slots: list[int], running: list[Sequence]) -> None:
        """Look at what the slots and host memory hold now. A free slot's reusable cells are what the prefix cache
        records; a running request's are its prompt's cells prefilled so far, as a prompt copying them would reuse
        them (its answer's join when it leaves, where the mode reuses them): they do not change while it decodes."""
        cache = self.cache
        places: dict[Place, tuple[list[int], int, AdapterSet]] = {}
        for slot in free_slots:
            record = cache.record(slot)
            places[(SLOTS, slot)] = (record.tokens, cache.reusable_cells(slot), record.adapters)
        for seq in running:
            prefilled = min(seq.n_past, len(seq.prompt))
            reusable = prefilled if cache.every_cell else align_down(prefilled, cache.grid)
            places[(SLOTS, seq.slot)] = (seq.prompt, reusable, seq.request.adapters)
        # Host memory holds reusable cells only, loaded back into a slot where the numerics allow moving cells.
        for entry in cache.host.entries if cache.host and cache.moves else []:
            places[(HOST, id(entry))] = (entry.tokens, len(entry.tokens), entry.adapters)
        held: dict[Place, tuple[Shape, HeldCells]] = {}
        for place, (tokens, reusable, adapters) in places.items():
            if not reusable:
                continue
            before = self._held.get(place)
            if before is not None and before[0][0] is tokens and before[0][1:] == (reusable, adapters):
                held[place] = before
            else:
                held[place] = ((tokens, reusable, adapters), HeldCells(place[0], tokens[:reusable], adapters))
        if self._first or held.keys() != self._held.keys() or any(
                held[place][1] is not self._held[place][1] for place in held):
            self._first = False
            self._held = held
            self._changed([cells for _, cells in held.values()])
