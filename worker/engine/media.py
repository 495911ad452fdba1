"""A prompt with images in it: token ids where it is text, stand-ins where an image's embeddings go, so that what
compares prompts (the prefix cache, host memory, copies between slots) compares one list of ids per prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The marker a prompt's text carries where an image goes. Not mtmd's default (<__media__>): a user's text could
# write that, and would then claim an image of the request's; this one only the API writes, for an image part, and
# strips from the text it is sent.
MEDIA_MARKER = "<__llm_worker_image_b7f3__>"
# 62 bits of the pixel hash: an image's stand-ins are -1 - (hash + i), never colliding with token ids (>= 0).
_HASH_MASK = (1 << 62) - 1


@dataclass(frozen=True, eq=False)
class MediaSpan:
    """One image's (or clip's) run of tokens in a prompt, and the native chunk the projector encodes for it."""

    start: int  # its first token's index in the prompt
    n_tokens: int
    # The positions llama.cpp places it on: n_tokens, but under M-RoPE (Qwen2-VL...) an image's grid takes the
    # larger of its sides (mtmd_input_chunk_get_n_pos), its tokens sharing the first (engine/positions.py).
    n_pos: int
    chunk: Any  # the projector's owned mtmd_input_chunk (native/projector.py frees it with the span)
    pixel_hash: int
    # Decoded in one llama_decode, its tokens attending to each other both ways (Gemma 3's images: non-causal
    # attention): prefill chunks never end inside it (core/scheduler.py).
    whole: bool = False

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


@dataclass(frozen=True)
class MediaPrompt:
    """A tokenized prompt with its images: `tokens` holds each image's stand-ins at its span."""

    tokens: list[int]
    spans: tuple[MediaSpan, ...]


# An image's stand-ins come from a hash of its decoded pixels (as llama-server keys its cache by mtmd_bitmap_set_id):
# the same picture sent again, in any file format, gives the same stand-ins and its cells are reused; any other
# differs from its first position on. They are negative, so no text token equals one, and code that must only ever
# see real tokens (the sampler's penalties, drafting, settling a slot) tells them apart by sign.
def stand_ins(pixel_hash: int, n_tokens: int) -> list[int]:
    return [-1 - ((pixel_hash + i) & _HASH_MASK) for i in range(n_tokens)]


def is_media(token: int) -> bool:
    return token < 0


def text_end(tokens: list[int]) -> int:
    """How many of the tokens lead before the first image's stand-ins (all of them where there is none)."""
    return next((at for at, token in enumerate(tokens) if is_media(token)), len(tokens))


def text_only(tokens: list[int]) -> list[int]:
    """The prompt's real tokens, for what reads a prompt as words (a sampler's penalties, n-gram drafts)."""
    return [token for token in tokens if token >= 0]


def span_at(spans: tuple[MediaSpan, ...], position: int) -> MediaSpan:
    """The image whose run holds `position` (one must)."""
    return next(span for span in spans if span.start <= position < span.end)


Run = tuple[int, int, "MediaSpan | None"]


def runs(tokens: list[int], spans: tuple[MediaSpan, ...], start: int, end: int) -> list[Run]:
    """Positions start..end cut where text meets an image and where one image meets the next: each run is one
    llama_decode (a batch holds token ids or embeddings, never both). (start, end, the image or None for text)."""
    cut: list[Run] = []
    pos = start
    while pos < end:
        if is_media(tokens[pos]):
            span = span_at(spans, pos)
            stop = min(end, span.end)
            cut.append((pos, stop, span))
        else:
            stop = pos
            while stop < end and not is_media(tokens[stop]):
                stop += 1
            cut.append((pos, stop, None))
        pos = stop
    return cut
