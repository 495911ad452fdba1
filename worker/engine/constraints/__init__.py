"""Grammars a request samples under: GBNF in llama.cpp, JSON Schema converted to GBNF, lazy grammars that wake
on a trigger."""
