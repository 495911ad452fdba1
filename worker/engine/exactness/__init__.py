"""What keeps a row's numerics independent of its batch, chosen before llama.cpp loads: the build, ggml's kernel
switches, the KV cell types and flash attention, and the tensor types they are chosen from. The load-time check
that measures the result is startup's (startup/load_check.py)."""
