"""tool_choice auto: the lazy grammar on the engine's sampler alone, in this process, on the test model
(tests/e2e/test_tools.py: through the API)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import jsonschema
import llama_cpp
import numpy as np
import pytest
from structlog.testing import capture_logs

from tests.tools_helpers import WEATHER
from worker.api.tools.answer import CallStream
from worker.api.tools.formats import GENERIC_FORMAT, HERMES_FORMAT, LLAMA_3_FORMAT, MISTRAL_FORMAT, ToolFormat
from worker.api.tools.grammar import call_grammar
from worker.api.tools.request import Function, Tools
from worker.engine.constraints.grammar import grammar_problem
from worker.engine.native.model import EngineConfig, LlamaModel
from worker.engine.output.sampler import Sampler
from worker.engine.requests import GrammarTrigger, SamplingParams

# The model's first tokens are scripted (their logits raised far above the rest) as if it had written them.
CHATML_ASK = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
ONE_CALL = Tools((Function("get_weather", "The weather in a city now", WEATHER),), forced=False, only=None,
                 parallel=False)
FREE = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def llama(model_path: Path):
    model = LlamaModel(model_path, EngineConfig(parallel=1, ctx_size=1024))
    yield model
    model.close()


def _lazy(llama: LlamaModel, fmt: ToolFormat, base: SamplingParams = FREE) -> SamplingParams:
    grammar = call_grammar(fmt, ONE_CALL, lazy=True)
    assert grammar_problem(llama.vocab, grammar) is None
    return replace(base, grammar=grammar, grammar_trigger=GrammarTrigger(fmt.trigger, fmt.trigger_first))


def _tokens(llama: LlamaModel, text: str) -> list[int]:
    return llama.tokenize(text, add_special=False, parse_special=False)


def _generate(llama: LlamaModel, params: SamplingParams, script: Sequence[int] = (), reasoning: int = 0,
              max_tokens: int = 40) -> list[int]:
    """The tokens sampled after CHATML_ASK, the first ones `script`'s, the first `reasoning` of them sampled as a
    thinking model's reasoning (unconstrained), as the runner samples them; an end-of-generation token ends it."""
    llama_cpp.llama_memory_clear(llama.memory, True)
    prompt = llama.tokenize(CHATML_ASK, add_special=False)
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
            token = sampler.sample(llama.ctx, -1, constrained=len(out) >= reasoning)
            assert token is not None
            out.append(token)
            if llama.is_eog(token):
                break
            batch = [token]
    finally:
        sampler.free()
    return out


def _text(llama: LlamaModel, tokens: list[int]) -> str:
    return b"".join(map(llama.piece, tokens)).decode()


@pytest.mark.parametrize("base", [FREE, SamplingParams(temperature=0.8, seed=7)], ids=["greedy", "sampled"])
def test_asleep_the_lazy_grammar_changes_nothing(llama, base):
    free = _generate(llama, base)
    assert "<tool_call>" not in _text(llama, free)
    assert _generate(llama, _lazy(llama, HERMES_FORMAT, base)) == free


@pytest.mark.parametrize("fmt, opening, content", [
    (HERMES_FORMAT, "Sure. <tool_call>", "Sure."),
    (HERMES_FORMAT, "x.<tool_call>", "x."),  # the trigger starts inside the token ".<"
    (GENERIC_FORMAT, 'I will check. {"tool_calls"', "I will check."),
    (LLAMA_3_FORMAT, ' {"name"', ""),
    (MISTRAL_FORMAT, '[{"name"', ""),  # what follows [TOOL_CALLS], a control token the engine does not write
], ids=["hermes", "hermes_inside_a_token", "generic", "llama3", "mistral"])
def test_a_call_the_model_opens_is_finished_valid(llama, fmt, opening, content):
    script = _tokens(llama, opening)
    free = _text(llama, _generate(llama, FREE, script, max_tokens=60))
    assert not _called(fmt, free)  # left alone, this model does not finish the call
    tokens = _generate(llama, _lazy(llama, fmt), script, max_tokens=60)
    assert llama.is_eog(tokens[-1])  # the grammar ended the answer once the call was whole
    text = _text(llama, tokens[:-1])
    assert text.startswith(opening)
    release = _read(fmt, text)
    assert release.text == content
    [call] = release.calls
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def _read(fmt: ToolFormat, text: str):
    answer = CallStream(fmt.syntax)
    return answer.feed(text) + answer.finish()


def _called(fmt: ToolFormat, text: str) -> bool:
    calls = _read(fmt, text).calls
    try:
        return bool(calls) and all(jsonschema.validate(json.loads(c.arguments), WEATHER) is None for c in calls)
    except jsonschema.ValidationError:
        return False


def test_a_trigger_further_on_than_the_opening_is_text(llama):
    script = _tokens(llama, 'Hi {"name"')
    assert _generate(llama, _lazy(llama, LLAMA_3_FORMAT), script) == _generate(llama, FREE, script)


def test_text_the_grammar_refuses_after_the_trigger_leaves_the_answer_free(llama):
    """One token writes the trigger's end and more: ">," after "<tool_call". Replayed, the grammar refuses the
    comma before accepting it: no abort (llama.cpp's own lazy grammar aborts the process here), a warning, and
    the answer goes on exactly as without a grammar."""
    [closing] = _tokens(llama, ">,")
    script = [*_tokens(llama, "<tool_call"), closing]
    with capture_logs() as logs:
        tokens = _generate(llama, _lazy(llama, HERMES_FORMAT), script)
    assert tokens == _generate(llama, FREE, script)
    [dropped] = [log for log in logs if log["event"] == "lazy_grammar_dropped"]
    assert dropped["written"] == "<tool_call>,"


def test_a_grammar_no_token_fits_is_dropped(llama):
    """No token spells NUL: once awake, the grammar allows nothing, and the answer goes on free (no error)."""
    params = SamplingParams(temperature=0, grammar='root ::= "<tool_call>" "\\x00"',
                            grammar_trigger=GrammarTrigger("<tool_call>"))
    script = _tokens(llama, "<tool_call>")
    with capture_logs() as logs:
        tokens = _generate(llama, params, script)
    assert tokens == _generate(llama, FREE, script)
    dropped = [log["why"] for log in logs if log["event"] == "lazy_grammar_dropped"]
    assert dropped == ["the grammar allows no token here"]


def test_reasoning_is_not_the_answer(llama):
    """A thinking model's reasoning is sampled unconstrained: a trigger there wakes nothing, and an opening
    trigger counts where the answer opens, after it."""
    script = _tokens(llama, "<tool_call>")
    hermes = _lazy(llama, HERMES_FORMAT)
    assert _generate(llama, hermes, script, reasoning=len(script)) == _generate(llama, FREE, script)
    thought = _tokens(llama, "Let me think.")
    tokens = _generate(llama, _lazy(llama, LLAMA_3_FORMAT), thought + _tokens(llama, '{"name"'), len(thought), 60)
    assert llama.is_eog(tokens[-1])
    [call] = _read(LLAMA_3_FORMAT, _text(llama, tokens[len(thought):-1])).calls
    jsonschema.validate(json.loads(call.arguments), WEATHER)
