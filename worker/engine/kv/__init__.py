"""KV cells kept for reuse: what each slot still holds (the prefix cache) and what slots gave up (host memory)."""
