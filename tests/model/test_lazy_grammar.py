"""Tool calls' grammars as llama.cpp's chat layer gives them, on the engine's sampler alone, in this process, on the
test model: tool_choice auto's lazy grammar, woken by each format's triggers, and a forced call's grammar of the whole
answer (tests/e2e/test_chat_formats.py: through the API)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import jsonschema
import llama_cpp
import numpy as np
import pytest
from structlog.testing import capture_logs

from tests.chat_templates import TOOL, USER, WEATHER, template
from worker.engine.constraints.grammar import grammar_problem
from worker.engine.native.chat_layer import ChatParams, ChatTemplates
from worker.engine.native.model import EngineConfig, LlamaModel
from worker.engine.output.sampler import Sampler
from worker.engine.requests import Chat, GrammarTrigger, SamplingParams
from worker.engine.serving.chat_answer import ChatAnswer
from worker.engine.serving.chat_template import ChatTemplate

# The model's first tokens are scripted (their logits raised far above the rest) as if it had written them.
FREE = SamplingParams(temperature=0)
QWEN = "Qwen-Qwen2.5-7B-Instruct"  # <tool_call>{JSON}</tool_call>, woken by the word "<tool_call>\n"
CODER = "Qwen3-Coder"  # <tool_call><function=...><parameter=...>, woken by "<tool_call>"
MISTRAL = "mistralai-Mistral-Nemo-Instruct-2407"  # [TOOL_CALLS][{JSON}], woken by the word "[TOOL_CALLS]"
GPT_OSS = "openai-gpt-oss-120b"  # woken by regex patterns on the channel header


@pytest.fixture(scope="module")
def llama(model_path: Path):
    model = LlamaModel(model_path, EngineConfig(parallel=1, ctx_size=1024))
    yield model
    model.close()


def _params(name: str, choice: str = "auto") -> ChatParams:
    chat = ChatTemplate(ChatTemplates(None, template(name)), {}, "deepseek")
    return chat.render(Chat((USER,), tools=(TOOL,), tool_choice=choice, parallel_tool_calls=False))


def _lazy(llama: LlamaModel, name: str, base: SamplingParams = FREE) -> SamplingParams:
    params = _params(name)
    assert params.grammar_lazy and grammar_problem(llama.vocab, params.grammar) is None
    return replace(base, grammar=params.grammar,
                   grammar_triggers=tuple(GrammarTrigger(t.kind, t.value) for t in params.triggers))


def _tokens(llama: LlamaModel, text: str) -> list[int]:
    return llama.tokenize(text, add_special=False, parse_special=False)


def _generate(llama: LlamaModel, params: SamplingParams, script: Sequence[int] = (), reasoning: int = 0,
              max_tokens: int = 40, until: Callable[[list[int]], bool] = lambda tokens: False) -> list[int]:
    """The tokens sampled after the chat's prompt, the first ones `script`'s, the first `reasoning` of them sampled as
    a thinking model's reasoning (a grammar of the answer waits), as the runner samples them; an end-of-generation
    token ends it, or `until` the tokens so far."""
    llama_cpp.llama_memory_clear(llama.memory, True)
    prompt = llama.tokenize(_params(QWEN).prompt, add_special=False)
    sampler = Sampler(params, llama.vocab, llama.n_vocab, prompt)
    out: list[int] = []
    batch = prompt
    try:
        while len(out) < max_tokens:
            assert llama_cpp.llama_decode(llama.ctx, llama_cpp.llama_batch_get_one(
                (llama_cpp.llama_token * len(batch))(*batch), len(batch))) == 0
            if len(out) < len(script):
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama.ctx, -1), shape=(llama.n_vocab,))
                logits[script[len(out)]] = logits.max() + 100
            token = sampler.sample(llama.ctx, -1, reasoning=len(out) < reasoning)
            assert token is not None
            out.append(token)
            if llama.is_eog(token) or until(out):
                break
            batch = [token]
    finally:
        sampler.free()
    return out


def _text(llama: LlamaModel, tokens: list[int]) -> str:
    """The answer's text; once a call is whole, llama.cpp's grammars allow only whitespace, or its end."""
    return b"".join(llama.piece(token) for token in tokens if not llama.is_eog(token)).decode()


def _read(name: str, text: str):
    answer = ChatAnswer(_params(name), "deepseek", continuation=False)
    return answer.feed(text) + answer.finish()


def _valid(name: str, text: str) -> bool:
    calls = _read(name, text).calls
    try:
        return bool(calls) and all(jsonschema.validate(json.loads(c.arguments), WEATHER) is None for c in calls)
    except (jsonschema.ValidationError, ValueError):
        return False


@pytest.mark.parametrize("base", [FREE, SamplingParams(temperature=0.8, seed=7)], ids=["greedy", "sampled"])
def test_asleep_the_lazy_grammar_changes_nothing(llama, base):
    free = _generate(llama, base)
    assert "<tool_call>" not in _text(llama, free)
    assert _generate(llama, _lazy(llama, QWEN, base)) == free


@pytest.mark.parametrize("name, opening, content", [
    (QWEN, "Sure. <tool_call>\n", "Sure. "),
    (QWEN, "x.<tool_call>\n", "x."),  # the trigger starts inside the token ".<"
    # A string parameter's value is free text up to its closing tag: the test model would write on, so it is given.
    (CODER, "I will check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
     "I will check.\n"),
    (MISTRAL, "[TOOL_CALLS]", ""),
    # Woken by a regex of the whole answer so far at "to=functions"; the content type after the name is free letters,
    # which the test model would write on: it is given too.
    (GPT_OSS, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>", ""),
], ids=["hermes", "hermes_inside_a_token", "qwen3_coder", "mistral", "gpt_oss"])
def test_a_call_the_model_opens_is_finished_valid(llama, name, opening, content):
    script = _tokens(llama, opening)
    free = _text(llama, _generate(llama, FREE, script, max_tokens=60))
    assert not _valid(name, free)  # left alone, this model does not finish the call
    # Once a call is whole, llama.cpp's grammars let a format of calls one after another (Hermes, Qwen) go on to a
    # second; the answer is read where the first is whole.
    text = _text(llama, _generate(llama, _lazy(llama, name), script, max_tokens=60,
                                  until=lambda tokens: _valid(name, _text(llama, tokens))))
    assert text.startswith(opening)
    release = _read(name, text)
    assert release.text == content
    [call] = release.calls
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_text_the_grammar_refuses_after_the_trigger_leaves_the_answer_free(llama):
    """One token writes the trigger's end and more: ">," after "<tool_call". Replayed, the grammar refuses the
    comma before accepting it: no abort (llama.cpp's own lazy grammar aborts the process here), a warning, and
    the answer goes on exactly as without a grammar."""
    [closing] = _tokens(llama, ">,")
    script = [*_tokens(llama, "I will call <tool_call"), closing]
    params = replace(_lazy(llama, CODER), grammar_triggers=(GrammarTrigger("word", "<tool_call>"),))
    with capture_logs() as logs:
        tokens = _generate(llama, params, script)
    assert tokens == _generate(llama, FREE, script)
    [dropped] = [log for log in logs if log["event"] == "lazy_grammar_dropped"]
    assert dropped["written"] == "<tool_call>,"


def test_a_grammar_no_token_fits_is_dropped(llama):
    """No token spells NUL: once awake, the grammar allows nothing, and the answer goes on free (no error)."""
    params = SamplingParams(temperature=0, grammar='root ::= "<tool_call>" "\\x00"',
                            grammar_triggers=(GrammarTrigger("word", "<tool_call>"),))
    script = _tokens(llama, "<tool_call>")
    with capture_logs() as logs:
        tokens = _generate(llama, params, script)
    assert tokens == _generate(llama, FREE, script)
    dropped = [log["why"] for log in logs if log["event"] == "lazy_grammar_dropped"]
    assert dropped == ["the grammar allows no token here"]


def test_reasoning_is_not_the_answer(llama):
    """A thinking model's reasoning is sampled unconstrained: a trigger there wakes nothing; one in the answer after
    it does."""
    script = _tokens(llama, "<tool_call>\n")
    lazy = _lazy(llama, QWEN)
    assert _generate(llama, lazy, script, reasoning=len(script)) == _generate(llama, FREE, script)
    thought = _tokens(llama, "Let me think.")
    tokens = _generate(llama, lazy, thought + script, len(thought), 60,
                       until=lambda tokens: _valid(QWEN, _text(llama, tokens[len(thought):])))
    assert _valid(QWEN, _text(llama, tokens[len(thought):]))


def test_a_forced_calls_grammar_takes_the_answers_opening_first(llama):
    """tool_choice required: llama.cpp's grammar of the whole answer begins with the template's opening of it, which
    the sampler takes from the prompt first; the call then follows its schema to the end."""
    params = _params(QWEN, "required")
    assert not params.grammar_lazy
    prefill = tuple(llama.tokenize(params.generation_prompt, add_special=False, parse_special=True))
    forced = replace(FREE, grammar=params.grammar, grammar_prefill=prefill)
    tokens = _generate(llama, forced, _tokens(llama, "<tool_call>\n"), max_tokens=60,
                       until=lambda tokens: _valid(QWEN, _text(llama, tokens)))
    assert _valid(QWEN, _text(llama, tokens))
