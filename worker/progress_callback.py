"""The one callback every long job reports progress through: download, convert, quantize, load, warm-up.

Here, below both source/ and engine/, so that each can import it without importing the other.
"""

from __future__ import annotations

from collections.abc import Callable

# (stage, done, total): done and total count whatever the stage counts (bytes, tensors, percent).
ProgressFn = Callable[[str, int, int], None]
