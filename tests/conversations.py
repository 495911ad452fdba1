"""Multi-turn conversations as users send them (the whole history resent every turn, a shared system prompt), and
the reference they are held to: the `off` worker's turns, asked once a run."""

from __future__ import annotations

import aiohttp

from tests.helpers import completion_text, openai_once, openai_stream

SYSTEM = ("You are a patient tutor for a class of curious twelve-year-olds. Answer in two or three short, "
          "plain sentences, give one everyday example, and never use jargon without explaining it first. "
          "If a question is unclear, say which part is unclear and answer the part you understand. Keep a "
          "friendly tone, and end with a short question that invites the student to think further.")
QUESTIONS = [
    ["What are tides?", "Why are there two a day?", "Do lakes have tides too?", "What is a spring tide?"],
    ["How do bees make honey?", "Why do they dance?", "What does the queen do?", "How long do bees live?"],
    ["What is a volcano?", "Why do some explode?", "Where is the biggest one?", "Can we predict eruptions?"],
]
GREEDY = {"temperature": 0, "max_tokens": 40}


async def converse(http: aiohttp.ClientSession, url: str, questions: list[str], stream: bool = False) -> list[dict]:
    """One conversation, history resent every turn; returns each turn's answer and usage."""
    messages, turns = [{"role": "system", "content": SYSTEM}], []
    for question in questions:
        messages.append({"role": "user", "content": question})
        body = {"messages": messages, **GREEDY}
        if stream:
            streamed = await openai_stream(http, url + "/v1/chat/completions",
                                           {**body, "stream_options": {"include_usage": True}})
            answer, usage = streamed.text, streamed.usage
        else:
            result = await openai_once(http, url + "/v1/chat/completions", body)
            answer, usage = completion_text(result), result["usage"]
        turns.append({"answer": answer, "usage": usage})
        messages.append({"role": "assistant", "content": answer})
    return turns


def cached(turns: list[dict]) -> list[int]:
    return [turn["usage"]["prompt_tokens_details"]["cached_tokens"] for turn in turns]


class OffConversations:
    """One `off` worker's turns of conversations (or of their first turns), each asked of it once: off mode reuses
    nothing and drafts nothing, so its greedy answers are the same whoever asks and when."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.known: dict[tuple[str, ...], list[dict]] = {}

    async def __call__(self, http: aiohttp.ClientSession, questions: list[str]) -> list[dict]:
        asked = tuple(questions)
        held = next((whole for whole in self.known if whole[:len(asked)] == asked), None)
        if held is None:
            self.known[held := asked] = await converse(http, self.url, questions)
        return self.known[held][:len(asked)]
