"""SafeTensors (Hugging Face) folders -> GGUF with gguf-py, no torch; cached; optionally quantized."""

from worker.source.convert.architectures import ARCHITECTURES
from worker.source.convert.cached import Conversion, converted_model
from worker.source.convert.folder import is_hf_folder
from worker.source.convert.progress import Progress, ProgressReport
from worker.source.convert.types import OUTPUT_TYPES, QUANT_TYPES

__all__ = ["ARCHITECTURES", "Conversion", "OUTPUT_TYPES", "Progress", "ProgressReport", "QUANT_TYPES",
           "converted_model", "is_hf_folder"]
