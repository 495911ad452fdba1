"""A row's parts from its logits to its text: the sampler chain, the seeded draw, log probabilities, streamable
text with stop strings held back, and a thinking model's reasoning split."""
