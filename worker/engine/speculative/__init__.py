"""Speculative decoding: the rule for how many drafted tokens pay, the step's drafts, and the proposers
(prompt lookup, a draft model)."""
