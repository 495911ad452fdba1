"""Every chat template llama.cpp ships, through the worker's chat layer (llama.cpp's own, behind its C ABI): each
renders a chat with tools, a tool call and its result; where it has tool calls, a call written in its own format
reads back as a tool call, whole and streamed, and the lazy grammar's triggers wake on it. The templates are read as
llama.cpp's tests read them (no model's BOS or EOS); tests/e2e/test_chat_formats.py serves some of them."""

from __future__ import annotations

import json
import re

import pytest

from tests.chat_templates import (
    CALL,
    RESULT,
    TEMPLATES,
    THOUGHT,
    TOOL,
    USER,
    WRITTEN,
    row,
    template,
    written_call,
)
from tests.conftest import REPO
from worker.engine.answer import Release
from worker.engine.constraints.lazy_grammar import _Watch
from worker.engine.native.chat_layer import ChatParams, ChatTemplates
from worker.engine.requests import Chat, GrammarTrigger
from worker.engine.serving import chat_answer
from worker.engine.serving.chat_answer import ChatAnswer
from worker.engine.serving.chat_template import ChatTemplate

TOOLS = (TOOL,)
PARIS = [("get_weather", {"city": "Paris"})]
# The templates whose calls the worker reads, counted when this suite was written: fewer means a regression (or a
# template llama.cpp changed: look at which).
CALLING_TEMPLATES = 65
# Functionary 3.2's generation prompt ends with ">>>", its trigger: as in llama-server, the grammar wakes only on a
# second call (the first is read, unconstrained).
FIRST_CALL_UNCONSTRAINED = {"meetkai-functionary-medium-v3.2"}


def _template(name: str) -> ChatTemplate:
    return ChatTemplate(ChatTemplates(None, template(name)), {}, "deepseek")


def _written(chat: ChatTemplate, name: str) -> tuple[str | None, ChatParams]:
    asked = chat.render(Chat((USER,), tools=TOOLS))
    if name in WRITTEN:
        return WRITTEN[name], asked
    with_call = chat.render(Chat((USER, CALL), tools=TOOLS), generation_prompt=False).prompt
    with_text = chat.render(Chat((USER, {"role": "assistant", "content": "XYZZY"}), tools=TOOLS),
                            generation_prompt=False).prompt
    written = written_call(asked.prompt, asked.generation_prompt, (asked.thinking_start_tag, asked.thinking_end_tags),
                           asked.preserved_tokens, with_call, with_text)
    return (written if written and "get_weather" in written else None), asked


def _read(params: ChatParams, pieces: list[str]) -> tuple[str, str, list[tuple[str, dict]]]:
    answer = ChatAnswer(params, "deepseek", continuation=False)
    release = Release()
    for piece in pieces:
        release += answer.feed(piece)
    release += answer.finish()
    return release.text, release.reasoning, [(call.name, json.loads(call.arguments)) for call in release.calls]


@pytest.mark.parametrize("name", TEMPLATES)
def test_renders_tools_a_call_and_its_result(name):
    chat = _template(name)
    answer, follow_up = {"role": "assistant", "content": "Sunny, 21°C."}, {"role": "user", "content": "And tomorrow?"}
    # A template without tool calls has no turn for a call or its result (Gemma 2 refuses one).
    history = (USER, CALL, RESULT, answer, follow_up) if chat.shows_tools else (USER, answer, follow_up)
    prompt = chat.render(Chat(history, tools=TOOLS)).prompt
    assert "And tomorrow?" in prompt
    if chat.shows_tools:
        assert "get_weather" in prompt


def _calling() -> list[str]:
    return [name for name in TEMPLATES if _template(name).shows_tools]


@pytest.mark.parametrize("name", _calling())
def test_a_call_in_the_templates_own_format_reads_as_a_tool_call(name):
    chat = _template(name)
    written, params = _written(chat, name)
    assert written is not None, "the template shows tools but no call could be written in its format"
    content, reasoning, calls = _read(params, [written])
    assert calls == PARIS, (written, content)
    assert content.strip() == "" and reasoning.strip() in ("", THOUGHT, "Here are my reasoning steps:\n" + THOUGHT)
    # Streamed a few characters at a time, as tokens arrive: the same answer.
    assert _read(params, [written[i:i + 3] for i in range(0, len(written), 3)]) == (content, reasoning, calls)


@pytest.mark.parametrize("name", _calling())
def test_the_lazy_grammar_wakes_on_the_call(name):
    """tool_choice auto: the triggers llama.cpp gives the format set off on the written call, where the call's
    grammar begins, as llama.cpp's llama_grammar_trigger_pattern::find matches them (worker's lazy_grammar.py)."""
    chat = _template(name)
    written, params = _written(chat, name)
    assert written is not None
    if not params.grammar_lazy:
        assert not params.triggers  # (Llama 3.x: calls are read, not constrained, as llama-server does)
        return
    watches = [_Watch(GrammarTrigger(t.kind, t.value)) for t in params.triggers]
    answer = bytearray()
    for piece in written.encode():  # as the answer grows (a full-match trigger matches only then)
        answer.append(piece)
        if any(watch.start(answer, 1) is not None for watch in watches):
            return
    assert name in FIRST_CALL_UNCONSTRAINED, (written, params.triggers)


def test_every_template_with_tools_is_read():
    assert len(_calling()) == CALLING_TEMPLATES


def test_models_md_lists_every_template_as_the_chat_layer_reads_it():
    section = (REPO / "docs" / "models.md").read_text().split("\n## Chat formats\n", 1)[1].split("\n## ", 1)[0]
    listed = [line for line in section.splitlines() if line.startswith("| `")]
    assert listed == ["| " + " | ".join(row(name, _template(name))) + " |" for name in TEMPLATES]


def test_a_thinking_template_splits_reasoning_from_its_answer():
    params = _template("Qwen-Qwen3-0.6B").render(Chat((USER,)))
    assert (params.thinking_start_tag, params.thinking_end_tags) == ("<think>", ("</think>",))
    assert _read(params, ["<think>\nIt is", " Paris.\n</th", "ink>\n\nSunny."]) == ("Sunny.", "It is Paris.\n", [])


def test_enable_thinking_false_closes_the_reasoning_in_the_prompt():
    chat = _template("Qwen-Qwen3-0.6B")
    thinking = chat.render(Chat((USER,)))
    quiet = chat.render(Chat((USER,), template_kwargs={"enable_thinking": False}))
    assert re.search(r"<think>\s*</think>\s*$", quiet.prompt) and not thinking.prompt.rstrip().endswith("</think>")


def test_reasoning_effort_goes_to_a_template_that_reads_it():
    chat = _template("openai-gpt-oss-120b")
    assert chat.caps["supports_reasoning_effort"]
    assert "Reasoning: high" in chat.render(Chat((USER,), reasoning_effort="high")).prompt
    assert "Reasoning: low" in chat.render(Chat((USER,), reasoning_effort="low")).prompt


def test_solar_open_reads_its_thought_and_its_answer_as_messages_of_their_own():
    """Solar Open writes reasoning and answer as two messages (its parser: patches/llama.cpp): no marker is text."""
    params = _template("upstage-Solar-Open-100B").render(Chat((USER,)))
    answer = ["<|think|>It is", " Paris.<|end|><|begin|>assis", "tant<|content|>Sun", "ny."]
    assert _read(params, answer) == ("Sunny.", "It is Paris.", [])


def test_solar_open_continues_a_prefilled_answer_where_it_stops():
    chat = _template("upstage-Solar-Open-100B")
    params = chat.render(Chat((USER, {"role": "assistant", "content": "Sun"})))
    assert params.prompt.endswith("<|end|><|begin|>assistant<|content|>Sun")  # the answer opened once, not twice
    answer = ChatAnswer(params, "deepseek", continuation=True)
    release = answer.feed("ny.") + answer.finish()
    assert (release.text, release.reasoning) == ("ny.", "")


def test_a_long_answer_is_read_every_few_pieces_and_streams_the_same_text(monkeypatch):
    """Past READ_SPAN characters the parser (which reads the whole answer each time) reads every n-th piece: the held
    pieces go out with the next read, so the deltas add up to what a read of every piece gives, its call included."""
    params = _template("Qwen-Qwen3-0.6B").render(Chat((USER,), tools=TOOLS))
    thought = "".join(f"Step {i}: the harbour logs vessel {i}. " for i in range(300))  # ~11k characters
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    pieces = ["<think>", *(thought[i:i + 5] for i in range(0, len(thought), 5)), "</think>\n\nChecking.\n", call]

    def releases(hold_at_most: float) -> list[Release]:
        monkeypatch.setattr(chat_answer, "HOLD_AT_MOST", hold_at_most)
        answer = ChatAnswer(params, "deepseek", continuation=False)
        return [*(answer.feed(piece) for piece in pieces), answer.finish()]

    every = releases(0.0)  # a slow stream: every piece read
    assert all(release.reasoning for release in every[1:-3])
    held = releases(60.0)  # the piece-count rule alone, whatever this host's pace
    whole, reference = sum(held, Release()), sum(every, Release())
    assert (whole.text, whole.reasoning) == (reference.text, reference.reasoning)
    assert whole.reasoning == thought and whole.text.strip() == "Checking."
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == PARIS
    # the thought's pieces held: only past READ_SPAN characters, then ever more of them
    empty = [i for i in range(1, len(pieces) - 2) if not held[i].reasoning]
    assert empty and sum(map(len, pieces[:empty[0] + 1])) >= chat_answer.READ_SPAN
    assert len(pieces) // 3 < len(empty) < len(pieces)
