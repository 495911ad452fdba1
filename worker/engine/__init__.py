"""The only package that imports llama_cpp: model, context, sampling, scheduling."""

from worker.engine.chat import ChatTemplateError, NoChatTemplate
from worker.engine.embeddings import EmbeddingFailed, UnfitInputs
from worker.engine.engine import ChatPrompt, ContextLengthExceeded, EmptyPrompt, Engine
from worker.engine.handle import RequestHandle
from worker.engine.model import EngineConfig
from worker.engine.requests import (Alternative, Event, Finished, FinishReason, Reasoning, Request, SamplingParams,
                                    TokenEvent, TokenLogprob)
from worker.engine.loop import QueueFull, SchedulerStats
from worker.engine.prefix_cache import CacheMode

__all__ = [
    "Alternative", "CacheMode", "ChatPrompt", "ChatTemplateError", "ContextLengthExceeded", "EmptyPrompt", "Engine",
    "EmbeddingFailed", "EngineConfig", "Event", "UnfitInputs",
    "Finished", "FinishReason", "NoChatTemplate", "QueueFull", "Reasoning", "Request", "RequestHandle",
    "SamplingParams", "SchedulerStats", "TokenEvent", "TokenLogprob",
]
