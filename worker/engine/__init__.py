"""The only package that imports llama_cpp: model, context, sampling, scheduling.

Its names load on first use (PEP 562), and the ones the HTTP routes and settings import at startup live in modules
free of llama_cpp: which llama.cpp library the process loads is chosen per model, after the model is fetched and
before llama_cpp is imported (exactness/build_choice.py).
"""

from typing import TYPE_CHECKING

from worker.lazy import exports

if TYPE_CHECKING:  # the same names, as type checkers see them (through __getattr__ they would be Any)
    from worker.engine.config import EngineConfig as EngineConfig
    from worker.engine.core.scheduler import SchedulerStats as SchedulerStats
    from worker.engine.engine import Engine as Engine
    from worker.engine.errors import AdapterCells as AdapterCells
    from worker.engine.errors import ChatTemplateError as ChatTemplateError
    from worker.engine.errors import ContextLengthExceeded as ContextLengthExceeded
    from worker.engine.errors import EmbeddingFailed as EmbeddingFailed
    from worker.engine.errors import EmptyPrompt as EmptyPrompt
    from worker.engine.errors import NoChatTemplate as NoChatTemplate
    from worker.engine.errors import QueueFull as QueueFull
    from worker.engine.errors import UnfitInputs as UnfitInputs
    from worker.engine.handle import RequestHandle as RequestHandle
    from worker.engine.kv.cell_file import UnusableFile as UnusableFile
    from worker.engine.modes import CacheMode as CacheMode
    from worker.engine.requests import Alternative as Alternative
    from worker.engine.requests import ChatPrompt as ChatPrompt
    from worker.engine.requests import Event as Event
    from worker.engine.requests import Finished as Finished
    from worker.engine.requests import FinishReason as FinishReason
    from worker.engine.requests import Reasoning as Reasoning
    from worker.engine.requests import Request as Request
    from worker.engine.requests import SamplingParams as SamplingParams
    from worker.engine.requests import TokenEvent as TokenEvent
    from worker.engine.requests import TokenLogprob as TokenLogprob

__getattr__ = exports(__name__, {
    "Alternative": "requests", "ChatPrompt": "requests", "Event": "requests", "Finished": "requests",
    "FinishReason": "requests", "Reasoning": "requests", "Request": "requests", "SamplingParams": "requests",
    "TokenEvent": "requests", "TokenLogprob": "requests",
    "AdapterCells": "errors", "ChatTemplateError": "errors", "ContextLengthExceeded": "errors",
    "EmbeddingFailed": "errors", "EmptyPrompt": "errors", "NoChatTemplate": "errors", "QueueFull": "errors",
    "UnfitInputs": "errors",
    "CacheMode": "modes", "EngineConfig": "config", "RequestHandle": "handle", "SchedulerStats": "core.scheduler",
    "Engine": "engine", "UnusableFile": "kv.cell_file",
})
