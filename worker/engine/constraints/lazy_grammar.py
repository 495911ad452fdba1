"""A grammar that sleeps until the answer opens what it constrains: tool_choice auto's calls. llama.cpp's own lazy
grammars feed the woken text in unchecked, and text the grammar refuses makes llama.cpp throw through the C API (the
process aborts, on model output nobody controls), so the laziness is done here."""

from __future__ import annotations

import ctypes
from collections import deque

import llama_cpp
import structlog

from worker.engine.constraints.grammar import GrammarSampler
from worker.engine.requests import GrammarTrigger

log = structlog.get_logger(__name__)


class LazyGrammar:
    """One sequence's grammar that wakes on its trigger; as GrammarSampler, sampled beside the chain.

    Asleep, a token is the chain's alone (the answer is exactly the one without a grammar), and the only work is
    looking for the trigger in the last few tokens' bytes. Woken, the ordinary grammar (grammar.py) is built and the
    text from the trigger on replayed into it, each token checked before it is accepted; from then on it constrains
    as a forced grammar does, the end included. Text it refuses, or a state no token fits, drops it for the rest of
    the answer (_drop).
    """

    def __init__(self, vocab: llama_cpp.llama_vocab_p, text: str, n_vocab: int, trigger: GrammarTrigger) -> None:
        self._vocab, self._text, self._n_vocab = vocab, text, n_vocab
        self._trigger = trigger.text.encode()
        self._first = trigger.first
        self._pieces: dict[int, bytes] = {}
        self._buf = ctypes.create_string_buffer(256)
        self.grammar: GrammarSampler | None = None  # built when the trigger is written
        self._watching = True  # False once woken or dropped
        # The answer's last few tokens that wrote text, as (where their bytes start, token, bytes): as many as
        # the trigger has bytes, so they reach back to wherever a trigger ending in the newest one starts.
        self._recent: deque[tuple[int, int, bytes]] = deque(maxlen=len(self._trigger))
        self._written = 0  # bytes of answer so far
        self._opening: int | None = None  # where the answer's first non-whitespace byte is
        self._settled = False  # (first) the answer's opening is past: no trigger may come

    def sample(self, chain: llama_cpp.llama_sampler_p, ctx: llama_cpp.llama_context_p, row: int,
               constrained: bool = True) -> int:
        """The next token, accepted by the chain (and by the grammar when awake).

        `constrained` False: a thinking model's reasoning, which is not the answer: the answer starts after it."""
        if self.grammar is not None:
            token = self.grammar.sample(chain, ctx, row, constrained)
            if token is not None:
                return token
            self._drop("the grammar allows no token here")
        token = llama_cpp.llama_sampler_sample(chain, ctx, row)
        if not self._watching:
            return token
        if not constrained:
            if self._written:
                self._restart()
            return token
        start = self._trigger_start(token)
        if start is not None:
            self._wake(start)
        return token

    def free(self) -> None:
        if self.grammar is not None:
            self.grammar.free()

    def _restart(self) -> None:
        self._recent.clear()
        self._written, self._opening, self._settled = 0, None, False

    def _trigger_start(self, token: int) -> int | None:
        """Where the trigger starts in the answer, when `token` completes it."""
        if self._settled:  # past the answer's opening: an opening trigger can no longer come
            return None
        piece = self._piece(token)
        if not piece:  # a control token writes no text
            return None
        at = self._written
        self._recent.append((at, token, piece))
        self._written += len(piece)
        if self._first:
            return self._opening_trigger(at, piece)
        if self._trigger[-1:] not in piece:  # a trigger completed by this token ends in it
            return None
        window = b"".join(recent[2] for recent in self._recent)
        found = window.find(self._trigger)
        # One written before would have woken the grammar then: this one is new.
        return None if found < 0 else self._recent[0][0] + found

    def _opening_trigger(self, at: int, piece: bytes) -> int | None:
        """A trigger that counts only opening the answer (after whitespace)."""
        if self._opening is None:
            stripped = piece.lstrip()
            if not stripped:
                return None
            self._opening = at + len(piece) - len(stripped)
        if self._written < self._opening + len(self._trigger):
            return None
        self._settled = True
        base = self._recent[0][0]
        window = b"".join(recent[2] for recent in self._recent)
        start = self._opening - base
        return self._opening if window[start:start + len(self._trigger)] == self._trigger else None

    def _wake(self, start: int) -> None:
        """Build the grammar and replay the answer from byte `start` (the trigger's) into it."""
        self._watching = False
        self.grammar = GrammarSampler(self._vocab, self._text, self._n_vocab)
        replay = self._replay(start)
        if replay is None or not self.grammar.take(replay):
            written = b"".join(piece for at, _, piece in self._recent if at + len(piece) > start)
            self._drop("it refuses what the answer wrote from the trigger on",
                       written=written.decode(errors="replace")[:200])

    def _drop(self, why: str, **more: str) -> None:
        """Leave the rest of the answer free: the call is read as written (a malformed one is text)."""
        log.warning("lazy_grammar_dropped", why=why, trigger=self._trigger.decode(errors="replace"), **more)
        self.free()
        self.grammar = None

    def _replay(self, start: int) -> list[int] | None:
        """Tokens spelling the answer from `start`: the ones written, and where `start` falls inside one, that
        token's rest tokenized anew. None when no tokens spell that rest exactly."""
        recent = list(self._recent)
        first = max(i for i, (at, _, _) in enumerate(recent) if at <= start)
        at, token, piece = recent[first]
        later = [token for _, token, _ in recent[first + 1:]]
        if at == start:
            return [token, *later]
        rest = self._spelled(piece[start - at:])
        return None if rest is None else rest + later

    def _spelled(self, text: bytes) -> list[int] | None:
        """Tokens whose pieces are exactly `text`. Not always possible: bytes cut inside a character, or a vocab
        that puts a space before the first word (SentencePiece)."""
        buf = (llama_cpp.llama_token * (len(text) + 4))()
        n = llama_cpp.llama_tokenize(self._vocab, text, len(text), buf, len(buf), False, False)
        tokens = buf[:max(n, 0)]
        return tokens if n > 0 and b"".join(map(self._piece, tokens)) == text else None

    def _piece(self, token: int) -> bytes:
        """The bytes a token adds to the answer, as the engine writes them (control tokens: none)."""
        piece = self._pieces.get(token)
        if piece is None:
            n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buf, len(self._buf), 0, False)
            buf = self._buf
            if n < 0:  # longer than the buffer: -n is the size it needs
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            piece = self._pieces[token] = buf.raw[:n]
        return piece
