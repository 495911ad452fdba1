"""Hugging Face folder -> GGUF file, streamed: plan every tensor from the SafeTensors headers (the GGUF header needs
each one's name, type and size first), then read, transform, cast and append one at a time. Peak memory: one tensor.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import structlog

from worker.progress_callback import ProgressFn
from worker.source.convert.architectures import (
    IGNORED_PREFIXES,
    IGNORED_SUFFIXES,
    STRIPPED_PREFIXES,
    Architecture,
    Context,
    Transform,
    architecture_for,
    rope_scaling,
)
from worker.source.convert.folder import HfFolder, open_folder
from worker.source.convert.generation import sampling_keys
from worker.source.convert.safetensors import TensorInfo
from worker.source.convert.vocab import read_vocab, write_vocab
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)

F32 = gguf.GGMLQuantizationType.F32


@dataclass(frozen=True)
class PlannedTensor:
    name: str  # GGUF name
    shape: tuple[int, ...]  # numpy order, after transforms
    qtype: gguf.GGMLQuantizationType
    load: Callable[[], np.ndarray]  # float32 data, transformed

    @property
    def nbytes(self) -> int:
        return int(np.prod(gguf.quant_shape_to_byte_shape(self.shape, self.qtype)))


def _output_type(gguf_name: str, shape: tuple[int, ...],
                 wanted: gguf.GGMLQuantizationType) -> gguf.GGMLQuantizationType:
    # As llama.cpp's converter: 1-D tensors and norms stay F32 (most kernels only take F32 there).
    if len(shape) <= 1 or gguf_name.endswith("_norm.weight"):
        return F32
    block, _ = gguf.GGML_QUANT_SIZES[wanted]
    if shape[-1] % block:
        log.warning("type_fallback", tensor=gguf_name, wanted=wanted.name, used="F16",
                    reason=f"rows of {shape[-1]} are not a multiple of {block}")
        return gguf.GGMLQuantizationType.F16
    return wanted


def _hf_name(name: str) -> str | None:
    """The text model's name for a checkpoint tensor, or None when no GGUF wants it."""
    if name.endswith(IGNORED_SUFFIXES) or name.startswith(IGNORED_PREFIXES):
        return None
    for prefix in STRIPPED_PREFIXES:
        name = name.replace(prefix, "", 1)
    return name


def _loader(info: TensorInfo, transforms: list[Transform], ctx: Context) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        data = info.read()
        for transform in transforms:
            data = transform.apply(data, ctx)
        return data

    return load


def _held(data: np.ndarray) -> Callable[[], np.ndarray]:
    """A loader of data already in memory."""
    return lambda: data


def plan_tensors(folder: HfFolder, arch: Architecture, ctx: Context, wanted: gguf.GGMLQuantizationType,
                 extra: list[tuple[str, np.ndarray]]) -> list[PlannedTensor]:
    names = gguf.get_tensor_name_map(arch.gguf_arch, ctx.config["num_hidden_layers"])
    planned = [PlannedTensor(name, data.shape, F32, _held(data)) for name, data in extra]
    for hf, info in sorted(folder.tensors.items()):
        name = _hf_name(hf)
        if name is None or name in arch.skip:
            continue
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise WorkerError(f"{folder.path}: tensor {hf} has no {arch.name} GGUF name; is config.json's "
                              "architecture right?")
        transforms = [t for t in arch.transforms if name.endswith(t.suffixes)]
        shape = info.shape
        for transform in transforms:
            shape = transform.shape(shape, ctx)
        planned.append(PlannedTensor(gguf_name, shape, _output_type(gguf_name, shape, wanted),
                                     _loader(info, transforms, ctx)))
    return planned


def _write_metadata(writer: gguf.GGUFWriter, folder: HfFolder, arch: Architecture, file_type: gguf.LlamaFileType,
                    extra_keys: list[tuple[str, object]]) -> None:
    writer.add_type(gguf.GGUFType.MODEL)
    for method, value in sampling_keys(folder.generation):  # before the name, where llama.cpp's converter puts them
        getattr(writer, method)(value)
    writer.add_name(folder.path.name)
    for param in arch.params:
        if (value := param.value(folder.config)) is not None:
            getattr(writer, param.writer)(value)
    for derived in arch.derived:
        if (value := derived.compute(folder.config)) is not None:
            getattr(writer, derived.writer)(value)
    for method, value in extra_keys:
        getattr(writer, method)(value)
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def convert_folder(path: Path, out: Path, out_type: str = "f16", progress: ProgressFn | None = None) -> None:
    """Write the GGUF of the Hugging Face folder `path` to `out` (which the caller makes atomic)."""
    started = time.monotonic()
    # One of types.OUTPUT_TYPES, named alike in both of gguf-py's enums.
    qtype, file_type = gguf.GGMLQuantizationType[out_type.upper()], gguf.LlamaFileType[f"MOSTLY_{out_type.upper()}"]
    folder = open_folder(path)
    arch = architecture_for(folder.architecture)
    rope = rope_scaling(arch, folder.config)
    vocab = read_vocab(path, folder.config.get("vocab_size"))
    ctx = Context(folder.config, len(vocab.tokens))
    extra = [("rope_freqs.weight", rope.rope_freqs)] if rope.rope_freqs is not None else []
    tensors = plan_tensors(folder, arch, ctx, qtype, extra)

    writer = gguf.GGUFWriter(path=None, arch=arch.name)
    _write_metadata(writer, folder, arch, file_type, rope.keys)
    write_vocab(writer, vocab, path, arch.add_space_prefix)
    for t in tensors:
        byte_shape = gguf.quant_shape_to_byte_shape(t.shape, t.qtype)
        dtype = {F32: np.float32, gguf.GGMLQuantizationType.F16: np.float16}.get(t.qtype, np.uint8)
        writer.add_tensor_info(t.name, byte_shape if dtype is np.uint8 else t.shape, np.dtype(dtype), t.nbytes,
                               raw_dtype=t.qtype)
    total_bytes = sum(t.nbytes for t in tensors)
    log.info("convert_start", source=str(path), architecture=arch.name, type=out_type,
             tensors=len(tensors), out_bytes=total_bytes)
    writer.write_header_to_file(out)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for done, t in enumerate(tensors, 1):
        writer.write_tensor_data(gguf.quants.quantize(t.load(), t.qtype))
        if progress is not None:
            progress("convert", done, len(tensors))
    writer.close()
    seconds = time.monotonic() - started
    read_bytes = sum(info.nbytes for info in folder.tensors.values())
    log.info("convert_done", out=str(out), seconds=round(seconds, 2), in_bytes=read_bytes, out_bytes=total_bytes,
             mb_per_s=round(read_bytes / 1e6 / max(seconds, 1e-9), 1))
