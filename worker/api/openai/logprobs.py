"""The engine's per-token log probabilities in OpenAI's two shapes: chat's and legacy completions'."""

from __future__ import annotations

from typing import Any

from worker.engine import PromptLogprobs, TokenLogprob


def _token(piece: bytes) -> str:
    # A token may hold part of a UTF-8 character; `bytes` (chat) carries it exactly.
    return piece.decode("utf-8", errors="replace")


def chat_logprobs(entries: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> dict[str, Any]:
    """choices[].logprobs of a chat completion or chunk."""
    return {"content": [{
        "token": _token(entry.piece), "logprob": entry.logprob, "bytes": list(entry.piece),
        "top_logprobs": [{"token": _token(alt.piece), "logprob": alt.logprob, "bytes": list(alt.piece)}
                         for alt in entry.top],
    } for entry in entries], "refusal": None}


class CompletionLogprobs:
    """choices[].logprobs of a text completion; text_offset runs on across a stream's chunks."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset  # characters of text before the next token (an echoed prompt counts)

    def format(self, entries: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> dict[str, Any]:
        return {
            "tokens": [_token(entry.piece) for entry in entries],
            "token_logprobs": [entry.logprob for entry in entries],
            # Alternatives that spell the same text (e.g. byte pieces) keep the likelier one, as a dict must.
            "top_logprobs": [{_token(alt.piece): alt.logprob for alt in reversed(entry.top)} for entry in entries],
            "text_offset": self._offsets([entry.piece for entry in entries]),
        }

    def prompt(self, scores: PromptLogprobs) -> dict[str, Any]:
        """An echoed prompt's tokens, as OpenAI's legacy API wrote them: the first has null logprobs."""
        first = self._offsets([scores.first])
        rest = self.format(scores.rest)
        return {"tokens": [_token(scores.first), *rest["tokens"]], "token_logprobs": [None, *rest["token_logprobs"]],
                "top_logprobs": [None, *rest["top_logprobs"]], "text_offset": first + rest["text_offset"]}

    def _offsets(self, pieces: list[bytes]) -> list[int]:
        offsets = []
        for piece in pieces:
            offsets.append(self.offset)
            self.offset += len(_token(piece))
        return offsets


def joined(first: dict[str, list], then: dict[str, list]) -> dict[str, list]:
    """Two runs of completion logprobs (an echoed prompt's, then the answer's) as one."""
    return {key: first[key] + then[key] for key in first}
