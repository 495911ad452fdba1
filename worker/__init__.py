"""llm-worker: serve one GGUF model through llama.cpp over HTTP."""

__version__ = "0.1.0"
