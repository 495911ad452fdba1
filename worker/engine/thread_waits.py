"""How long llama.cpp's CPU threads spin at a barrier before they sleep, set for the process before the library loads.

Both builds the worker loads (llama-cpp-python's and the batch-invariant one) run ggml's CPU threads under OpenMP,
which meet at a barrier after every graph node and wait there by spinning: libgomp spins 300,000 times before it
sleeps, longer than a scheduler tick. Where the cores are oversubscribed (other workers, a build, a neighbour) the
kernel may queue two of a decode's threads on one core; the one at the barrier then spins out its whole tick while
the one it waits for cannot run, and every barrier costs a tick: a one-row pass of the test model took 2,970 ms
instead of 10 (bench/probes/busy_host.py). Capped at BARRIER_SPINS, a waiting thread sleeps and lets it run: 32 ms
there, and the same 9-10 ms on an idle machine, where a barrier's wait is far shorter than the cap.
"""

from __future__ import annotations

import os

SPIN_COUNT_ENV = "GOMP_SPINCOUNT"  # read once, when libgomp loads with ggml's CPU backend
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"  # the user's own choice of waiting, which this leaves alone
# Spins before a waiting thread sleeps (bench/probes/busy_host.py: 300 and 1,000 bound the tick-long waits; 3,000
# still cost 66 ms a pass and 30,000 440 ms; none of them slowed an idle machine's passes measurably).
BARRIER_SPINS = 1000


def bound_barrier_spins() -> None:
    """Cap libgomp's spinning for this process and what it starts, unless the user chose how its threads wait.
    Before llama_cpp is first imported: libgomp reads the setting once, when it loads."""
    if SPIN_COUNT_ENV not in os.environ and WAIT_POLICY_ENV not in os.environ:
        os.environ[SPIN_COUNT_ENV] = str(BARRIER_SPINS)
