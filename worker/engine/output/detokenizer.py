"""Token bytes -> streamable text: whole UTF-8 characters, stop strings held back. Correct by construction: what
`feed` returns, concatenated, is exactly the final text, and no prefix of a stop string is released before it is
known not to match. A thinking model's reasoning passes through as written: stop strings look only at its answer."""

from __future__ import annotations

import codecs

from worker.engine.output.reasoning import ReasoningPhase


class StreamingText:
    def __init__(self, stop: tuple[str, ...] = (), phase: ReasoningPhase | None = None) -> None:
        # "replace" so that invalid bytes from a model never crash a stream.
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._held = ""  # decoded text that might still start a stop string
        self.matched: str | None = None
        self.phase = phase  # a thinking model's: where its reasoning ends, which stop strings do not look into

    def feed(self, piece: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to release."""
        if self.matched is not None:
            return ""
        text = self._utf8.decode(piece)
        reasoning, answer = self.phase.feed(text) if self.phase is not None else ("", text)
        self._held += answer
        if not self._stop:
            out, self._held = self._held, ""
            return reasoning + out
        return reasoning + self._release()

    def _release(self) -> str:
        first = None
        for stop in self._stop:
            at = self._held.find(stop)
            if at >= 0 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            self.matched = first[1]
            out, self._held = self._held[: first[0]], ""
            return out
        keep = self._longest_stop_prefix_suffix()
        cut = len(self._held) - keep
        out, self._held = self._held[:cut], self._held[cut:]
        return out

    def _longest_stop_prefix_suffix(self) -> int:
        """Length of the longest tail of the held text that begins some stop string."""
        held = self._held
        for n in range(min(len(held), max(map(len, self._stop)) - 1), 0, -1):
            tail = held[-n:]
            if any(stop.startswith(tail) for stop in self._stop):
                return n
        return 0

    def flush(self) -> str:
        """At the end of generation: everything still held (no stop string matched)."""
        if self.matched is not None:
            return ""
        text = self._utf8.decode(b"", final=True)
        reasoning, answer = self.phase.feed(text) if self.phase is not None else ("", text)
        if self.phase is not None:
            answer += self.phase.flush()[1]
        out, self._held = self._held + answer, ""
        return reasoning + out
