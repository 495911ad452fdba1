"""SafeTensors (Hugging Face) folders -> GGUF with gguf-py, no torch; cached; optionally quantized.

Names load on first use (worker.lazy): the CLI reads the type names in .types without numpy and gguf.
"""

from worker.lazy import exports

__getattr__ = exports(__name__, {
    "ARCHITECTURES": "architectures", "Conversion": "types", "converted_model": "cached",
    "is_hf_folder": "folder", "ProgressReport": "progress", "OUTPUT_TYPES": "types", "QUANT_TYPES": "types",
})
