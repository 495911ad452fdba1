"""What the engine refuses or fails at, as exceptions the API maps to its errors. Kept apart from the modules that
raise them, which import llama_cpp: the HTTP routes import these at startup, before the worker has chosen which
llama.cpp library to load (exactness/build_choice.py)."""

from __future__ import annotations

from worker.problem import Problem, listed


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


class AdapterCells(Refused):
    """A slot file asked of a slot whose cells were made under LoRA adapters: files hold base-model cells only
    (their fingerprint names no adapter, so a file must never serve a request under another adapter set)."""

    def __init__(self, slot: int, adapters: str) -> None:  # adapters: as AdapterSet's str, id:scale pairs
        super().__init__([Problem(
            "id_slot", "a slot whose cells were made without LoRA adapters",
            f"slot {slot}'s cells were made under LoRA adapters ({adapters}, as id:scale); a slot file holds only "
            "cells made without adapters: save a slot that served a request without adapters", slot)])


class UnrestorableFile(Refused):
    """A slot file that must not load into this worker (POST /slots/{id}?action=restore), and why."""

    def __init__(self, filename: str, why: str) -> None:
        super().__init__([Problem("filename", "a file this worker's --slot-save-path holds and can load",
                                  f"cannot restore {filename!r}: {why}", filename)])


class EmptyPrompt(Refused):
    def __init__(self, message: str, field: str = "prompt") -> None:
        super().__init__([Problem(field, "at least one token", message)])


class MediaUnreadable(ValueError):
    """Bytes that did not decode as the image (stb_image: jpg, png, bmp, gif...) or the audio clip (miniaudio: wav,
    mp3, flac) they were sent as, or media mtmd could not tokenize."""


class QueueFull(Exception):
    pass


class UnfitInputs(Refused):
    """Inputs the embedding context cannot take: empty ones, and ones longer than its batch, each named by its field
    (`fields`: where each input is in the body; `constraint`: what an input must be, as the route says it)."""

    def __init__(self, empty: tuple[int, ...], too_long: tuple[tuple[int, int], ...], limit: int,
                 fields: list[str], constraint: str) -> None:  # too_long: (input index, its tokens)
        problems = [Problem(fields[i], "at least one token", f"{fields[i]} has no tokens") for i in empty]
        problems += [Problem(fields[i], f"at most {limit} tokens",
                             f"{fields[i]} has {n} tokens; an input must fit one micro-batch of {limit} "
                             "(--ubatch-size) and is never truncated: split it, or restart with larger "
                             "--ubatch-size and --batch-size", n)
                     for i, n in too_long]
        super().__init__(listed(problems, fields[0].split("[")[0], constraint),
                         "context_length_exceeded" if too_long else "invalid_request")


class EmbeddingFailed(Exception):
    """A job that got no vectors: its decode failed, or the worker stopped before it ran."""

    def __init__(self, message: str, *, stopped: bool = False) -> None:
        super().__init__(message)
        self.stopped = stopped
