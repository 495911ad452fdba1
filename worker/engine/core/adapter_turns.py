"""Which LoRA adapter set the context serves, step by step, when running requests want different ones. llama.cpp
applies adapters to a whole context and rebuilds its compute schedule after a switch, so rather than switch every
step the sets take turns (docs/models.md, "LoRA adapters")."""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.engine.requests import AdapterSet

# A switch's share of a turn, at most. 0.1 on the test model, whose switches took ~35-60 ms on 2 cores
# (bench/probes/loraswitch.py): turns of 0.35-0.6 s, within which a stream of another set waits.
SWITCH_SHARE = 0.1
# Steps a turn runs at least, so that each set's calls are also timed without a switch before them (what a switch's
# cost is measured against: Pace.decode_call_s).
MIN_TURN_STEPS = 2


@dataclass
class Turns:
    served: dict[AdapterSet, float] = field(default_factory=dict)  # when each set's last turn ended
    since: float = 0.0  # when the current set's turn began
    steps: int = 0  # the steps it has run in its turn

    def choose(self, wanted: list[AdapterSet], current: AdapterSet, switch_s: float, now: float) -> AdapterSet:
        """The set the next step runs under: `wanted` are the sets of the requests with work (oldest first), the
        context holds `current`, and a switch costs `switch_s` (Pace.switch_s, measured on the switches made).

        The context keeps its set while requests under it have work and, when other sets wait, for a turn of at
        least 1/SWITCH_SHARE times a switch's cost and MIN_TURN_STEPS steps; then the set that has waited longest
        goes next. No set waits more than one turn of each other set; one set (or none) never switches."""
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
