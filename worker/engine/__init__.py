"""The engine's one door: everything outside worker/engine imports from here, and nothing from behind it.

`load_model` loads a model and hands back a ServedModel: the engine contract (submit, cancel through the handle,
stats), the model's prompts, pooled outputs, saved cells and facts. Beside it, the plain data those take and give,
the errors they raise, the config and what is chosen before a model loads (the llama.cpp build, the backends).
Names load on first use (PEP 562), and the ones the HTTP routes and settings import at startup live in modules free
of llama_cpp: which llama.cpp library the process loads is chosen per model, after the model is fetched and before
llama_cpp is imported (exactness/build_choice.py).
"""

from typing import TYPE_CHECKING

from worker.lazy import exports

if TYPE_CHECKING:  # the same names, as type checkers see them (through __getattr__ they would be Any)
    from worker.engine.answer import Answer as Answer
    from worker.engine.answer import Answers as Answers
    from worker.engine.answer import PlainText as PlainText
    from worker.engine.answer import Release as Release
    from worker.engine.answer import ToolCall as ToolCall
    from worker.engine.config import DRAFT_MAX as DRAFT_MAX
    from worker.engine.config import EngineConfig as EngineConfig
    from worker.engine.config import Lora as Lora
    from worker.engine.config import default_batch_size as default_batch_size
    from worker.engine.config import default_ubatch_size as default_ubatch_size
    from worker.engine.constraints.grammar import GrammarSampler as GrammarSampler
    from worker.engine.constraints.grammar import grammar_problem as grammar_problem
    from worker.engine.constraints.json_schema import SchemaProblem as SchemaProblem
    from worker.engine.constraints.json_schema import object_grammar as object_grammar
    from worker.engine.constraints.json_schema import schema_grammar as schema_grammar
    from worker.engine.core.scheduler import SchedulerStats as SchedulerStats
    from worker.engine.engine import Engine as Engine
    from worker.engine.errors import AdapterCells as AdapterCells
    from worker.engine.errors import ChatTemplateError as ChatTemplateError
    from worker.engine.errors import ContextLengthExceeded as ContextLengthExceeded
    from worker.engine.errors import EmbeddingFailed as EmbeddingFailed
    from worker.engine.errors import EmptyPrompt as EmptyPrompt
    from worker.engine.errors import ImageUnreadable as ImageUnreadable
    from worker.engine.errors import NoChatTemplate as NoChatTemplate
    from worker.engine.errors import NoInfill as NoInfill
    from worker.engine.errors import QueueFull as QueueFull
    from worker.engine.errors import UnfitInputs as UnfitInputs
    from worker.engine.exactness.build_choice import BATCH_INVARIANT_DIR as BATCH_INVARIANT_DIR
    from worker.engine.exactness.build_choice import LIB_PATH_ENV as LIB_PATH_ENV
    from worker.engine.exactness.build_choice import SWITCH_ENV as SWITCH_ENV
    from worker.engine.exactness.build_choice import batch_invariant_installed as batch_invariant_installed
    from worker.engine.exactness.build_choice import build_origin as build_origin
    from worker.engine.exactness.build_choice import choose_library as choose_library
    from worker.engine.exactness.build_choice import default_dir as default_dir
    from worker.engine.exactness.build_choice import expects_batch_invariant as expects_batch_invariant
    from worker.engine.exactness.build_choice import load_library as load_library
    from worker.engine.exactness.ggml_switches import TILED_MM_ENV as TILED_MM_ENV
    from worker.engine.exactness.ggml_switches import choose_kernels as choose_kernels
    from worker.engine.exactness.kv_plan import config_attention as config_attention
    from worker.engine.handle import RequestHandle as RequestHandle
    from worker.engine.kv.blocks import BLOCK_TOKENS as BLOCK_TOKENS
    from worker.engine.kv.blocks import BlockIndex as BlockIndex
    from worker.engine.kv.blocks import Removed as Removed
    from worker.engine.kv.blocks import Stored as Stored
    from worker.engine.kv.cell_file import UnusableFile as UnusableFile
    from worker.engine.kv.held_cells import HeldCells as HeldCells
    from worker.engine.media import MEDIA_MARKER as MEDIA_MARKER
    from worker.engine.modes import CacheMode as CacheMode
    from worker.engine.modes import SpecType as SpecType
    from worker.engine.native.backends import ASSISTING_BACKENDS as ASSISTING_BACKENDS
    from worker.engine.native.backends import BuildInfo as BuildInfo
    from worker.engine.native.backends import build_info as build_info
    from worker.engine.native.backends import require_backend as require_backend
    from worker.engine.native.projector import Bitmap as Bitmap
    from worker.engine.native.quantize import quantize_model as quantize_model
    from worker.engine.native.rpc import check_rpc as check_rpc
    from worker.engine.pooling.embeddings import Vector as Vector
    from worker.engine.pooling.rerank import RANK_HEAD as RANK_HEAD
    from worker.engine.requests import NO_ADAPTERS as NO_ADAPTERS
    from worker.engine.requests import AdapterSet as AdapterSet
    from worker.engine.requests import Alternative as Alternative
    from worker.engine.requests import Chat as Chat
    from worker.engine.requests import ChatPrompt as ChatPrompt
    from worker.engine.requests import Event as Event
    from worker.engine.requests import ExtraFile as ExtraFile
    from worker.engine.requests import Finished as Finished
    from worker.engine.requests import FinishReason as FinishReason
    from worker.engine.requests import GrammarTrigger as GrammarTrigger
    from worker.engine.requests import PromptLogprobs as PromptLogprobs
    from worker.engine.requests import Reasoning as Reasoning
    from worker.engine.requests import Request as Request
    from worker.engine.requests import SamplingParams as SamplingParams
    from worker.engine.requests import TokenEvent as TokenEvent
    from worker.engine.requests import TokenLogprob as TokenLogprob
    from worker.engine.serving.facts import Exactness as Exactness
    from worker.engine.serving.facts import ModelFacts as ModelFacts
    from worker.engine.serving.pooled_outputs import PooledOutputs as PooledOutputs
    from worker.engine.serving.prompts import Prompts as Prompts
    from worker.engine.serving.saved_cells import SavedCells as SavedCells
    from worker.engine.serving.saved_cells import SlotFile as SlotFile
    from worker.engine.serving.served_model import ServedModel as ServedModel
    from worker.engine.startup.load import load_model as load_model
    from worker.engine.thread_waits import bound_barrier_spins as bound_barrier_spins

__getattr__ = exports(__name__, {
    # loading, and what it hands back
    "load_model": "startup.load", "ServedModel": "serving.served_model", "Engine": "engine",
    "Prompts": "serving.prompts", "PooledOutputs": "serving.pooled_outputs", "SavedCells": "serving.saved_cells",
    "SlotFile": "serving.saved_cells", "ModelFacts": "serving.facts", "Exactness": "serving.facts",
    "RequestHandle": "handle", "SchedulerStats": "core.scheduler", "ExtraFile": "requests",
    # a chat's answer read back from the model's text
    "Answer": "answer", "Answers": "answer", "PlainText": "answer", "Release": "answer", "ToolCall": "answer",
    # requests and their events: plain data
    "AdapterSet": "requests", "Alternative": "requests", "Chat": "requests", "ChatPrompt": "requests",
    "Event": "requests", "Finished": "requests", "FinishReason": "requests", "GrammarTrigger": "requests",
    "NO_ADAPTERS": "requests",
    "PromptLogprobs": "requests", "Reasoning": "requests", "Request": "requests", "SamplingParams": "requests",
    "TokenEvent": "requests", "TokenLogprob": "requests",
    "MEDIA_MARKER": "media", "Bitmap": "native.projector", "Vector": "pooling.embeddings",
    "RANK_HEAD": "pooling.rerank",
    # reusable cells as blocks: what KV events announce
    "BlockIndex": "kv.blocks", "BLOCK_TOKENS": "kv.blocks", "Stored": "kv.blocks", "Removed": "kv.blocks",
    "HeldCells": "kv.held_cells",
    # what the engine refuses or fails at
    "AdapterCells": "errors", "ChatTemplateError": "errors", "ContextLengthExceeded": "errors",
    "EmbeddingFailed": "errors", "EmptyPrompt": "errors", "ImageUnreadable": "errors", "NoChatTemplate": "errors",
    "NoInfill": "errors",
    "QueueFull": "errors", "UnfitInputs": "errors", "UnusableFile": "kv.cell_file",
    # configuration, and what is chosen before a model loads
    "EngineConfig": "config", "Lora": "config", "DRAFT_MAX": "config", "default_batch_size": "config",
    "default_ubatch_size": "config", "CacheMode": "modes", "SpecType": "modes", "config_attention": "exactness.kv_plan",
    "BATCH_INVARIANT_DIR": "exactness.build_choice", "LIB_PATH_ENV": "exactness.build_choice",
    "batch_invariant_installed": "exactness.build_choice", "build_origin": "exactness.build_choice",
    "choose_library": "exactness.build_choice",
    "default_dir": "exactness.build_choice", "expects_batch_invariant": "exactness.build_choice",
    "load_library": "exactness.build_choice", "SWITCH_ENV": "exactness.build_choice",
    "TILED_MM_ENV": "exactness.ggml_switches", "choose_kernels": "exactness.ggml_switches",
    "ASSISTING_BACKENDS": "native.backends", "BuildInfo": "native.backends", "build_info": "native.backends",
    "require_backend": "native.backends", "check_rpc": "native.rpc", "quantize_model": "native.quantize",
    "bound_barrier_spins": "thread_waits",
    # grammars, checked and converted before a request is queued
    "GrammarSampler": "constraints.grammar", "grammar_problem": "constraints.grammar",
    "SchemaProblem": "constraints.json_schema", "object_grammar": "constraints.json_schema",
    "schema_grammar": "constraints.json_schema",
})
