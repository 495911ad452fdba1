"""StreamingText: whole UTF-8 characters out, stop strings never leaked, concatenation exact."""

import random

import pytest

from worker.engine.output.detokenizer import StreamingText

TEXT = "Hi 🙂 日本語 e\u0301 — done. STOP here"


def stream(pieces: list[bytes], stop: tuple[str, ...] = ()) -> tuple[list[str], StreamingText]:
    text = StreamingText(stop)
    out = [text.feed(p) for p in pieces]
    out.append(text.flush())
    return [o for o in out if o], text


def random_split(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, len(data) - 1)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@pytest.mark.parametrize("seed", range(50))
def test_any_byte_split_gives_whole_characters_and_the_exact_text(seed):
    pieces = random_split(TEXT.encode(), random.Random(seed))
    out, _ = stream(pieces)
    assert "".join(out) == TEXT
    assert all("\ufffd" not in piece for piece in out)


def test_emoji_fed_byte_by_byte_comes_out_once_whole():
    emoji = "🙂".encode()
    out, _ = stream([emoji[i:i + 1] for i in range(len(emoji))])
    assert out == ["🙂"]


@pytest.mark.parametrize("seed", range(50))
def test_stop_string_split_anywhere_is_never_streamed(seed):
    pieces = random_split(TEXT.encode(), random.Random(seed))
    out, text = stream(pieces, stop=("STOP",))
    assert "".join(out) == TEXT[: TEXT.index("STOP")]
    assert text.matched == "STOP"
    for i in range(1, len(out) + 1):  # no prefix of the stop string ever ends a released prefix
        assert not "".join(out[:i]).endswith(("S", "ST", "STO"))


def test_earliest_of_several_stop_strings_wins():
    out, text = stream([b"abc", b"de", b"fg"], stop=("fg", "cd"))
    assert "".join(out) == "ab" and text.matched == "cd"


def test_held_prefix_released_when_it_stops_matching():
    text = StreamingText(("STOP",))
    assert text.feed(b"ab ST") == "ab "
    assert text.feed(b"AR") == "STAR"


def test_held_prefix_released_at_the_end():
    out, text = stream([b"the end ST"], stop=("STOP",))
    assert "".join(out) == "the end ST" and text.matched is None


def test_invalid_bytes_become_replacement_characters_not_errors():
    out, _ = stream([b"ok \xff\xfe ok"])
    assert "".join(out) == "ok \ufffd\ufffd ok"
