"""gguf-py's GGUFReader, one per file for the whole run: it turns every metadata value into numpy views, ~5 s for the
test model's 49,152 tokens and 48,900 merges on 2 cores, and many tests and fixtures read the same files."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import gguf
from gguf import GGUFReader
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata


def read_gguf(path: Path) -> GGUFReader:
    """The file's reader, shared by every caller: read from it, never change its fields or tensors (they are views
    of the file). A file written again at the same path is read again."""
    stat = os.stat(path)
    return _reader(Path(path).resolve(), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=16)  # the test model's reader stays; converted files come and go
def _reader(path: Path, _size: int, _mtime_ns: int) -> GGUFReader:
    return GGUFReader(path)


def with_metadata(model: Path, out: Path, keys: dict[str, MetadataDetails]) -> Path:
    """A copy of `model` at `out` with these metadata keys added or changed, its tensors as they were."""
    reader = read_gguf(model)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    copy_with_new_metadata(reader, gguf.GGUFWriter(out, arch=arch, endianess=reader.endianess), keys, [])
    return out
