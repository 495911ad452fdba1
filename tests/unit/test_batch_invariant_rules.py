"""What exact and off modes choose where the batch-invariant build (patches/llama.cpp) is there: its library, with
ggml's GGML_CPU_BATCH_INVARIANT switch set before llama.cpp loads, and flash attention on with f16 K and V cells, the
tiled kernel's types (worker/engine/exactness/build_choice.py, kv_plan.py). Rules only;
tests/model/test_batch_invariant_kernels.py measures what they buy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.engine.config import EngineConfig
from worker.engine.exactness.build_choice import (
    LIB_PATH_ENV,
    MTMD_PATH_ENV,
    SWITCH_ENV,
    default_dir,
    expects_batch_invariant,
)
from worker.engine.exactness.kv_plan import Attention, plan_attention
from worker.engine.modes import CacheMode

EXACT, OFF, FAST = CacheMode.EXACT, CacheMode.OFF, CacheMode.FAST
INVARIANT = Attention("on", "f16", "f16", pinned=True)


@pytest.mark.parametrize(("backend", "rpc", "mode", "flash", "k", "v", "expected"), [
    ("cpu", False, EXACT, "auto", None, None, INVARIANT),
    ("cpu", False, OFF, "auto", None, None, INVARIANT),  # off computes as exact does: their texts are compared
    ("cpu", False, EXACT, "on", "f16", "f16", INVARIANT),  # refused on the fallback: accepted here
    ("cpu", False, EXACT, "on", "q8_0", "q8_0", Attention("on", "q8_0", "q8_0", pinned=True)),  # the per-row kernel
    ("cpu", False, EXACT, "off", None, None, Attention("off", "f16", "f16", pinned=False)),
    ("cuda", False, EXACT, "auto", None, None, Attention("off", "f16", "f16", pinned=False)),  # not this build's
    ("cpu", False, FAST, "auto", None, None, Attention("auto", "f16", "f16", pinned=False)),
])
def test_attention_on_the_batch_invariant_build(backend, rpc, mode, flash, k, v, expected):
    assert plan_attention(backend, rpc, mode, flash, k, v, head_size=64, batch_invariant=True) == expected


def test_the_build_is_expected_for_exact_and_off_on_the_cpu_alone(tmp_path, monkeypatch):
    monkeypatch.delenv(LIB_PATH_ENV, raising=False)
    (tmp_path / "libllama.so").touch()
    assert expects_batch_invariant(EngineConfig(), tmp_path)
    assert expects_batch_invariant(EngineConfig(prefix_cache=OFF), tmp_path)
    for config in (EngineConfig(prefix_cache=FAST), EngineConfig(backend="cuda"), EngineConfig(rpc_servers=("h:1",))):
        assert not expects_batch_invariant(config, tmp_path)
    assert not expects_batch_invariant(EngineConfig(), tmp_path / "absent")
    # A projector (--mmproj, a path or an hf: name fetched later) needs the build's libmtmd.
    assert not expects_batch_invariant(EngineConfig(), tmp_path, projector=True)
    (tmp_path / "libmtmd.so").touch()
    assert expects_batch_invariant(EngineConfig(), tmp_path, projector=True)
    monkeypatch.setenv(LIB_PATH_ENV, str(tmp_path))  # the user's library wins, whatever it holds
    assert not expects_batch_invariant(EngineConfig(), tmp_path)


def test_loading_it_sets_the_switch_before_llama_cpp_loads(tmp_path):
    """ggml reads GGML_CPU_BATCH_INVARIANT once, when its CPU backend initializes, which importing llama_cpp may
    do: load_library sets it with LLAMA_CPP_LIB_PATH, in a process that has not imported llama_cpp yet."""
    code = ("import json, os, sys; from worker.engine.exactness.build_choice import Library, load_library; "
            "load_library(Library('batch-invariant', sys.argv[1], 'why')); "
            f"print(json.dumps([os.environ.get('{LIB_PATH_ENV}'), os.environ.get('{SWITCH_ENV}')]))")
    env = {key: value for key, value in os.environ.items() if key not in (LIB_PATH_ENV, SWITCH_ENV)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True,
                         env=env, cwd=Path(__file__).parents[2]).stdout
    assert json.loads(out) == [str(tmp_path), "1"]


def test_libmtmd_follows_a_library_loaded_before_the_model_was_known(tmp_path):
    """The backend check at startup imports llama_cpp under the user's LLAMA_CPP_LIB_PATH before load_library runs:
    the projector's libmtmd must still come from that build, not from llama-cpp-python's lib/ (which a GPU bundle's
    Python side does not even have)."""
    for library in default_dir().iterdir():
        (tmp_path / library.name).symlink_to(library)
    code = ("import sys, llama_cpp; from worker.engine.exactness.build_choice import Library, load_library; "
            "load_library(Library('LLAMA_CPP_LIB_PATH', sys.argv[1], 'why')); "
            "from llama_cpp import mtmd_cpp; print(mtmd_cpp._libmtmd_base_path)")
    env = {key: value for key, value in os.environ.items() if key not in (LIB_PATH_ENV, SWITCH_ENV, MTMD_PATH_ENV)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True,
                         env={**env, LIB_PATH_ENV: str(tmp_path)}, cwd=Path(__file__).parents[2]).stdout
    assert out.strip() == str(tmp_path)
