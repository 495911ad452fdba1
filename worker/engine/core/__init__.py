"""The step loop: sequences and their states, the scheduler that decides each step, the runner that carries it out."""
