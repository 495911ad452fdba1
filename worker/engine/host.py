"""The engine's door to the process around it (the CLI, the lifecycle, settings, benchmarks): loading a model, its
config and what is chosen before it loads (the llama.cpp build, the kernels, the backends), quantizing, RPC, the
plain data of KV events, and the grammar sampler benchmarks time. The HTTP API uses the other door
(worker/engine/__init__.py) and not this one (import-linter holds both).
"""

from typing import TYPE_CHECKING

from worker.lazy import exports

if TYPE_CHECKING:  # the same names, as type checkers see them (through __getattr__ they would be Any)
    from worker.engine.config import DRAFT_MAX as DRAFT_MAX
    from worker.engine.config import EngineConfig as EngineConfig
    from worker.engine.config import Lora as Lora
    from worker.engine.config import default_batch_size as default_batch_size
    from worker.engine.config import default_ubatch_size as default_ubatch_size
    from worker.engine.constraints.grammar import GrammarSampler as GrammarSampler
    from worker.engine.constraints.grammar import grammar_problem as grammar_problem
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
    from worker.engine.kv.blocks import BLOCK_TOKENS as BLOCK_TOKENS
    from worker.engine.kv.blocks import BlockIndex as BlockIndex
    from worker.engine.kv.blocks import Removed as Removed
    from worker.engine.kv.blocks import Stored as Stored
    from worker.engine.kv.held_cells import HeldCells as HeldCells
    from worker.engine.modes import CacheMode as CacheMode
    from worker.engine.modes import SpecType as SpecType
    from worker.engine.native.backends import ASSISTING_BACKENDS as ASSISTING_BACKENDS
    from worker.engine.native.backends import BuildInfo as BuildInfo
    from worker.engine.native.backends import build_info as build_info
    from worker.engine.native.backends import require_backend as require_backend
    from worker.engine.native.quantize import quantize_model as quantize_model
    from worker.engine.native.rpc import check_rpc as check_rpc
    from worker.engine.requests import AdapterSet as AdapterSet
    from worker.engine.serving.served_model import ServedModel as ServedModel
    from worker.engine.startup.load import load_model as load_model
    from worker.engine.thread_waits import bound_barrier_spins as bound_barrier_spins

__getattr__ = exports("worker.engine", {
    # loading a model, and what it hands back
    "load_model": "startup.load", "ServedModel": "serving.served_model",
    # configuration, and what is chosen before a model loads
    "EngineConfig": "config", "Lora": "config", "DRAFT_MAX": "config", "default_batch_size": "config",
    "default_ubatch_size": "config", "CacheMode": "modes", "SpecType": "modes", "config_attention": "exactness.kv_plan",
    "BATCH_INVARIANT_DIR": "exactness.build_choice", "LIB_PATH_ENV": "exactness.build_choice",
    "batch_invariant_installed": "exactness.build_choice", "build_origin": "exactness.build_choice",
    "choose_library": "exactness.build_choice", "default_dir": "exactness.build_choice",
    "expects_batch_invariant": "exactness.build_choice", "load_library": "exactness.build_choice",
    "SWITCH_ENV": "exactness.build_choice", "TILED_MM_ENV": "exactness.ggml_switches",
    "choose_kernels": "exactness.ggml_switches", "bound_barrier_spins": "thread_waits",
    # backends, quantizing, RPC servers
    "ASSISTING_BACKENDS": "native.backends", "BuildInfo": "native.backends", "build_info": "native.backends",
    "require_backend": "native.backends", "check_rpc": "native.rpc", "quantize_model": "native.quantize",
    # reusable cells as blocks: what KV events announce, under which adapters
    "BlockIndex": "kv.blocks", "BLOCK_TOKENS": "kv.blocks", "Stored": "kv.blocks", "Removed": "kv.blocks",
    "HeldCells": "kv.held_cells", "AdapterSet": "requests",
    # grammars as the engine builds them (bench/structured.py times them)
    "GrammarSampler": "constraints.grammar", "grammar_problem": "constraints.grammar",
})
