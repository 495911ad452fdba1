"""What a dialect reads a generation request into, in the engine's terms, before anything is tokenized: the prompt
(a chat, a fill-in-the-middle, text or token ids), the images a chat holds, the sampling and the rest of a request;
and what ServedModel.prepare (serving/input_processor.py) makes of it, as vLLM's input processor and llama-server's
params_from_json do: the engine's requests and the answers' reader. Plain data, free of llama_cpp: the HTTP routes
import it at startup."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from worker.engine.answer import Answers, PlainText
from worker.engine.media import MEDIA_MARKER
from worker.engine.requests import NO_ADAPTERS, AdapterSet, Chat, ExtraFile, Request, SamplingParams


@dataclass(frozen=True)
class Infill:
    """A fill-in-the-middle prompt (serving/infill.py): the text before the cursor and after it, other files' text,
    and text that leads the middle (llama-server's input_prefix, input_suffix, input_extra, prompt)."""

    prefix: str
    suffix: str
    extra: tuple[ExtraFile, ...] = ()
    prompt: str = ""
    field: str = "input_prefix"  # the request's field that asked for infill: a model without FIM tokens names it


@dataclass(frozen=True)
class Media:
    """An image or an audio clip a chat holds, at one of its MARKERs, as the request sent it (its file's bytes:
    libmtmd decodes PNG, JPEG, GIF and BMP images, WAV, MP3 and FLAC audio)."""

    MARKER: ClassVar[str] = MEDIA_MARKER  # where a chat's text holds an image or a clip, one marker each
    data: bytes
    field: str  # where the request holds it: a refusal names it
    size: str = ""  # what its header says of its size ("640 x 480"), for a refusal to name
    kind: str = "image"  # or "audio"
    max_seconds: float | None = None  # audio: the longest clip the request may send, checked once decoded


# A chat (images and clips at its MEDIA_MARKERs), a fill-in-the-middle, text (tokenized with BOS where the model asks
# for one), or token ids as the client sent them.
Prompt = Chat | Infill | str | tuple[int, ...]


@dataclass(frozen=True)
class GenerationInput:
    prompt: Prompt
    sampling: SamplingParams
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None  # None: up to the end of a sequence's context
    n: int = 1  # choices from one prefilled prompt; choice i samples with seed + i
    logprobs: int | None = None  # None: none; k: each token's logprob and its k best alternatives
    scores_prompt: bool = False  # the prompt's tokens get their logprobs too (echo with logprobs)
    adapters: AdapterSet = NO_ADAPTERS
    images: tuple[Media, ...] = ()  # a chat's images and clips, one for each MEDIA_MARKER in its messages, in order
    request_id: str = ""
    timeout_s: float | None = None
    prompt_field: str = "messages"  # the request's field that holds the prompt, as a refusal names it
    grammar_field: str = "grammar"  # and the one that gave sampling.grammar
    # The request's own bound on prompt and answer together, below a sequence's context (Ollama's options.num_ctx),
    # and its field: the answer gets what the prompt leaves of it, and a prompt that leaves nothing is refused.
    context_limit: int | None = None
    context_limit_field: str = ""


@dataclass(frozen=True)
class Prepared:
    """A request made ready: the engine's requests, one per choice (one prompt), and the reader of each answer."""

    requests: list[Request]
    answers: Answers = PlainText

    @property
    def prompt_tokens(self) -> int:
        return len(self.requests[0].prompt_tokens)
