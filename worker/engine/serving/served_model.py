"""What the engine's door hands the API once a model is loaded: a request's input made ready (prepare), the engine
contract (submit, stats), the model's text side, its pooled outputs, its saved cells and its facts, each an object of
its own."""

from __future__ import annotations

from dataclasses import dataclass, replace

from worker.engine.core.scheduler import SchedulerStats
from worker.engine.engine import Engine
from worker.engine.inputs import GenerationInput, Prepared
from worker.engine.requests import Chat
from worker.engine.serving.facts import ModelFacts
from worker.engine.serving.input_processor import InputProcessor
from worker.engine.serving.pooled_outputs import PooledOutputs
from worker.engine.serving.prompts import Prompts
from worker.engine.serving.saved_cells import SavedCells


@dataclass(frozen=True)
class ServedModel:
    engine: Engine  # submit requests, read busy slots; the engine thread's contract
    prompts: Prompts  # chat template, tokenizer, images, grammars
    pooled: PooledOutputs  # embeddings and rerank scores
    cells: SavedCells  # --kv-dir and slot files
    facts: ModelFacts
    inputs: InputProcessor

    def prepare(self, given: GenerationInput) -> Prepared:
        """A request's input as the engine's requests, one per choice, and its answers' reader: all a dialect calls
        before it submits them (serving/input_processor.py). Raises Refused, naming the request's fields."""
        return self.inputs.prepare(given)

    def chat_text(self, chat: Chat) -> str:
        """The prompt text prepare makes of `chat` (llama-server's /apply-template)."""
        return self.inputs.chat_text(chat)

    def stats(self) -> SchedulerStats:
        """The engine's counters and gauges, with --kv-dir's where it is on."""
        stats = self.engine.stats()
        disk = self.cells.disk
        return replace(stats, disk=disk) if disk is not None else stats

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the engine thread; every open request ends with a CANCELLED Finished."""
        self.engine.shutdown(timeout)
