"""A grammar that sleeps until the answer opens what it constrains: tool_choice auto's calls, woken by the triggers
llama.cpp's chat layer gives each format (words, regex patterns). llama.cpp's own lazy grammars feed the woken text in
unchecked, and text the grammar refuses makes llama.cpp throw through the C API (the process aborts, on model output
nobody controls), so the laziness is done here."""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

import llama_cpp
import structlog

from worker.engine.constraints.grammar import GrammarSampler
from worker.engine.native.greedy import Greedy
from worker.engine.requests import GrammarTrigger

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class _Written:
    at: int  # where its bytes start in the answer
    token: int
    piece: bytes


class _Watch:
    """One trigger as llama.cpp's grammar matches it (llama_grammar_trigger_pattern::find), on the answer's bytes."""

    def __init__(self, trigger: GrammarTrigger) -> None:
        self.trigger = trigger
        self._word = trigger.value.encode() if trigger.kind == "word" else None
        value = trigger.value
        # std::regex's $ matches only at the very end; Python's also before a final newline.
        if value.endswith("$") and not value.endswith("\\$"):
            value = value[:-1] + r"\Z"
        self._regex = re.compile(value.encode()) if self._word is None else None
        self._full = trigger.kind == "pattern_full"

    def start(self, written: bytearray, new: int) -> int | None:
        """Where the grammar starts, if the answer so far (`written`, its last `new` bytes just added) sets this
        trigger off."""
        if self._word is not None:
            at = written.find(self._word, max(0, len(written) - new - len(self._word) + 1))
            return at if at >= 0 else None
        assert self._regex is not None
        match = self._regex.fullmatch(written) if self._full else self._regex.search(written)
        if match is None:
            return None
        # From the first group that matched something, else from the match: llama.cpp's rule.
        return next((match.start(i) for i in range(1, len(match.groups()) + 1) if match.group(i)), match.start())


class LazyGrammar:
    """One sequence's grammar that wakes on its triggers; as GrammarSampler, sampled beside the chain.

    Asleep, a token is the chain's alone (the answer is exactly the one without a grammar), and the only work is
    looking for a trigger in the answer's bytes. Woken, the ordinary grammar (grammar.py) is built and the text from
    the trigger on replayed into it, each token checked before it is accepted; from then on it constrains as a forced
    grammar does, the end included. Text it refuses, or a state no token fits, drops it for the rest of the answer
    (_drop).
    """

    def __init__(self, vocab: llama_cpp.llama_vocab_p, text: str, n_vocab: int, triggers: tuple[GrammarTrigger, ...],
                 preserved: frozenset[int] = frozenset(), greedy: Greedy | None = None) -> None:
        self._vocab, self._text, self._n_vocab = vocab, text, n_vocab
        self._greedy = greedy  # the chain's, for the grammar once woken (GrammarSampler)
        self._watches = [_Watch(trigger) for trigger in triggers]
        self._preserved = preserved  # control tokens whose text the answer shows, as the engine writes it
        self._pieces: dict[int, bytes] = {}
        self._buf = ctypes.create_string_buffer(256)
        self.grammar: GrammarSampler | None = None  # built when a trigger is written
        self._watching = True  # False once woken or dropped
        self._answer = bytearray()  # the answer so far (since the reasoning ended)
        self._written: list[_Written] = []  # its tokens that wrote text

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
            self._answer.clear()
            self._written.clear()
            return token
        start = self._trigger_start(token)
        if start is not None:
            self._wake(start)
        return token

    def free(self) -> None:
        if self.grammar is not None:
            self.grammar.free()

    def _trigger_start(self, token: int) -> int | None:
        """Where a trigger starts in the answer, when `token` sets one off."""
        piece = self._piece(token)
        if not piece:  # a control token that writes no text
            return None
        self._written.append(_Written(len(self._answer), token, piece))
        self._answer += piece
        starts = [at for watch in self._watches if (at := watch.start(self._answer, len(piece))) is not None]
        return min(starts) if starts else None

    def _wake(self, start: int) -> None:
        """Build the grammar and replay the answer from byte `start` (the trigger's) into it."""
        self._watching = False
        self.grammar = GrammarSampler(self._vocab, self._text, self._n_vocab, self._greedy)
        replay = self._replay(start)
        if replay is None or not self.grammar.take(replay):
            self._drop("it refuses what the answer wrote from the trigger on",
                       written=bytes(self._answer[start:]).decode(errors="replace")[:200])

    def _drop(self, why: str, **more: str) -> None:
        """Leave the rest of the answer free: the call is read as written (a malformed one is text)."""
        log.warning("lazy_grammar_dropped", why=why,
                    triggers=[watch.trigger.value for watch in self._watches], **more)
        self.free()
        self.grammar = None

    def _replay(self, start: int) -> list[int] | None:
        """Tokens spelling the answer from `start`: the ones written, and where `start` falls inside one, that
        token's rest tokenized anew. None when no tokens spell that rest exactly."""
        first = max(i for i, written in enumerate(self._written) if written.at <= start)
        at, token, piece = self._written[first].at, self._written[first].token, self._written[first].piece
        later = [written.token for written in self._written[first + 1:]]
        if at == start:
            return [token, *later]
        rest = self._spelled(piece[start - at:])
        return None if rest is None else rest + later

    def _spelled(self, text: bytes) -> list[int] | None:
        """Tokens whose pieces are exactly `text`. Not always possible: bytes cut inside a character, or a vocab
        that puts a space before the first word (SentencePiece)."""
        buf = (llama_cpp.llama_token * (len(text) + 4))()
        n = llama_cpp.llama_tokenize(self._vocab, text, len(text), buf, len(buf), False, True)
        tokens = buf[:max(n, 0)]
        return tokens if n > 0 and b"".join(map(self._piece, tokens)) == text else None

    def _piece(self, token: int) -> bytes:
        """The bytes a token adds to the answer, as the engine writes them (control tokens: none, unless
        preserved)."""
        piece = self._pieces.get(token)
        if piece is None:
            special = token in self._preserved
            n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buf, len(self._buf), 0, special)
            buf = self._buf
            if n < 0:  # longer than the buffer: -n is the size it needs
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
            piece = self._pieces[token] = buf.raw[:n]
        return piece
