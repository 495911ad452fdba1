"""The step loop: the scheduler that decides each step, the runner that carries it out, what a sampled token adds
to the answer, and which slot and adapter set a step serves."""
