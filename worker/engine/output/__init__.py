"""From a step's logits to what a request receives: the sampler chain, the seeded draw, log probabilities,
streamable text with stop strings held back, and a thinking model's reasoning split."""
