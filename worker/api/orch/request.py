"""The pool-manager contract's execute request -> a generation, with every problem listed in the contract's
terms. Sampling fields are read by their table (worker/fields.py): the contract's rows, narrower than OpenAI's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from worker.api.generation_fields import Generation, read_sampling
from worker.api.problems import Reader
from worker.api.structured import execute_grammar
from worker.engine import SamplingParams
from worker.fields import EXECUTE_SAMPLING

EXECUTE_STOP_STRINGS = 4  # the pool-manager contract's own, narrower limits
EXECUTE_STOP_BYTES = 100


@dataclass(frozen=True)
class ExecuteRequest:
    job_id: str
    prompt: str
    generation: Generation


def parse_execute(body: dict[str, Any], defaults: SamplingParams = SamplingParams()) -> ExecuteRequest:
    """The pool-manager contract's execute request over the model's sampling defaults; unknown fields are ignored."""
    r = Reader(body)
    job_id = r.string("job_id", required=True, min_length=1)
    prompt = r.string("prompt", required=True, min_length=1, max_length=32768)
    max_tokens = r.number("max_tokens", required=True, low=1, high=2048, integer=True)
    sampling = replace(read_sampling(r, EXECUTE_SAMPLING, defaults), grammar=execute_grammar(r))
    stop = r.stop_strings("stop", max_items=EXECUTE_STOP_STRINGS, max_bytes=EXECUTE_STOP_BYTES, allow_single=False)
    r.done()
    return ExecuteRequest(job_id, prompt, Generation(max_tokens, sampling, stop, stream=True))
