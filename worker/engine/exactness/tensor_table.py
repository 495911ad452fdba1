"""A GGUF's tensor names and ggml types (and any string values asked for), read from its header without loading
llama.cpp or any weight: build_choice.py and ggml_switches.py choose from them before llama_cpp is imported."""

from __future__ import annotations

import mmap
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from worker.lazy import standalone_module

# gguf-py's constants, without gguf/__init__ (numpy, PyYAML): the GGUF spec's numbering of types.
_constants = standalone_module("gguf", "constants")
GGMLQuantizationType, GGUFValueType = _constants.GGMLQuantizationType, _constants.GGUFValueType

MAGIC = b"GGUF"
# Tensors llama.cpp only looks rows up in (ggml_get_rows), never multiplies by.
LOOKED_UP = frozenset({"token_embd.weight", "position_embd.weight", "token_types.weight"})
# Bytes of each scalar metadata type; strings and arrays are sized as they are walked.
_SCALAR_SIZES = {
    GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8,
}


_LENGTH = struct.Struct("<Q")  # a string's byte count, before its bytes


class NotReadable(Exception):
    """Not a GGUF this reader understands."""


@dataclass(frozen=True)
class Tensor:
    name: str
    type: str  # GGMLQuantizationType's name: Q4_K, F16, ... or TYPE<n> for one gguf-py does not know
    dims: int


class _Cursor:
    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.at = data, 0

    def unpack(self, fmt: str) -> tuple:
        try:
            values = struct.unpack_from(fmt, self.data, self.at)
        except struct.error:
            raise NotReadable("the header ends early") from None
        self.at += struct.calcsize(fmt)
        return values

    def string(self) -> bytes:
        (length,) = self.unpack("<Q")
        value = self.data[self.at:self.at + length]
        self.at += length
        return value

    def _skip_strings(self, count: int) -> None:
        """Past `count` strings, reading only their lengths: a vocabulary's 49,152 (or 262,144) tokens and its merges
        are most of a header, and a method call and a slice for each of them cost ~5x as much."""
        data, at, end = self.data, self.at, len(self.data)
        for _ in range(count):
            if at + 8 > end:
                raise NotReadable("the header ends early")
            at += 8 + _LENGTH.unpack_from(data, at)[0]
        self.at = at

    def skip_value(self, kind: int) -> None:
        if kind == GGUFValueType.STRING:
            self.string()
        elif kind == GGUFValueType.ARRAY:
            item_kind, count = self.unpack("<IQ")
            if item_kind in _SCALAR_SIZES:
                self.at += _SCALAR_SIZES[GGUFValueType(item_kind)] * count
            elif item_kind == GGUFValueType.STRING:
                self._skip_strings(count)
            else:
                for _ in range(count):
                    self.skip_value(item_kind)
        elif kind in _SCALAR_SIZES:
            self.at += _SCALAR_SIZES[GGUFValueType(kind)]
        else:
            raise NotReadable(f"metadata value type {kind} is unknown")


def tensor_table(path: Path) -> list[Tensor]:
    """Every tensor the GGUF declares; NotReadable for what is not a GGUF (v2/v3, little-endian: ggml's
    docs/gguf.md). Walks past the metadata values (their sizes only), in milliseconds, where gguf-py's GGUFReader
    makes numpy arrays of them first: 1.5 s for the test model's 49k-token vocabulary, 14 s for a 262k one."""
    return _header(path, frozenset())[1]


def header_strings(path: Path, keys: frozenset[str]) -> dict[str, str]:
    """The string values of `keys` the GGUF has (an adapter's general.architecture, say); NotReadable as above."""
    return _header(path, keys)[0]


def _header(path: Path, keys: frozenset[str]) -> tuple[dict[str, str], list[Tensor]]:
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _read(_Cursor(data), keys)
    except (OSError, ValueError) as exc:  # missing, empty (mmap of 0 bytes), unreadable
        raise NotReadable(str(exc)) from None


def _read(cursor: _Cursor, keys: frozenset[str]) -> tuple[dict[str, str], list[Tensor]]:
    magic, version = cursor.unpack("<4sI")
    if magic != MAGIC or version not in (2, 3):
        raise NotReadable(f"magic {magic!r}, version {version}")
    n_tensors, n_kv = cursor.unpack("<QQ")
    strings = {}
    for _ in range(n_kv):
        key = cursor.string().decode(errors="replace")
        (kind,) = cursor.unpack("<I")
        if key in keys and kind == GGUFValueType.STRING:
            strings[key] = cursor.string().decode(errors="replace")
        else:
            cursor.skip_value(kind)
    tensors = []
    for _ in range(n_tensors):
        name = cursor.string().decode(errors="replace")
        (dims,) = cursor.unpack("<I")
        cursor.unpack(f"<{dims}Q")
        kind, _offset = cursor.unpack("<IQ")
        tensors.append(Tensor(name, _type_name(kind), dims))
    return strings, tensors


def _type_name(kind: int) -> str:
    try:
        return GGMLQuantizationType(kind).name
    except ValueError:
        return f"TYPE{kind}"


def weight_product_types(path: Path) -> Counter[str]:
    """How many of the matrices llama.cpp multiplies activations by are of each type: all but the looked-up ones,
    and the token embedding too where the model ties its output to it (no output.weight). Empty for a file this
    cannot read: the model loader then says why, in its own words."""
    try:
        tensors = tensor_table(path)
    except NotReadable:
        return Counter()
    tied = "output.weight" not in {t.name for t in tensors}
    return Counter(t.type for t in tensors
                   if t.dims >= 2 and (t.name not in LOOKED_UP or (tied and t.name == "token_embd.weight")))
