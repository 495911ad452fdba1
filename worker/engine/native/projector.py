"""A multimodal projector (--mmproj) through libmtmd: loaded beside the model, images decoded and tokenized, and
each image chunk encoded into the embeddings the engine decodes at its positions (docs/models.md, "Vision models")."""

from __future__ import annotations

import ctypes
import hashlib
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import structlog
from llama_cpp import mtmd_cpp as mtmd

from worker.engine.errors import MediaUnreadable
from worker.engine.media import MEDIA_MARKER, MediaPrompt, MediaSpan, stand_ins
from worker.engine.native import llama_log
from worker.engine.native.model import GGUF_MAGIC, LlamaModel
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)

CHUNK_TEXT = 0  # mtmd_input_chunk_type; the others are an image's (1) and a clip's (2)


@dataclass(eq=False)
class Bitmap:
    """A decoded image (RGB pixels) or audio clip (float samples at the projector's rate), owned, and the hash the
    cache keys it by."""

    handle: int
    width: int  # an image's; a clip's samples
    height: int  # an image's; 1 for a clip
    id: bytes  # what mtmd keeps with the media's chunks: its pixels' or samples' hash, in hex
    audio: bool = False

    def __post_init__(self) -> None:
        weakref.finalize(self, mtmd.mtmd_bitmap_free, self.handle)


# libmtmd comes from beside the libllama the process loaded (exactness/build_choice.py sets MTMD_CPP_LIB), since it
# calls into libllama. Decoding an image and tokenizing may run on any thread, as llama-server runs them on its HTTP
# threads; encoding runs on an encoder thread of its own, one image at a time (mtmd keeps one output buffer), while
# the engine thread's steps go on: a stream beside an arriving image is not held for the encoder's whole graph.
class Projector:
    def __init__(self, path: Path, model: LlamaModel) -> None:
        _check_file(path)
        llama_log.install_mtmd(mtmd.mtmd_helper_log_set)
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = model.config.backend != "cpu"
        params.n_threads = model.config.threads
        params.media_marker = MEDIA_MARKER.encode()
        # No warm-up encode here, on the loading thread: ggml's OpenMP pool belongs to the thread that first
        # computes, and the engine thread must be that one (docs/development.md, "The engine at work").
        params.warmup = False
        self._marker = params.media_marker  # the struct points at these bytes
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="encoder")
        self.threads = model.config.threads
        # Set by the engine thread each step, and again once the step's finished sequences are retired: whether
        # streams decode beside the encoder, which then takes half the threads (bench/probes/RESULTS.md, "The encoder
        # beside streams"): their steps are not starved, and an image alone is encoded with all of them.
        self.beside_streams = False
        self._set_threads = _thread_setter()
        ctx = mtmd.mtmd_init_from_file(str(path).encode(), model.model, params)
        if not ctx:
            why = " ".join(llama_log.last_error("llama.cpp could not load it").split())  # one line, as mtmd's has two
            raise WorkerError(f"--mmproj {path}: {why}; a projector is made for one model (its "
                              f"embedding width must be the model's, {model.n_embd})")
        self.ctx = ctx
        self.path = path
        self.n_embd = model.n_embd
        self.vision = bool(mtmd.mtmd_support_vision(ctx))
        self.audio = bool(mtmd.mtmd_support_audio(ctx))
        self.mrope = bool(mtmd.mtmd_decode_use_mrope(ctx))  # each embedding row placed by 4 numbers (positions.py)
        try:
            self._check_drivable(model)
        except WorkerError:
            self.close()
            raise

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """As llama-server's /v1/models says them."""
        return ("text",) + (("image",) if self.vision else ()) + (("audio",) if self.audio else ())

    @property
    def sample_rate(self) -> int:
        """The rate a clip is decoded at (16,000 for Whisper's encoders): its samples over this are its seconds."""
        return mtmd.mtmd_get_audio_sample_rate(self.ctx)

    # What the engine cannot drive is refused at load, each with its reason: images decoded whole (non-causal
    # attention) larger than a micro-batch (llama.cpp would cut one into several, each blind to the rest), and marker
    # tokens the vocabulary lacks (mtmd would hand the model -1).
    def _check_drivable(self, model: LlamaModel) -> None:
        where = f"--mmproj {self.path}"
        probes = []
        if self.vision:
            black = (ctypes.c_uint8 * 3)()
            probes.append(("images", _hashed(mtmd.mtmd_bitmap_init(1, 1, black))))
        if self.audio:
            silence = (ctypes.c_float * self.sample_rate)()
            probes.append(("audio", _hashed(mtmd.mtmd_bitmap_init_from_audio(self.sample_rate, silence), audio=True)))
        for kind, bitmap in probes:
            probe = self.tokenize(MEDIA_MARKER, [bitmap], add_special=False)
            span = probe.spans[0]
            if span.whole and span.n_tokens > model.config.micro_batch:
                raise WorkerError(f"{where} decodes each of its {kind} whole, attending both ways (Gemma 3 style): "
                                  f"its {span.n_tokens} tokens must fit one micro-batch; set --ubatch-size "
                                  f"{span.n_tokens} or more (now {model.config.micro_batch})")
            if any(token == llama_cpp.LLAMA_TOKEN_NULL for token in probe.tokens):
                raise WorkerError(f"{where} wraps {kind} in marker tokens that {model.path.name}'s vocabulary "
                                  "lacks: it is a projector for another model (SmolVLM's idefics3 projector beside "
                                  "plain SmolLM2, say)")

    def decode(self, data: bytes, audio: bool) -> Bitmap:
        """An image's pixels or an audio clip's samples, hashed (thread-safe). Raises MediaUnreadable, also for
        bytes of the other kind. The caller checks an image's size first: stb_image decodes whatever dimensions a
        header claims."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        handle = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(data), False)
        if handle and bool(mtmd.mtmd_bitmap_is_audio(handle)) != audio:
            mtmd.mtmd_bitmap_free(handle)
            handle = None
        if not handle:
            raise MediaUnreadable("the bytes are not an audio clip miniaudio decodes (wav, mp3, flac)" if audio else
                                  "the bytes are not an image stb_image decodes (jpg, png, bmp, gif, ...)")
        return _hashed(handle, audio)

    def tokenize(self, text: str, bitmaps: list[Bitmap], add_special: bool) -> MediaPrompt:
        """The prompt's tokens, each MEDIA_MARKER in `text` replaced by its bitmap's chunk (in order)."""
        data = text.encode("utf-8")
        source = mtmd.mtmd_input_text(data, len(data), add_special, True)
        handles = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*[b.handle for b in bitmaps])
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            status = mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(source), handles, len(bitmaps))
            if status != 0:  # 1: markers and bitmaps differ in number; 2: an image failed preprocessing
                raise MediaUnreadable(f"mtmd could not tokenize the prompt's media (status {status}): "
                                      f"{llama_log.last_error('see the worker log')}")
            return self._read_chunks(chunks)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)

    def _read_chunks(self, chunks: int) -> MediaPrompt:
        tokens: list[int] = []
        spans: list[MediaSpan] = []
        last_id, piece = b"", 0
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == CHUNK_TEXT:
                n = ctypes.c_size_t()
                ids = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                tokens.extend(ids[:n.value])
                continue
            # An image may become several chunks (a tiled image's slices), a clip one a 30-second window (Whisper's),
            # all with its bitmap's id: each piece gets stand-ins of its own, from the hash and its place among the
            # pieces of that id.
            chunk_id = mtmd.mtmd_input_chunk_get_id(chunk) or b""
            last_id, piece = chunk_id, (piece + 1 if chunk_id == last_id else 0)
            key = int(chunk_id or b"0", 16) + 7919 * piece
            n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
            owned = mtmd.mtmd_input_chunk_copy(chunk)
            span = MediaSpan(len(tokens), n_tokens, mtmd.mtmd_input_chunk_get_n_pos(chunk), owned, key,
                             whole=bool(mtmd.mtmd_decode_use_non_causal(self.ctx, chunk)))
            weakref.finalize(span, mtmd.mtmd_input_chunk_free, owned)
            spans.append(span)
            tokens.extend(stand_ins(key, n_tokens))
        return MediaPrompt(tokens, tuple(spans))

    def encode_later(self, span: MediaSpan) -> Future[ctypes.Array]:
        """The span's embeddings, encoded on the encoder thread (the future fails with RuntimeError where mtmd
        did)."""
        return self._encoder.submit(self.encode, span)

    def encode(self, span: MediaSpan) -> ctypes.Array:
        """The span's embeddings, n_tokens x n_embd floats (the encoder thread: it runs the encoder's graph)."""
        threads = self.threads
        if self._set_threads is not None:
            threads = max(1, self.threads // 2) if self.beside_streams else self.threads
            self._set_threads(self.ctx, threads)
        started = time.perf_counter()
        status = mtmd.mtmd_encode_chunk(self.ctx, span.chunk)
        if status != 0:
            raise RuntimeError(f"mtmd_encode_chunk failed with status {status}: {llama_log.last_error('')}")
        log.debug("media_encoded", tokens=span.n_tokens, threads=threads,
                  ms=round((time.perf_counter() - started) * 1e3, 1))
        out = mtmd.mtmd_get_output_embd(self.ctx)
        size = span.n_tokens * self.n_embd
        copy = (ctypes.c_float * size)()
        ctypes.memmove(copy, out, size * ctypes.sizeof(ctypes.c_float))
        return copy

    def place_mrope(self, span: MediaSpan, pos_0: int, start: int, end: int, into: ctypes.Array) -> None:
        """M-RoPE: the positions of the span's rows start..end (prompt indices) when its first row sits at pos_0,
        section-major as llama_batch takes an embedding batch's (all rows' t, then y, x and z), laid as llama.cpp's
        own helper lays them (mtmd_helper_decode_image_chunk): an image by its grid, a clip one position a row."""
        rows = end - start
        image = mtmd.mtmd_input_chunk_get_tokens_image(span.chunk)
        if image:
            grid = (mtmd.mtmd_decoder_pos * span.n_tokens)()
            mtmd.mtmd_helper_image_get_decoder_pos(image, pos_0, grid)
            sections = [(place.t, place.y, place.x, place.z) for place in grid[start - span.start:end - span.start]]
        else:
            sections = [(pos_0 + i,) * 4 for i in range(start - span.start, end - span.start)]
        for row, place in enumerate(sections):
            for section, value in enumerate(place):
                into[section * rows + row] = value

    def close(self) -> None:
        self._encoder.shutdown(cancel_futures=True)
        if self.ctx:
            mtmd.mtmd_free(self.ctx)
            self.ctx = None


def _thread_setter() -> Callable[[int, int], None] | None:
    """mtmd_set_n_threads (patch 0012, not in the binding); None in a libmtmd without it, whose encoder keeps the
    thread count it was made with."""
    setter = getattr(mtmd._libmtmd, "mtmd_set_n_threads", None)
    if setter is not None:
        setter.argtypes, setter.restype = [ctypes.c_void_p, ctypes.c_int], None
    return setter


def _hashed(handle: int, audio: bool = False) -> Bitmap:
    """The bitmap, its id set to its pixels' (or samples') hash, not the file's (the helper's): the same picture in
    another format or with other metadata is the same image to the cache, and a clip likewise."""
    width, height = mtmd.mtmd_bitmap_get_nx(handle), mtmd.mtmd_bitmap_get_ny(handle)
    pixels = ctypes.string_at(mtmd.mtmd_bitmap_get_data(handle), mtmd.mtmd_bitmap_get_n_bytes(handle))
    digest = hashlib.blake2b(pixels, digest_size=8, person=b"llm-aud" if audio else b"llm-img")
    digest.update(width.to_bytes(4, "little"))  # a 2x3 and a 3x2 image of one colour share their pixel bytes
    key = digest.hexdigest().encode()
    mtmd.mtmd_bitmap_set_id(handle, key)
    return Bitmap(handle, width, height, key, audio)


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise WorkerError(f"projector file not found: {path}; check the --mmproj path")
    with path.open("rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise WorkerError(f"--mmproj {path} is not a GGUF file (it starts with {head!r}); projectors are GGUF files "
                          "named mmproj-*.gguf beside a vision model's weights")
