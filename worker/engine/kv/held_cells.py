"""Which cells a new prompt could start from, and where they are: what a cluster router is told by KV events
(kv/blocks.py, lifecycle/kv_events.py; core/cell_watch.py looks at the slots and host memory)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.engine.requests import NO_ADAPTERS, AdapterSet

# Where cells are, named as vLLM's KV events name their tiers (what llm-d's indexer scores by): the slots' cells are
# the ones the model computes with (in RAM on the cpu backend, in the GPU's memory on a GPU), host memory holds what
# --cache-ram keeps, and --kv-dir's files are the disk's.
SLOTS = "GPU"
HOST = "CPU"
DISK = "DISK"


@dataclass(frozen=True, eq=False)
class HeldCells:
    medium: str  # SLOTS, HOST or DISK
    tokens: list[int]  # what the reusable cells hold, at positions 0..len-1 (never changed once made)
    adapters: AdapterSet = NO_ADAPTERS  # what they were made under: a prompt under another set reuses none
