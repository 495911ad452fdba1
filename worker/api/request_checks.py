"""What every route that runs the model checks first, the same way in every dialect: the model named is the one
served here, and the prompt can fit before it is tokenized."""

from __future__ import annotations

from typing import Protocol

from worker.api.error_shapes import UnknownModel
from worker.api.problems import InvalidRequest, Problem
from worker.api.state import WorkerState


class Prompted(Protocol):
    """A request read into a route's terms: the model it names, and where its prompt is."""

    @property
    def model(self) -> str | None: ...

    def prompt_chars(self) -> tuple[str, int]: ...


# Checked before tokenizing: no sane text averages more than this many characters a token,
# so a longer prompt cannot fit and is refused without the work of tokenizing it.
MAX_CHARS_PER_TOKEN = 32


def check_prompt_size(field: str, chars: int, n_ctx_seq: int) -> None:
    limit = max(32768, MAX_CHARS_PER_TOKEN * n_ctx_seq)
    if chars > limit:
        raise InvalidRequest([Problem(field, f"at most {limit} characters",
                                      f"{field} has {chars} characters; a request holds {n_ctx_seq} tokens, "
                                      f"so at most {limit} characters are accepted", chars)],
                             code="context_length_exceeded")


def served_model(worker: WorkerState, requested: str | None) -> str:
    """The model id the answer names: the served model's, or the LoRA adapter's the request named; a request that
    names another model is refused (404 model_not_found)."""
    if not worker.accepts_model(requested):
        adapters = [lora.name for lora in worker.adapters.loras]
        also = f" and its LoRA adapters {', '.join(map(repr, adapters))}" if adapters else ""
        raise UnknownModel(f"model {requested!r} is not served here; this worker serves {worker.model_id!r}{also}")
    return requested if requested and worker.adapters.named(requested) is not None else worker.model_id


def admitted(worker: WorkerState, request: Prompted) -> str:
    """The shared preamble of a generation: its prompt fits a sequence's context, and its model is this worker's.
    Returns the model id the answer names."""
    check_prompt_size(*request.prompt_chars(), worker.require_served().facts.n_ctx_seq)
    return served_model(worker, request.model)
