"""Which LoRA adapter set the context serves, step by step, when running requests want different ones.

llama.cpp applies adapters to a whole context (native/adapters.py), so a step's calls all run under one set, and
changing it makes the next llama_decode rebuild llama.cpp's compute schedule: ~35-60 ms on the test model on 2 cores
(bench/probes/loraswitch.py), more than a step of 8 decode rows (~25 ms). Decoding every set every step would pay
that once a step and more than double a step's time. So the sets take turns: the context keeps its set while
requests under it have work, and when requests under other sets are waiting, for one turn of at least
SWITCH_SHARE^-1 times what a switch costs (Pace.switch_s, measured on the switches made), so switches take at most
about SWITCH_SHARE of the time, and of at least MIN_TURN_STEPS steps, so that each set's calls are also timed
without a switch before them (what a switch's cost is measured against); then the set that has waited longest
goes next. No set waits more than one turn of
each other set. One set (or none: the base model alone) never switches and never waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.engine.requests import AdapterSet

# A switch's share of a turn, at most. 0.1 on the test model: turns of 0.35-0.6 s, within which a stream of another
# set waits (docs/models.md, "LoRA adapters").
SWITCH_SHARE = 0.1
MIN_TURN_STEPS = 2


@dataclass
class Turns:
    served: dict[AdapterSet, float] = field(default_factory=dict)  # when each set's last turn ended
    since: float = 0.0  # when the current set's turn began
    steps: int = 0  # the steps it has run in its turn

    def choose(self, wanted: list[AdapterSet], current: AdapterSet, switch_s: float, now: float) -> AdapterSet:
        """The set the next step runs under: `wanted` are the sets of the requests with work (oldest first), the
        context holds `current`, and a switch costs `switch_s`."""
        if not wanted:
            return current
        if current in wanted and (len(wanted) == 1 or self.steps < MIN_TURN_STEPS
                                  or now - self.since < switch_s / SWITCH_SHARE):
            self.steps += 1
            return current
        others = [adapters for adapters in wanted if adapters != current]
        chosen = min(others, key=lambda adapters: self.served.get(adapters, 0.0))
        self.served = {adapters: self.served.get(adapters, 0.0) for adapters in wanted}
        self.served[current] = now
        self.since, self.steps = now, 1
        return chosen
