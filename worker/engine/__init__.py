"""The only package that imports llama_cpp: model, context, sampling, scheduling."""

from worker.engine.chat import ChatTemplateError, NoChatTemplate
from worker.engine.engine import ContextLengthExceeded, EmptyPrompt, Engine
from worker.engine.handle import RequestHandle
from worker.engine.model import EngineConfig
from worker.engine.requests import Event, Finished, FinishReason, Request, SamplingParams, TokenEvent
from worker.engine.loop import QueueFull, SchedulerStats
from worker.engine.prefix_cache import CacheMode

__all__ = [
    "CacheMode", "ChatTemplateError", "ContextLengthExceeded", "EmptyPrompt", "Engine", "EngineConfig", "Event",
    "Finished", "FinishReason", "NoChatTemplate", "QueueFull", "Request", "RequestHandle",
    "SamplingParams", "SchedulerStats", "TokenEvent",
]
