"""Prompt lookup: a sequence drafts the tokens that followed the last time its latest few tokens appeared. Answers
that copy their input (quotes, code edits, summaries that repeat names) repeat long runs of the prompt and of their
own text (docs/speculative.md, "Drafts")."""

from __future__ import annotations

from array import array

# N-gram lengths tried, longest first: how much of its recent text a sequence finds again says how far the match
# will go on; two-token matches were right under half the time (docs/speculative.md, "Drafts").
NGRAM_SIZES = (16, 8, 4, 3)
# Each size's prior acceptance (draft_rule.Acceptance): the geometric per-token rate those measurements give.
NGRAM_PRIORS = {16: 0.96, 8: 0.88, 4: 0.8, 3: 0.75}
# Occurrences of an n-gram looked at for the longest continuation: the latest is often in the answer's own last
# lines, with only a few tokens after it, where an older one (in the prompt being copied) has a long run.
LOOK_BACK = 4
_TOKEN_BYTES = array("i").itemsize


class TokenHistory:
    """A sequence's prompt and output tokens, searchable: in a bytearray, four bytes each, so that the search is
    bytes.rfind (C speed, no index to build per prompt)."""

    def __init__(self, tokens: list[int]) -> None:
        self._data = bytearray(array("i", tokens).tobytes())

    def append(self, token: int) -> None:
        self._data += array("i", (token,)).tobytes()

    def __len__(self) -> int:
        return len(self._data) // _TOKEN_BYTES

    def proposal(self, limit: int) -> tuple[list[int], int]:
        """Up to `limit` tokens that followed an earlier occurrence of the history's last n-gram (the longest of
        NGRAM_SIZES found: longer ones first, for fewer false matches), and that n: the latest occurrence with
        `limit` tokens after it, else (within LOOK_BACK occurrences) the one with the most. ([], 0): none found."""
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
