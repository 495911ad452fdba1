"""The engine's modes: the enums EngineConfig's fields take (config.py), beside it so that every subsystem that
branches on a mode imports it from here and not from another subsystem's policy."""

from __future__ import annotations

import enum


class CacheMode(str, enum.Enum):
    """What the prefix cache may reuse (kv/prefix_cache.py says what each mode means)."""

    EXACT = "exact"
    FAST = "fast"
    OFF = "off"


class SpecType(str, enum.Enum):
    """Where speculative decoding's drafts come from (speculative/)."""

    # Prompt lookup where drafts cannot change the text (EngineConfig.drafting), none elsewhere: the default.
    AUTO = "auto"
    NONE = "none"
    NGRAM = "ngram"  # prompt lookup: speculative/prompt_lookup.py
    DRAFT = "draft"  # a smaller model with the same vocabulary: speculative/draft_model.py
