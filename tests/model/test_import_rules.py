"""Small rules the code keeps: what serving a local model imports, and when it loads llama_cpp."""

from __future__ import annotations

import importlib.metadata

from tests.helpers import run_python


def test_serving_a_local_gguf_imports_neither_the_hub_client_nor_gguf(model_path):
    """They cost ~12 MB of RSS; only a hub download or a SafeTensors conversion loads them."""
    run = run_python(
        "import sys\n"
        "import worker.lifecycle.run\n"
        "from worker.source import load_registry, resolve_model\n"
        f"for name in (None, {str(model_path)!r}):  # the registry's package, already downloaded; the file itself\n"
        "    resolve_model(name, load_registry())\n"
        "print(sorted(m for m in ('gguf', 'huggingface_hub', 'yaml') if m in sys.modules))"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "[]"


def test_serving_loads_llama_cpp_only_once_the_library_is_chosen(model_path):
    """The routes, settings and model resolution come first; which libllama loads depends on the model
    (worker/engine/exactness/build_choice.py), and llama_cpp loads it on import."""
    run = run_python(
        "import sys\n"
        "from pathlib import Path\n"
        "import worker.lifecycle.run\n"
        "import worker.api.app\n"  # every route, and the engine's names each imports
        "from worker.cli import main\n"
        "from worker.engine import GenerationInput, Prepared, QueueFull, Refused, SamplingParams, SchedulerStats\n"
        "from worker.engine.host import CacheMode, EngineConfig, choose_library\n"
        f"choose_library(Path({str(model_path)!r}), EngineConfig())\n"
        "print('llama_cpp' in sys.modules)"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "False"


def test_serving_loads_llama_cpps_c_api_without_its_high_level_class():
    """llama_cpp's __init__ also imports its Llama class, with jinja2 and diskcache (sqlite3): 4-5 MB of RSS the worker
    never uses (worker/lazy.py). Its C API, __version__ and submodules come without them; any other name loads the
    __init__ whole."""
    run = run_python(
        "import sys\n"
        "from worker.lazy import package_without_init\n"
        "package_without_init('llama_cpp', 'llama_cpp')\n"
        "import llama_cpp\n"
        "from llama_cpp import mtmd_cpp\n"
        "from llama_cpp.llama_grammar import SchemaConverter\n"
        "left_out = lambda: sorted(m for m in ('jinja2', 'diskcache', 'llama_cpp.llama') if m in sys.modules)\n"
        "print(callable(llama_cpp.llama_decode), llama_cpp.__version__, left_out())\n"
        "llama_cpp.Llama\n"
        "print(left_out())"
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[-2] == f"True {importlib.metadata.version('llama_cpp_python')} []"
    assert lines[-1] == "['diskcache', 'jinja2', 'llama_cpp.llama']"
