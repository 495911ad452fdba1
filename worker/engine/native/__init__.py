"""The llama.cpp layer: the model and its context, ggml's devices and backends, rpc servers, llama.cpp's log
lines, the quantizer."""
