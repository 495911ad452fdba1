"""SafeTensors (Hugging Face) folders -> GGUF with gguf-py, no torch; cached; optionally quantized.

Names load on first use (worker.lazy): the CLI reads the type names in .types without numpy and gguf.
"""

from typing import TYPE_CHECKING

from worker.lazy import exports

if TYPE_CHECKING:  # the same names, as type checkers see them (through __getattr__ they would be Any)
    from worker.source.convert.architectures import ARCHITECTURES as ARCHITECTURES
    from worker.source.convert.cached import converted_model as converted_model
    from worker.source.convert.folder import is_hf_folder as is_hf_folder
    from worker.source.convert.progress_report import ProgressReport as ProgressReport
    from worker.source.convert.types import OUTPUT_TYPES as OUTPUT_TYPES
    from worker.source.convert.types import QUANT_TYPES as QUANT_TYPES
    from worker.source.convert.types import Conversion as Conversion
    from worker.source.convert.types import Quantizer as Quantizer

__getattr__ = exports(__name__, {
    "ARCHITECTURES": "architectures", "Conversion": "types", "converted_model": "cached",
    "is_hf_folder": "folder", "ProgressReport": "progress_report", "OUTPUT_TYPES": "types", "QUANT_TYPES": "types",
    "Quantizer": "types",
})
