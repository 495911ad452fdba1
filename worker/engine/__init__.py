"""The engine's door to the HTTP API: everything the API imports from the engine, and nothing from behind it.

A loaded model is a ServedModel: a dialect reads a request into a GenerationInput, the served model prepares it into
the engine's requests (ServedModel.prepare: template, tokens, grammar and its triggers, adapters, max_tokens, context
checks, refusals naming the request's fields), and the dialect submits them and reads their events and answers.
Beside it: the plain data those take and give, and what the engine refuses or fails at. What the process around the
engine needs before and beside a model (its config, the llama.cpp build, backends, KV events' data) is behind the
other door, worker/engine/host.py, which the API does not import.

Names load on first use (PEP 562), and the ones the HTTP routes import at startup live in modules free of llama_cpp:
which llama.cpp library the process loads is chosen per model, after the model is fetched and before llama_cpp is
imported (exactness/build_choice.py).
"""

from typing import TYPE_CHECKING

from worker.lazy import exports

if TYPE_CHECKING:  # the same names, as type checkers see them (through __getattr__ they would be Any)
    from worker.engine.answer import Answer as Answer
    from worker.engine.answer import Release as Release
    from worker.engine.answer import ToolCall as ToolCall
    from worker.engine.config import Lora as Lora
    from worker.engine.core.scheduler import SchedulerStats as SchedulerStats
    from worker.engine.errors import EmbeddingFailed as EmbeddingFailed
    from worker.engine.errors import QueueFull as QueueFull
    from worker.engine.errors import Refused as Refused
    from worker.engine.handle import RequestHandle as RequestHandle
    from worker.engine.inputs import GenerationInput as GenerationInput
    from worker.engine.inputs import Infill as Infill
    from worker.engine.inputs import Media as Media
    from worker.engine.inputs import Prepared as Prepared
    from worker.engine.inputs import Prompt as Prompt
    from worker.engine.pooling.embeddings import Vector as Vector
    from worker.engine.requests import AdapterSet as AdapterSet
    from worker.engine.requests import Chat as Chat
    from worker.engine.requests import Event as Event
    from worker.engine.requests import ExtraFile as ExtraFile
    from worker.engine.requests import Finished as Finished
    from worker.engine.requests import FinishReason as FinishReason
    from worker.engine.requests import PromptLogprobs as PromptLogprobs
    from worker.engine.requests import SamplingParams as SamplingParams
    from worker.engine.requests import TokenEvent as TokenEvent
    from worker.engine.requests import TokenLogprob as TokenLogprob
    from worker.engine.serving.served_model import ServedModel as ServedModel

__getattr__ = exports(__name__, {
    # the loaded model, a request's input and the engine's requests prepared of it
    "ServedModel": "serving.served_model", "GenerationInput": "inputs", "Prompt": "inputs", "Chat": "requests",
    "Infill": "inputs", "ExtraFile": "requests", "Media": "inputs",
    "SamplingParams": "requests", "AdapterSet": "requests", "Lora": "config", "Prepared": "inputs",
    # what a submitted request gives back: its handle, its events, its answer read in the chat's format
    "RequestHandle": "handle", "Event": "requests", "TokenEvent": "requests", "TokenLogprob": "requests",
    "PromptLogprobs": "requests", "Finished": "requests", "FinishReason": "requests",
    "Answer": "answer", "Release": "answer", "ToolCall": "answer",
    # pooled outputs, saved cells, the engine's counters
    "Vector": "pooling.embeddings", "SchedulerStats": "core.scheduler",
    # what the engine refuses (a 400 naming the request's fields) or fails at
    "Refused": "errors", "QueueFull": "errors", "EmbeddingFailed": "errors",
})
