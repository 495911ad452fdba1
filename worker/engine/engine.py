"""The engine contract the API sees: load, submit -> async events, cancel, stats."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path

import structlog

from worker.engine.chat import ChatTemplate
from worker.engine.handle import RequestHandle
from worker.engine.model import EngineConfig, LlamaModel, ProgressFn
from worker.engine.loop import EngineLoop, SchedulerStats
from worker.engine.requests import Request
from worker.engine.runner import Events
from worker.engine.sequence import Sequence

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ContextLengthExceeded(Exception):
    prompt_tokens: int
    max_tokens: int
    n_ctx_seq: int

    def __str__(self) -> str:
        return (
            f"this request needs {self.prompt_tokens} prompt + {self.max_tokens} generated tokens, "
            f"but a sequence holds {self.n_ctx_seq} tokens; shorten the prompt or lower max_tokens"
        )


class EmptyPrompt(ValueError):
    pass


class Engine:
    def __init__(self, model: LlamaModel, loop: asyncio.AbstractEventLoop, chat_template: str | None = None) -> None:
        self.model = model
        self.chat = ChatTemplate(chat_template or model.chat_template(), bos_text=model.bos_text, eos_text=model.eos_text)
        self._loop = loop
        self._steps = EngineLoop(model, model.config.prefix_cache, self._post)
        self._warm = threading.Event()
        self._warm_up_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)

    @classmethod
    def load(cls, path: Path, config: EngineConfig, loop: asyncio.AbstractEventLoop,
             progress: ProgressFn | None = None, chat_template: str | None = None) -> Engine:
        """Blocking: load the GGUF, create the context, start the engine thread, warm it up.

        Events are delivered on `loop`; `progress` hears the load and warmup stages;
        `chat_template` replaces the GGUF's own (a models.toml override).
        """
        model = LlamaModel(path, config, progress)
        engine = cls(model, loop, chat_template)
        if progress is not None:
            progress("warmup", 0, 1)
        engine._thread.start()
        engine._warm.wait()
        if engine._warm_up_error is not None:
            model.close()
            raise engine._warm_up_error
        if progress is not None:
            progress("warmup", 1, 1)
        log.info("model_loaded", path=str(path), n_ctx=model.n_ctx, n_ctx_seq=model.n_ctx_seq,
                 slots=config.parallel, size_bytes=model.size_bytes, backend=config.backend,
                 chat_template="models.toml" if chat_template else "gguf", prefix_cache=config.prefix_cache.value,
                 flash_attn=model.flash_attn, cache_type_k=config.cache_type_k, cache_type_v=config.cache_type_v)
        return engine

    def _run(self) -> None:
        # Every decode, the warm-up included, runs on this one thread: ggml's OpenMP
        # pool belongs to the thread that first computes, and decoding from a second
        # thread measured 3x slower (36 ms vs 11 ms a token on the test model).
        try:
            self.model.warm_up()
        except BaseException as exc:  # handed to load()'s caller
            self._warm_up_error = exc
            return
        finally:
            self._warm.set()
        self._steps.run()

    @property
    def n_ctx_seq(self) -> int:
        """Tokens one request may use: prompt + generated."""
        return self.model.n_ctx_seq

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def size_bytes(self) -> int:
        return self.model.size_bytes

    @property
    def device_bytes(self) -> int:
        """Memory llama.cpp took on GPU or rpc devices at load (weights, KV, compute); 0 on cpu alone."""
        return self.model.device_bytes

    def tokenize(self, text: str) -> list[int]:
        return self.model.tokenize(text, add_special=self.model.add_bos)

    def tokenize_chat(self, messages: list[dict[str, str]]) -> list[int]:
        prompt = self.chat.render(messages)
        # A template that writes BOS itself must not get a second one from the tokenizer.
        add_bos = self.model.add_bos and not prompt.startswith(self.chat.bos_text)
        return self.model.tokenize(prompt, add_special=add_bos)

    def submit(self, request: Request) -> RequestHandle:
        """Queue a request; raises ContextLengthExceeded, EmptyPrompt or loop.QueueFull up front."""
        n_prompt = len(request.prompt_tokens)
        if n_prompt == 0:
            raise EmptyPrompt("the prompt is empty after tokenization")
        if n_prompt + request.max_tokens > self.n_ctx_seq:
            raise ContextLengthExceeded(n_prompt, request.max_tokens, self.n_ctx_seq)
        sequence = Sequence(request)
        handle = RequestHandle(sequence, self._steps.cancel)
        sequence.handle = handle
        self._steps.add(sequence)
        return handle

    def stats(self) -> SchedulerStats:
        return self._steps.stats()

    def _post(self, events: Events) -> None:
        """Engine thread -> event loop: one wake-up per step, however many events."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._deliver, events)

    @staticmethod
    def _deliver(events: Events) -> None:
        for sequence, event in events:
            sequence.handle.push(event)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the engine thread; every open request ends with a CANCELLED Finished."""
        self._steps.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():  # never free the context under a running decode
            self.model.close()

