"""A torch-free SafeTensors reader: headers up front, one tensor's bytes at a time, so a conversion holds one tensor in
memory, not the model.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from worker.worker_error import WorkerError

INDEX_FILE = "model.safetensors.index.json"

# SafeTensors dtype -> (numpy dtype of the stored bits, bytes per element). BF16 has no numpy
# type: its bits are read as uint16 and widened to float32 (they are a float32's upper half).
DTYPES: dict[str, tuple[np.dtype, int]] = {
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    path: Path
    offset: int  # from the start of the file
    nbytes: int

    def read(self) -> np.ndarray:
        """The tensor as float32, whatever it is stored as, read with a plain file read into its own array (no mmap):
        the page cache of the input does not count against the process."""
        np_dtype, _ = DTYPES[self.dtype]
        count = self.nbytes // np_dtype.itemsize
        data = np.fromfile(self.path, dtype=np_dtype, count=count, offset=self.offset)
        if data.size != count:
            raise WorkerError(f"{self.path}: tensor {self.name} is cut short; the file is truncated: re-download it")
        if self.dtype == "BF16":
            wide = data.astype(np.uint32)
            del data  # widened in place below: one float32 copy at a time, not three
            wide <<= 16
            return wide.view(np.float32).reshape(self.shape)
        return data.astype(np.float32, copy=False).reshape(self.shape)


def read_header(path: Path) -> tuple[bytes, dict[str, TensorInfo]]:
    """The raw JSON header (for cache keys) and the tensors it describes, checked against the file size."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 2 or 8 + length > size:
            raise WorkerError(f"{path} is not a SafeTensors file (bad header length); re-download it")
        raw = f.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorkerError(f"{path} has a corrupt SafeTensors header ({exc}); re-download it") from None
    tensors = {}
    data_start = 8 + length
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = meta["dtype"], tuple(int(d) for d in meta["shape"]), meta["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise WorkerError(f"{path} has a corrupt SafeTensors header entry for {name!r}; re-download it") from None
        if dtype not in DTYPES:
            raise WorkerError(
                f"{path}: tensor {name} is {dtype}; only {', '.join(DTYPES)} weights can be converted"
            )
        if end - begin != int(np.prod(shape)) * DTYPES[dtype][1] or data_start + end > size:
            raise WorkerError(
                f"{path}: tensor {name} lies beyond the end of the file ({size} bytes); "
                "the file is truncated or corrupt: re-download it"
            )
        tensors[name] = TensorInfo(name, dtype, shape, path, data_start + begin, end - begin)
    return raw, tensors


def weight_files(folder: Path) -> list[Path]:
    """The folder's SafeTensors files: those its index names, else every *.safetensors."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise WorkerError(f"{index} is not a valid SafeTensors index ({exc!r}); re-download it") from None
        files = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise WorkerError(f"{folder}: shards named in {INDEX_FILE} are missing: {', '.join(missing)}")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WorkerError(f"{folder} has no *.safetensors weights; only SafeTensors folders can be converted")
    return files


def file_signature(path: Path) -> bytes:
    """What identifies a weights file cheaply: its header and its size (not its gigabytes of data)."""
    raw, _ = read_header(path)
    return raw + os.stat(path).st_size.to_bytes(8, "little")
