"""What the engine refuses or fails at, as exceptions the API maps to its errors. Kept apart from the modules that
raise them, which import llama_cpp: the HTTP routes import these at startup, before the worker has chosen which
llama.cpp library to load (exactness/build_choice.py)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.problem import Problem


class Refused(Exception):
    """An input the engine will not run, each problem named by the request's field that holds it: the client's to
    fix (a 400). Every refusal of a request's input is one; `code` says which kind."""

    def __init__(self, problems: list[Problem], code: str = "invalid_request") -> None:
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in problems))
        self.problems = problems
        self.code = code


class NoChatTemplate(Refused):
    def __init__(self, message: str) -> None:
        super().__init__([Problem("messages", "the model's chat template", message)], "chat_template")


class ChatTemplateError(Refused):
    """The template refused the conversation (e.g. roles out of order), or llama.cpp's parser the answer."""

    def __init__(self, message: str) -> None:
        super().__init__([Problem("messages", "the model's chat template", message)], "chat_template")


class NoInfill(Refused):
    """The model's vocabulary has no fill-in-the-middle tokens (prefix, suffix, middle)."""

    def __init__(self, message: str, field: str = "input_prefix") -> None:
        super().__init__([Problem(field, "a model with fill-in-the-middle tokens", f"{field}: {message}")])
        self.why = message


class ContextLengthExceeded(Refused):
    def __init__(self, prompt_tokens: int, max_tokens: int, n_ctx_seq: int, field: str = "prompt") -> None:
        message = (f"this request needs {prompt_tokens} prompt + {max_tokens} generated tokens, but a sequence holds "
                   f"{n_ctx_seq} tokens; shorten the prompt or lower max_tokens")
        super().__init__([Problem(field, f"prompt tokens + max_tokens <= {n_ctx_seq}", message, prompt_tokens)],
                         "context_length_exceeded")
        self.prompt_tokens, self.max_tokens, self.n_ctx_seq = prompt_tokens, max_tokens, n_ctx_seq


@dataclass(frozen=True)
class AdapterCells(Exception):
    """A slot file asked of a slot whose cells were made under LoRA adapters: files hold base-model cells only
    (their fingerprint names no adapter, so a file must never serve a request under another adapter set)."""

    slot: int
    adapters: str  # the adapter set, as AdapterSet's str: id:scale pairs

    def __str__(self) -> str:
        return (f"slot {self.slot}'s cells were made under LoRA adapters ({self.adapters}, as id:scale); a slot file "
                "holds only cells made without adapters: save a slot that served a request without adapters")


class EmptyPrompt(Refused):
    def __init__(self, message: str, field: str = "prompt") -> None:
        super().__init__([Problem(field, "at least one token", message)])


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
