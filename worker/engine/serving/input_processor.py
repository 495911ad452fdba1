"""One request's input -> the engine's requests, one per choice: what every dialect calls, and all it calls, before it
submits (as vLLM v1's input processor and llama-server's params_from_json). In one place: the prompt held to a
sequence's context before and after it is tokenized; a chat through its template (llama.cpp's chat layer: its prompt,
the grammar of its tool calls and their triggers, the control tokens and stops its format writes, the reader of its
answer), its images through the projector; a fill-in-the-middle through the model's FIM tokens; the request's own
grammar checked against the vocabulary; max_tokens, seeds and adapters per choice. Every refusal is a Refused naming
the request's own field. Any thread may call it (the API calls it off the event loop where a chat has images)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from typing import Any

import structlog

from worker.engine.answer import Answers, PlainText
from worker.engine.constraints.grammar import grammar_problem
from worker.engine.errors import ContextLengthExceeded, EmptyPrompt, MediaUnreadable, NoInfill, Refused
from worker.engine.inputs import GenerationInput, Infill, Media, Prepared
from worker.engine.native.projector import Bitmap
from worker.engine.requests import Chat, ChatPrompt, Request, SamplingParams
from worker.engine.serving.facts import ModelFacts
from worker.engine.serving.prompts import Prompts
from worker.problem import Problem

log = structlog.get_logger(__name__)  # its lines carry the request id (api/app.py binds it)

# Checked before tokenizing: no sane text averages more than this many characters a token, so a longer prompt cannot
# fit and is refused without the work of tokenizing it.
MAX_CHARS_PER_TOKEN = 32
_MISTRAL_ID = re.compile(r"[a-zA-Z0-9]{9}")


MIN_CLIP_SECONDS = 0.01  # one of Whisper's 10 ms frames; libmtmd aborts on a clip of one sample (llama.cpp #27693)


def _not_taken(item: Media, takes: tuple[str, ...]) -> Problem:
    """An image or clip the served model does not take: it has no projector, or one for the other kind."""
    if takes == ("text",):
        return Problem(item.field, "a model with a projector", f"{item.field}: this worker serves its model for text "
                       "only; start it with --mmproj PATH (the model's projector, mmproj-*.gguf) to send "
                       + ("audio" if item.kind == "audio" else "images"))
    return Problem(item.field, f"a model that takes {item.kind}", f"{item.field}: this model's projector (--mmproj) "
                   f"takes {' and '.join(takes[1:])}, not {item.kind}")


class InputProcessor:
    def __init__(self, prompts: Prompts, facts: ModelFacts) -> None:
        self._prompts = prompts
        self._n_ctx_seq = facts.n_ctx_seq
        self._micro_batch = facts.micro_batch

    def prepare(self, given: GenerationInput) -> Prepared:
        """The engine's requests for `given`; Refused (or one of its kinds) where it cannot run."""
        self._check_size(given)
        problems = self._grammar_problems(given.sampling.grammar, given.grammar_field)
        if problems:
            raise Refused(problems)
        made = self._made(given)
        tokens = made.prompt.tokens
        if not tokens:
            raise EmptyPrompt("the prompt is empty after tokenization", given.prompt_field)
        max_tokens = self._max_tokens(given, len(tokens))
        if len(tokens) + max_tokens > self._n_ctx_seq:
            raise ContextLengthExceeded(len(tokens), max_tokens, self._n_ctx_seq, given.prompt_field)
        sampling, seed = made.sampling, made.sampling.seed
        requests = [Request(tokens, max_tokens,
                            replace(sampling, seed=(seed + i) % 2**64) if seed is not None else sampling,
                            given.stop + made.stop, given.request_id, timeout_s=given.timeout_s,
                            logprobs=given.logprobs, reasoning=made.prompt.reasoning,
                            prompt_logprobs=given.logprobs if given.scores_prompt else None, media=made.prompt.media,
                            adapters=given.adapters, checkpoints=made.prompt.checkpoints,
                            preserved_tokens=made.preserved)
                    for i in range(given.n)]
        return Prepared(requests, made.answers)

    def _max_tokens(self, given: GenerationInput, prompt_tokens: int) -> int:
        """The request's max_tokens, else up to the end of a sequence's context; within the request's own bound on
        prompt and answer where it sets one, the prompt never cut."""
        max_tokens = given.max_tokens
        if max_tokens is None:
            max_tokens = max(1, self._n_ctx_seq - prompt_tokens)
        limit, field = given.context_limit, given.context_limit_field
        if limit is None:
            return max_tokens
        if prompt_tokens >= limit:
            raise Refused([Problem(field, f"prompt tokens < {field}", f"the prompt has {prompt_tokens} tokens and "
                                   f"{field} is {limit}: no room is left for an answer; send a larger {field} (or "
                                   "none), or a shorter prompt", limit)], "context_length_exceeded")
        return min(given.max_tokens or limit, limit - prompt_tokens)

    def _check_size(self, given: GenerationInput) -> None:
        prompt = given.prompt
        if isinstance(prompt, Chat):
            chars = sum(len(message["content"]) for message in prompt.messages
                        if isinstance(message.get("content"), str))
        elif isinstance(prompt, Infill):
            chars = len(prompt.prefix) + len(prompt.suffix) + len(prompt.prompt) + sum(
                len(extra.text) for extra in prompt.extra)
        else:
            chars = len(prompt)
        limit = max(32768, MAX_CHARS_PER_TOKEN * self._n_ctx_seq)
        if chars > limit:
            field = given.prompt_field
            raise Refused([Problem(field, f"at most {limit} characters",
                                   f"{field} has {chars} characters; a request holds {self._n_ctx_seq} tokens, so at "
                                   f"most {limit} characters are accepted", chars)], "context_length_exceeded")

    def _grammar_problems(self, grammar: str | None, field: str) -> list[Problem]:
        """Why llama.cpp would refuse the request's grammar: checked before queueing, so that the engine thread never
        meets a grammar it cannot build."""
        why = grammar_problem(self._prompts.model.vocab, grammar) if grammar is not None else None
        if why is None:
            return []
        return [Problem(field, "GBNF that llama.cpp parses (root rule: root)",
                        f"{field}: llama.cpp cannot use this grammar: {why[:300]}")]

    def _made(self, given: GenerationInput) -> _Made:
        prompt = given.prompt
        if isinstance(prompt, Chat):
            return self._chat(given, prompt)
        if isinstance(prompt, Infill):
            try:
                tokens = self._prompts.infill(prompt.prefix, prompt.suffix, prompt.extra, prompt.prompt)
            except NoInfill as why:
                raise NoInfill(why.why, prompt.field) from None
        elif isinstance(prompt, str):
            tokens = self._prompts.tokenize(prompt)
        else:
            tokens = list(prompt)
        return _Made(ChatPrompt(tokens, reasoning=None), given.sampling)

    def _chat(self, given: GenerationInput, chat: Chat) -> _Made:
        """A chat through its template: llama.cpp's chat layer renders it as llama-server does (serving/prompts.py)."""
        template = self._prompts.chat
        if chat.tools and chat.tool_choice != "none" and not template.shows_tools:
            raise Refused([Problem("tools", "a model whose chat template shows tools", "this model's chat template "
                                   "shows the model neither tools nor tool calls, so it cannot call them: send no "
                                   "tools (or tool_choice none), or serve the model with a template that has tool "
                                   "calling (its models.toml entry's chat_template)")])
        sampling = given.sampling
        asked = self._as_template_takes(chat)
        if asked.reasoning_effort not in (None, "none"):
            sampling = replace(sampling, reasoning_budget=None)  # the template bounds the thinking itself
        bitmaps = self._decoded(given.images) if given.images else None
        ready = self._prompts.chat_turn(asked, bitmaps, own_grammar=sampling.grammar is not None)
        if given.images:
            self._check_images_fit(ready.prompt, len(given.images), given.prompt_field)
        if ready.grammar_refused is not None:
            if chat.tool_choice == "required":
                raise Refused([Problem("tools", "functions whose call grammar llama.cpp parses",
                                       f"tools: llama.cpp cannot use the grammar of a call: "
                                       f"{ready.grammar_refused[:300]}")])
            log.warning("tool_call_grammar_skipped", why=ready.grammar_refused[:300])
        if ready.grammar is not None:
            sampling = replace(sampling, grammar=ready.grammar, grammar_triggers=ready.triggers,
                               grammar_prefill=ready.grammar_prefill)
        if chat.tools:
            log.debug("tools", functions=len(chat.tools), choice=chat.tool_choice, only=chat.only,
                      grammar="lazy" if ready.triggers else "whole" if ready.grammar else "none")
        return _Made(ready.prompt, sampling, ready.stop, ready.answers, ready.preserved_tokens)

    def chat_text(self, chat: Chat) -> str:
        """The chat's prompt text, as prepare renders it (llama-server's /apply-template)."""
        return self._prompts.chat_text(self._as_template_takes(chat))

    def _as_template_takes(self, chat: Chat) -> Chat:
        """A reasoning effort goes to a template that reads it (gpt-oss); elsewhere it stood for a reasoning budget
        already (the API's), and "none" turns thinking off in both. Tool call ids as the template accepts them."""
        effort = chat.reasoning_effort
        reads_effort = self._prompts.chat.caps.get("supports_reasoning_effort", False)
        return replace(chat, messages=self._template_messages(chat.messages),
                       reasoning_effort=effort if effort == "none" or reads_effort else None)

    def _template_messages(self, messages: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        """The history as OpenAI sends it, which llama.cpp's chat layer reads. Mistral's templates accept only
        9-letter-or-digit tool call ids: other ids (the worker's are call_...) are mapped to one, the same each time."""
        if "[TOOL_CALLS]" not in (self._prompts.template_source or ""):
            return messages
        return tuple(_with_mistral_ids(message) for message in messages)

    def _decoded(self, media: tuple[Media, ...]) -> list[Bitmap]:
        """Each image's pixels and clip's samples (hashed for the prefix cache); Refused listing every one that
        cannot be had: of a kind the model does not take, unreadable, or a clip over its limit."""
        takes = self._prompts.input_modalities
        if refused := [item for item in media if item.kind not in takes]:
            raise Refused([_not_taken(item, takes) for item in refused])
        bitmaps: list[Bitmap] = []
        problems: list[Problem] = []
        for item in media:
            try:
                bitmap = self._prompts.decode(item.data, item.kind == "audio")
            except MediaUnreadable as why:
                size = f"{item.size} by its header, " if item.size else ""
                problems.append(Problem(item.field, f"a decodable {item.kind}",
                                        f"{item.field}: {why} ({size}{len(item.data)} bytes)"))
                continue
            seconds = bitmap.width / self._prompts.sample_rate if bitmap.audio else 0.0
            if bitmap.audio and seconds < MIN_CLIP_SECONDS:  # mtmd asserts (aborts) on a clip of one sample
                problems.append(Problem(item.field, f"at least {MIN_CLIP_SECONDS:g} seconds",
                                        f"{item.field}: the clip lasts {seconds * 1e3:.1f} ms, shorter than a "
                                        f"{MIN_CLIP_SECONDS * 1e3:g} ms frame", bitmap.width))
            elif item.max_seconds is not None and seconds > item.max_seconds:
                problems.append(Problem(item.field, f"at most {item.max_seconds:g} seconds",
                                        f"{item.field}: the clip lasts {seconds:.1f} s, over the limit of "
                                        f"{item.max_seconds:g} s; --audio-max-seconds raises it", round(seconds, 1)))
            bitmaps.append(bitmap)
        if problems:
            raise Refused(problems)
        return bitmaps

    def _check_images_fit(self, prompt: ChatPrompt, n_images: int, field: str) -> None:
        """A prompt with images must leave a sequence's context room for one generated token; if it does not, the
        message counts what the images take, which a client cannot know before the projector has sized them."""
        image_tokens = sum(span.n_tokens for span in prompt.media)
        log.info("images_read", images=n_images, image_tokens=image_tokens, prompt_tokens=len(prompt.tokens))
        whole = max((span.n_tokens for span in prompt.media if span.whole), default=0)
        if whole > self._micro_batch:  # (a projector whose every image is larger is refused at startup)
            raise Refused([Problem(field, f"images of at most {self._micro_batch} tokens",
                                   f"an image takes {whole} tokens, decoded whole (its tokens attend both ways), "
                                   f"and a micro-batch holds {self._micro_batch}: send a smaller image, or start "
                                   f"the worker with --ubatch-size {whole}", whole)])
        if len(prompt.tokens) < self._n_ctx_seq:
            return
        text_tokens = len(prompt.tokens) - image_tokens
        raise Refused([Problem(
            field, f"images and text within {self._n_ctx_seq} tokens",
            f"the {n_images} images take {image_tokens} tokens ({image_tokens // max(1, n_images)} each on average) "
            f"and the text {text_tokens}: {len(prompt.tokens)} prompt tokens, and a sequence holds {self._n_ctx_seq} "
            f"with room for the answer; send fewer images", [n_images, image_tokens, self._n_ctx_seq])],
            "context_length_exceeded")


@dataclass(frozen=True)
class _Made:
    """A prompt made of the input, with what its answer samples under and is read with."""

    prompt: ChatPrompt
    sampling: SamplingParams
    stop: tuple[str, ...] = ()  # the chat format's own, beside the request's
    answers: Answers = PlainText
    preserved: frozenset[int] = frozenset()  # control tokens the answer's text shows


def _with_mistral_ids(message: dict[str, Any]) -> dict[str, Any]:
    if "tool_calls" in message:
        return {**message, "tool_calls": [{**call, "id": _mistral_id(call["id"])} for call in message["tool_calls"]]}
    if message["role"] == "tool":
        return {**message, "tool_call_id": _mistral_id(message["tool_call_id"])}
    return message


def _mistral_id(call_id: str) -> str:
    return call_id if _MISTRAL_ID.fullmatch(call_id) else hashlib.sha256(call_id.encode()).hexdigest()[:9]
