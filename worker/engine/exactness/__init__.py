"""What keeps a row's numerics independent of its batch: the llama.cpp build loaded, ggml's kernel switches,
the KV cell types and flash attention, the tensor types they are chosen from, and the load-time check that
measures the result."""
