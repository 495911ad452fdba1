"""Prompt lookup: a sequence drafts the tokens that followed the last time its latest few tokens appeared.

Answers that copy their input (quotes, code edits, summaries that repeat names) repeat long runs of the prompt,
and of their own text: the n-gram the sequence ends with, found earlier in prompt + output, predicts what comes
next. Longer n-grams first (fewer false matches); the most recent occurrence wins. The tokens live in a bytearray,
four bytes each, so that the search is bytes.rfind (C speed, no index to build per prompt).
"""

from __future__ import annotations

from array import array

# N-gram lengths tried, longest first: how much of its recent text a sequence finds again says how far the
# match will go on. Greedy answers to bench/speculative.py's prompts, a 16-token draft after the longest match:
# 16+ matched tokens: the next token right 98 % (copying) / 95 % (open-ended), 12.6 / 12.8 tokens accepted;
# 6-9: 89 / 77 %, 8.2 / 3.1; 3: 94 / 61 %, 4.9 / 2.7. Two-token matches were right under half the time.
NGRAM_SIZES = (16, 8, 4, 3)
# Each size's prior acceptance (drafts.Acceptance): the geometric per-token rate those measurements give.
NGRAM_PRIORS = {16: 0.96, 8: 0.88, 4: 0.8, 3: 0.75}
# Occurrences of an n-gram looked at for the longest continuation: the latest is often in the answer's own last
# lines, with only a few tokens after it, where an older one (in the prompt being copied) has a long run.
LOOK_BACK = 4
_TOKEN_BYTES = array("i").itemsize


class TokenHistory:
    """A sequence's prompt and output tokens, searchable."""

    def __init__(self, tokens: list[int]) -> None:
        self._data = bytearray(array("i", tokens).tobytes())

    def append(self, token: int) -> None:
        self._data += array("i", (token,)).tobytes()

    def __len__(self) -> int:
        return len(self._data) // _TOKEN_BYTES

    def proposal(self, limit: int) -> tuple[list[int], int]:
        """Up to `limit` tokens that followed an earlier occurrence of the history's last n-gram (the longest of
        NGRAM_SIZES found), and that n: the latest occurrence with `limit` tokens after it, else (within LOOK_BACK
        occurrences) the one with the most. ([], 0): none found."""
        data, size = self._data, _TOKEN_BYTES
        for n in NGRAM_SIZES:
            if len(self) <= n:
                continue
            key = bytes(data[-n * size:])
            best: list[int] = []
            # The key's own place at the end has nothing after it: search before it.
            end, tries = len(data) - size, LOOK_BACK
            while tries and (found := data.rfind(key, 0, end)) >= 0:
                end = found + len(key) - 1  # the next search ends before this match
                if found % size:  # a match across token boundaries
                    continue
                tries -= 1
                start = found + len(key)
                after = array("i", data[start:start + limit * size]).tolist()
                if len(after) > len(best):
                    best = after
                if len(best) == limit:
                    break
            if best:
                return best, n
        return [], 0
