"""One saved slot's cells as a file: what --kv-dir holds and what POST /slots/{id}?action=save writes. A file
appears whole or not at all, and is read back only whole and checked: nothing of a bad or foreign one loads."""

from __future__ import annotations

import ctypes
import hashlib
import json
import struct
from array import array
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path
from typing import IO

from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.fingerprint import Fingerprint
from worker.engine.kv.host_cache import SavedCells
from worker.user_cache import atomic_file

# The layout: magic (8 bytes) | header length (u32 LE) | header (JSON: fingerprint, tokens, exact, bytes and, for a
# recurrent state, checkpoints: [position, bytes] each) | tokens (int32 LE each) | cells (llama_state_seq_get_data's
# bytes) | each checkpoint's state (checkpoints.py) | sha256 of everything before it.
MAGIC = b"LLMWKV1\n"
LENGTH = struct.Struct("<I")
DIGEST_BYTES = hashlib.sha256().digest_size
TOKEN = array("i").itemsize  # 4: llama_token; the fingerprint's cpu part keeps files on machines of one byte order
# A header is ~1 KB; more than this is not a header, whatever the length field says.
MAX_HEADER = 1 << 20


class UnusableFile(Exception):
    """A cell file that must not load; its message says why in a few words."""


class OtherFingerprint(UnusableFile):
    """A whole cell file that another worker's numerics made (another model, build, cell type...): it may be that
    worker's to load, so it is left where it is."""


@dataclass(frozen=True)
class Head:
    """What a cell file holds, read from its header and token list (the cells themselves not yet read)."""

    tokens: list[int]
    exact: int
    data_bytes: int
    head_bytes: int  # magic, length, header and tokens: where the cells start
    checkpoints: tuple[tuple[int, int], ...] = ()  # (position, bytes) of each checkpoint after the cells

    @property
    def file_bytes(self) -> int:
        return self.head_bytes + self.data_bytes + sum(size for _, size in self.checkpoints) + DIGEST_BYTES


def write(path: Path, fingerprint: Fingerprint, saved: SavedCells) -> int:
    """Write the cells to `path` atomically (a temp file, fsynced, renamed into place: user_cache.py's atomic_file);
    returns the file's size."""
    header = json.dumps({"fingerprint": fingerprint.as_dict(), "tokens": len(saved.tokens), "exact": saved.exact,
                         "bytes": len(saved.data),
                         "checkpoints": [[checkpoint.pos, checkpoint.size] for checkpoint in saved.checkpoints]})
    digest, written = hashlib.sha256(), 0
    with atomic_file(path) as f:
        parts: list[bytes | memoryview] = [MAGIC, LENGTH.pack(len(header)), header.encode(),
                                           array("i", saved.tokens).tobytes(), memoryview(saved.data)]
        parts += [memoryview(checkpoint.data) for checkpoint in saved.checkpoints]
        for part in parts:
            digest.update(part)
            written += f.write(part)
        written += f.write(digest.digest())
    return written


def read_head(path: Path, fingerprint: Fingerprint) -> Head:
    """The file's header and tokens, checked as far as they go (magic, fingerprint, size); raises UnusableFile."""
    with path.open("rb") as f:
        return _head(f, fingerprint, path.stat().st_size)[0]


def read(path: Path, fingerprint: Fingerprint) -> SavedCells:
    """The whole file as cells to load, checked end to end; raises UnusableFile, with the reason, for a file shorter
    or longer than its header says, one whose checksum differs, or one whose fingerprint is not this worker's
    (fingerprint.py)."""
    with path.open("rb") as f:
        head, raw = _head(f, fingerprint, path.stat().st_size)
        digest = hashlib.sha256(raw)
        data = _read_bytes(f, head.data_bytes, digest)
        checkpoints = [Checkpoint(pos, _read_bytes(f, size, digest)) for pos, size in head.checkpoints]
        if f.read(DIGEST_BYTES + 1) != digest.digest():
            raise UnusableFile("checksum differs: the file is corrupt")
    return SavedCells(head.tokens, head.exact, data, checkpoints=checkpoints)


def _read_bytes(f: BufferedReader, size: int, digest: hashlib._Hash) -> ctypes.Array:
    """The next `size` bytes of the file, hashed into `digest` as they are read."""
    data = (ctypes.c_uint8 * size)()
    if f.readinto(memoryview(data).cast("B")) != size:
        raise UnusableFile("truncated while read")
    digest.update(memoryview(data))
    return data


def _head(f: IO[bytes], fingerprint: Fingerprint, size: int) -> tuple[Head, bytes]:
    """Parse and check the head of a file of `size` bytes open at its start; the head's raw bytes with it."""
    start = f.read(len(MAGIC) + LENGTH.size)
    if start[:len(MAGIC)] != MAGIC[:len(start)]:
        raise UnusableFile("not a cell file (no llm-worker magic)")
    if len(start) < len(MAGIC) + LENGTH.size:
        raise UnusableFile(f"truncated: {size} bytes, shorter than a header")
    (length,) = LENGTH.unpack_from(start, len(MAGIC))
    if length > MAX_HEADER:
        raise UnusableFile(f"corrupt: a header of {length} bytes")
    raw_header = f.read(length)
    if len(raw_header) < length:
        raise UnusableFile(f"truncated: {size} bytes, inside its header")
    try:
        header = json.loads(raw_header)
        saved_print, n_tokens, exact, data_bytes = (dict(header["fingerprint"]), int(header["tokens"]),
                                                    int(header["exact"]), int(header["bytes"]))
        checkpoints = tuple((int(pos), int(size)) for pos, size in header.get("checkpoints", []))
    except (ValueError, KeyError, TypeError) as exc:
        raise UnusableFile(f"corrupt header ({exc})") from None
    if not (0 <= exact <= n_tokens and data_bytes >= 0
            and all(0 < pos <= n_tokens and size > 0 for pos, size in checkpoints)):
        raise UnusableFile(f"corrupt header ({n_tokens} tokens, {exact} exact, {data_bytes} bytes)")
    if differs := fingerprint.explain(saved_print):
        raise OtherFingerprint(f"fingerprint differs: {differs}")
    expected = len(start) + length + TOKEN * n_tokens + data_bytes + sum(size for _, size in checkpoints) + DIGEST_BYTES
    if size != expected:
        raise UnusableFile(f"{'truncated' if size < expected else 'corrupt'}: {size} bytes where its header says "
                       f"{expected}")
    raw_tokens = f.read(TOKEN * n_tokens)
    if len(raw_tokens) < TOKEN * n_tokens:
        raise UnusableFile("truncated while read")
    head = Head(array("i", raw_tokens).tolist(), exact, data_bytes, len(start) + length + len(raw_tokens),
                checkpoints)
    return head, start + raw_header + raw_tokens
