"""The only package that imports llama_cpp: model, context, sampling, scheduling.

Its names load on first use (PEP 562), and the ones the HTTP routes and settings import at startup live in modules
free of llama_cpp: which llama.cpp library the process loads is chosen per model, after the model is fetched and
before llama_cpp is imported (exactness/build_choice.py).
"""

from worker.lazy import exports

__getattr__ = exports(__name__, {
    "Alternative": "requests", "ChatPrompt": "requests", "Event": "requests", "Finished": "requests",
    "FinishReason": "requests", "Reasoning": "requests", "Request": "requests", "SamplingParams": "requests",
    "TokenEvent": "requests", "TokenLogprob": "requests",
    "ChatTemplateError": "errors", "ContextLengthExceeded": "errors", "EmbeddingFailed": "errors",
    "EmptyPrompt": "errors", "NoChatTemplate": "errors", "QueueFull": "errors", "UnfitInputs": "errors",
    "CacheMode": "modes", "EngineConfig": "config", "RequestHandle": "handle", "SchedulerStats": "core.scheduler",
    "Engine": "engine",
})
