"""Probe: what llama.cpp's answer reader (engine/serving/chat_answer.py, its parser through the C ABI) costs a streamed
token, per template and answer length, as a route feeds it: one token's text at a time, then the answer's end.

llama.cpp's parsers read the whole answer again on every read (as llama-server's do), so a read's cost grows with the
answer; the reader reads every n-th piece past READ_SPAN characters (n growing with the answer), holding the rest.
Mean and worst microseconds a piece at 64 to 16,384 tokens of plain text, the most pieces held before a read, and the
mean for the same text ending in a call written in the template's own format (tests/chat_templates.py's oracle), with
whether the call came back as one. Target (issue #81): at most 0.1 ms a streamed token. No server, no model weights
(the test model's vocabulary only). Run: .venv/bin/python bench/probes/answerreader.py [MODEL.gguf]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from llama_cpp import Llama

from bench.config import find_model
from tests.chat_templates import CALL, TOOL, USER, WRITTEN, template, written_call
from worker.engine.native.chat_layer import ChatParams, ChatTemplates
from worker.engine.requests import Chat
from worker.engine.serving.chat_answer import READ_SPAN, ChatAnswer
from worker.engine.serving.chat_template import ChatTemplate

# Templates people serve in 2026, each with its own call format.
TEMPLATES = ("Qwen-Qwen3-0.6B", "Qwen3-Coder", "openai-gpt-oss-120b", "deepseek-ai-DeepSeek-V3.1", "GLM-4.6",
             "moonshotai-Kimi-K2", "meta-llama-Llama-3.3-70B-Instruct", "mistralai-Ministral-3-14B-Reasoning-2512")
LENGTHS = (64, 256, 1024, 4096, 16384)
# gpt-oss writes every message in a channel: the plain answer in its final channel, and before a call, its analysis
# channel's text, ended: (before the text, between the text and the call).
FRAMES = {"openai-gpt-oss-120b": (("<|channel|>final<|message|>", ""),
                                  ("<|channel|>analysis<|message|>", "<|end|><|start|>assistant"))}
UNFRAMED = (("", ""), ("", ""))
SENTENCE = ("The harbour office opens at six, and every vessel that arrives after dark is logged by the pilot on duty "
            "before its crew goes ashore. ")


def answer_pieces(model: Llama, tokens: int) -> list[str]:
    """A plain answer of `tokens` tokens, as the detokenizer hands a route its pieces: one token's text each."""
    ids = model.tokenize((SENTENCE * (tokens // 20 + 2)).encode(), add_bos=False, special=False)[:tokens]
    return [model.detokenize([token]).decode("utf-8", errors="replace") for token in ids]


def reader_cost(reader: ChatAnswer, pieces: list[str], frame: tuple[str, str], call: str) -> tuple[float, float, bool]:
    """Mean and worst µs a piece, feeding the pieces (framed), then `call` in pieces of ~4 characters, then the end;
    whether a call came back."""
    ending = frame[1] + call
    feeds = [frame[0] + pieces[0], *pieces[1:]] + [ending[i:i + 4] for i in range(0, len(ending), 4)]
    times = []
    for piece in feeds:
        started = time.perf_counter()
        reader.feed(piece)
        times.append(time.perf_counter() - started)
    started = time.perf_counter()
    release = reader.finish()
    times.append(time.perf_counter() - started)
    return statistics.fmean(times) * 1e6, max(times) * 1e6, bool(release.calls)


def own_call(name: str, chat: ChatTemplate, params: ChatParams, asked: Chat) -> str:
    """The call as the template itself writes it."""
    def rendered(message: dict) -> str:
        return chat.render(replace(asked, messages=(*asked.messages, message)), generation_prompt=False).prompt

    return WRITTEN.get(name) or written_call(
        params.prompt, params.generation_prompt, (params.thinking_start_tag, params.thinking_end_tags),
        params.preserved_tokens, rendered(CALL), rendered({"role": "assistant", "content": "XYZZY"})) or ""


def main() -> None:
    model = Llama(str(find_model(sys.argv[1] if len(sys.argv) > 1 else None)), vocab_only=True, verbose=False)
    print("| template | answer tokens | plain: mean µs | plain: worst µs | pieces held | ending in a call: mean µs "
          "| call read |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name in TEMPLATES:
        chat = ChatTemplate(ChatTemplates(None, template(name)), {}, "deepseek")
        asked = Chat((USER,), tools=(TOOL,))
        params = chat.render(asked)
        call = own_call(name, chat, params, asked)
        reader: Callable[[], ChatAnswer] = lambda: ChatAnswer(params, "deepseek", False, None, True)  # noqa: E731
        for tokens in LENGTHS:
            pieces = answer_pieces(model, tokens)
            plain_frame, call_frame = FRAMES.get(name, UNFRAMED)
            plain = reader_cost(reader(), pieces, plain_frame, "")
            called = reader_cost(reader(), pieces, call_frame, call)
            held = sum(map(len, pieces)) // READ_SPAN  # at the answer's end: n - 1
            print(f"| `{name}` | {tokens} | {plain[0]:.0f} | {plain[1]:.0f} | {held} | {called[0]:.0f} | "
                  f"{'yes' if called[2] else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
