"""The model the slot probes time (slotruns.py, mergedstep.py): loaded as the worker would load it, under the
library it would choose, with every slot already holding prefilled cells."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench.config import find_model
from worker.engine.config import EngineConfig
from worker.engine.exactness.build_choice import choose_library, load_library
from worker.logs import configure

if TYPE_CHECKING:
    from bench.probes.rows import RowDecoder
    from worker.engine.native.model import LlamaModel


def filled_slots(slots: int, cells: int) -> tuple[str, LlamaModel, RowDecoder]:
    """The model argv[1] names (else the test model), `slots` slots of 1,024 cells each holding `cells`: its
    description for the report, the model and its row decoder."""
    configure("console", "warning")  # llama.cpp's load log would bury the results
    path = find_model(sys.argv[1] if len(sys.argv) > 1 else None)
    config = EngineConfig(parallel=slots, ctx_size=slots * 1024)
    library = load_library(choose_library(path, config))
    from bench.probes.rows import RowDecoder  # llama_cpp, with the library chosen
    from worker.engine.native.model import LlamaModel

    model = LlamaModel(path, config)
    rows = RowDecoder(model)
    rows.fill(range(slots), cells)
    return f"{Path(path).name}, {library.build} build, {slots} slots of {cells} cells", model, rows
