"""What the engine refuses or fails at, as exceptions the API maps to its errors. Kept apart from the modules that
raise them, which import llama_cpp: the HTTP routes import these at startup, before the worker has chosen which
llama.cpp library to load (exactness/build_choice.py)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.worker_error import WorkerError


class NoChatTemplate(WorkerError):
    pass


class NoInfill(WorkerError):
    """The model's vocabulary has no fill-in-the-middle tokens (prefix, suffix, middle)."""


class ChatTemplateError(WorkerError):
    """The template refused the conversation (e.g. roles out of order): the client's fault."""


@dataclass(frozen=True)
class ContextLengthExceeded(Exception):
    prompt_tokens: int
    max_tokens: int
    n_ctx_seq: int

    def __str__(self) -> str:
        return (
            f"this request needs {self.prompt_tokens} prompt + {self.max_tokens} generated tokens, "
            f"but a sequence holds {self.n_ctx_seq} tokens; shorten the prompt or lower max_tokens"
        )


@dataclass(frozen=True)
class AdapterCells(Exception):
    """A slot file asked of a slot whose cells were made under LoRA adapters: files hold base-model cells only
    (their fingerprint names no adapter, so a file must never serve a request under another adapter set)."""

    slot: int
    adapters: str  # the adapter set, as AdapterSet's str: id:scale pairs

    def __str__(self) -> str:
        return (f"slot {self.slot}'s cells were made under LoRA adapters ({self.adapters}, as id:scale); a slot file "
                "holds only cells made without adapters: save a slot that served a request without adapters")


class EmptyPrompt(ValueError):
    pass


class ImageUnreadable(ValueError):
    """Bytes that did not decode as an image (stb_image: jpg, png, bmp, gif...), or images mtmd could not tokenize."""


class QueueFull(Exception):
    pass


@dataclass(frozen=True)
class UnfitInputs(Exception):
    """Inputs the embedding context cannot take: empty ones, and ones longer than its batch."""

    empty: tuple[int, ...]
    too_long: tuple[tuple[int, int], ...]  # (input index, its tokens)
    limit: int

    def __str__(self) -> str:
        return f"inputs {list(self.empty)} are empty; inputs {[i for i, _ in self.too_long]} exceed {self.limit} tokens"


class EmbeddingFailed(Exception):
    """A job that got no vectors: its decode failed, or the worker stopped before it ran."""

    def __init__(self, message: str, *, stopped: bool = False) -> None:
        super().__init__(message)
        self.stopped = stopped
