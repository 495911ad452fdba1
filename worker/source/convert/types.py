"""The output types a conversion can write, the ones llama.cpp's quantizer can make from it, and a Conversion: names
only, so the CLI and serve import neither gguf (write.py looks its enums up by name) nor llama.cpp (handed in).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from worker.progress_callback import ProgressFn

# Makes the GGUF at the second path from the first, quantized to a QUANT_TYPES name: llama.cpp's quantizer, which
# the caller passes in (the engine's quantize_model), as the engine is the one package that loads llama.cpp.
Quantizer = Callable[[Path, Path, str, ProgressFn | None], None]

# --convert-type: what gguf-py writes for every 2-D weight (1-D tensors and norms stay F32, as
# llama.cpp's converter keeps them): GGMLQuantizationType[NAME] in a file of LlamaFileType.MOSTLY_<NAME>.
OUTPUT_TYPES: tuple[str, ...] = ("f16", "bf16", "q8_0")

# --quantize: llama_model_quantize's file types (LLAMA_FTYPE_MOSTLY_<NAME>) that need no importance matrix.
QUANT_TYPES: tuple[str, ...] = (
    "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l",
    "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k", "iq4_nl", "iq4_xs",
)


@dataclass(frozen=True)
class Conversion:
    out_type: str = "f16"  # one of OUTPUT_TYPES
    quantize: str | None = None  # one of QUANT_TYPES, applied to the converted file
    quantizer: Quantizer | None = None  # what applies it; needed with quantize
