"""Prometheus metrics: latency histograms, token and request counters, engine gauges. /metrics serves
`Metrics.registry` through prometheus-client's own aiohttp handler (api/app.py), OpenMetrics and gzip included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from worker.engine import Finished, SchedulerStats

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1)


class _EngineGauges(Collector):
    """Read the engine's state at scrape time: the engine keeps only its own counters, nothing for metrics.

    `adapters`: the LoRA adapters' names by id (--lora order), as requests name them in `model`."""

    def __init__(self, stats: Callable[[], SchedulerStats | None], adapters: Callable[[], list[str]]) -> None:
        self._stats = stats
        self._adapters = adapters

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._stats()
        if stats is None:  # still loading
            return
        yield from _router_gauges(stats, self._adapters())
        yield GaugeMetricFamily("llm_worker_requests_running", "Requests holding a sequence slot.", stats.running)
        yield GaugeMetricFamily("llm_worker_requests_waiting", "Requests queued for a slot.", stats.waiting)
        yield GaugeMetricFamily("llm_worker_slots", "Sequence slots (--parallel).", stats.slots)
        yield GaugeMetricFamily("llm_worker_kv_cache_usage_ratio", "KV cells in use / KV cells.",
                                stats.kv_cells_used / stats.kv_cells_total if stats.kv_cells_total else 0.0)
        yield GaugeMetricFamily("llm_worker_kv_cache_cached_ratio",
                                "KV cells kept in free slots for the prefix cache / KV cells.",
                                stats.kv_cells_cached / stats.kv_cells_total if stats.kv_cells_total else 0.0)
        yield GaugeMetricFamily("llm_worker_cache_ram_bytes",
                                "Host memory holding KV cells pushed out of slots by other prompts (--cache-ram).",
                                stats.cache_ram_bytes)
        yield GaugeMetricFamily("llm_worker_cache_ram_limit_bytes", "The bound on that host memory (--cache-ram).",
                                stats.cache_ram_limit_bytes)
        if (disk := stats.disk) is not None:
            yield GaugeMetricFamily("llm_worker_kv_dir_restored_entries",
                                    "Entries of KV cells read from --kv-dir into host memory at start.",
                                    disk.restored_entries)
            yield GaugeMetricFamily("llm_worker_kv_dir_restored_tokens", "Cells of those entries.",
                                    disk.restored_tokens)
            yield GaugeMetricFamily("llm_worker_kv_dir_skipped_entries", "Files in --kv-dir skipped at start "
                                    "(truncated, corrupt, or of another model, build or cache setting).",
                                    disk.skipped_entries)
            yield CounterMetricFamily("llm_worker_kv_dir_written_entries", "Entries written to --kv-dir.",
                                      disk.written_entries)
            yield GaugeMetricFamily("llm_worker_kv_dir_bytes", "Bytes of the files in --kv-dir (--kv-dir-size bounds "
                                    "them).", disk.bytes_held)
        yield CounterMetricFamily("llm_worker_engine_steps", "Engine steps (one llama_decode for the decode rows, "
                                  "one per prefill chunk).", stats.steps)
        yield CounterMetricFamily("llm_worker_engine_step_seconds", "Engine thread time in steps, idle excluded.",
                                  stats.step_s)
        yield CounterMetricFamily("llm_worker_engine_decode_seconds", "Of that, time inside llama_decode.",
                                  stats.decode_s)
        yield CounterMetricFamily("llm_worker_engine_adapter_switches", "Times the context changed its LoRA adapter "
                                  "set between calls (each rebuilds llama.cpp's schedule).", stats.adapter_switches)


def _router_gauges(stats: SchedulerStats, adapters: list[str]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The same quantities under the names cluster routers read: vLLM's, which the Gateway API Inference
    Extension's model-server protocol and llm-d's endpoint picker take (kv_cache_usage_perc is a fraction, 0-1,
    as vLLM's is), and llama-server's, for dashboards built for it (docs/operations.md, "Metrics")."""
    usage = stats.kv_cells_used / stats.kv_cells_total if stats.kv_cells_total else 0.0
    yield GaugeMetricFamily("vllm:num_requests_running", "Requests holding a sequence slot.", stats.running)
    yield GaugeMetricFamily("vllm:num_requests_waiting", "Requests queued for a slot.", stats.waiting)
    yield GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV cells held by running requests, a fraction of all.", usage)
    if adapters:  # vLLM's convention: the labels say which adapters, the value when this was read
        info = GaugeMetricFamily("vllm:lora_requests_info", "LoRA adapters in use by running and waiting requests.",
                                 labels=["max_lora", "running_lora_adapters", "waiting_lora_adapters"])
        named = lambda ids: ",".join(adapters[i] for i in ids if i < len(adapters))  # noqa: E731
        info.add_metric([str(len(adapters)), named(stats.running_adapters), named(stats.waiting_adapters)],
                        time.time())
        yield info
    yield GaugeMetricFamily("llamacpp:requests_processing", "Requests holding a sequence slot.", stats.running)
    yield GaugeMetricFamily("llamacpp:requests_deferred", "Requests queued for a slot.", stats.waiting)
    # llama-server counts llama_decode calls; a step here may make several (decode rows, prefill chunks).
    yield CounterMetricFamily("llamacpp:n_decode", "Engine steps.", stats.steps)


class Metrics:
    def __init__(self, stats: Callable[[], SchedulerStats | None],
                 adapters: Callable[[], list[str]] = list) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram("llm_worker_time_to_first_token_seconds", "Arrival to first generated token.",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.inter_token = Histogram("llm_worker_inter_token_latency_seconds",
                                     "Gap between consecutive streamed pieces, as the API hands them out.",
                                     buckets=_TOKEN_GAP_BUCKETS, registry=r)
        self.e2e = Histogram("llm_worker_request_duration_seconds", "Arrival to the last event.",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.queue = Histogram("llm_worker_queue_time_seconds", "Arrival to admission into a slot.",
                               buckets=_LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("llm_worker_prompt_tokens", "Prompt tokens of finished requests.", registry=r)
        self.prompt_tokens_cached = Counter("llm_worker_prompt_tokens_cached",
                                            "Of those, tokens whose KV the prefix cache supplied.", registry=r)
        self.generated_tokens = Counter("llm_worker_generated_tokens", "Tokens generated.", registry=r)
        self.draft_tokens = Counter("llm_worker_draft_tokens", "Drafted tokens verified (speculative decoding).",
                                    registry=r)
        self.draft_accepted = Counter("llm_worker_draft_accepted_tokens",
                                      "Of those, accepted: generated tokens that took no step of their own.",
                                      registry=r)
        self.requests = Counter("llm_worker_requests", "Finished requests by finish reason.",
                                ["finish_reason"], registry=r)
        # llama-server's counters, for dashboards built for it: the same counts under its names (_total appended).
        self.llamacpp = {name: Counter(f"llamacpp:{name}", text, registry=r) for name, text in (
            ("prompt_tokens", "Prompt tokens prefilled, excluding cached ones."),
            ("prompt_tokens_cached", "Prompt tokens reused from the cache."),
            ("tokens_predicted", "Tokens generated."),
            ("spec_decode_num_draft_tokens", "Speculative: drafted tokens verified."),
            ("spec_decode_num_accepted_tokens", "Speculative: drafted tokens accepted."))}
        r.register(_EngineGauges(stats, adapters))

    def finished(self, finished: Finished | None, e2e_s: float) -> None:
        self.e2e.observe(e2e_s)
        if finished is None:
            self.requests.labels("client_disconnected").inc()
            return
        self.requests.labels(finished.reason.value).inc()
        self.prompt_tokens.inc(finished.prompt_tokens)
        self.prompt_tokens_cached.inc(finished.cached_tokens)
        self.generated_tokens.inc(finished.completion_tokens)
        self.draft_tokens.inc(finished.draft_tokens)
        self.draft_accepted.inc(finished.draft_accepted)
        for name, count in (("prompt_tokens", finished.prompt_tokens - finished.cached_tokens),
                            ("prompt_tokens_cached", finished.cached_tokens),
                            ("tokens_predicted", finished.completion_tokens),
                            ("spec_decode_num_draft_tokens", finished.draft_tokens),
                            ("spec_decode_num_accepted_tokens", finished.draft_accepted)):
            self.llamacpp[name].inc(count)
        self.queue.observe(finished.queue_s)
        if finished.completion_tokens:
            self.ttft.observe(finished.ttft_s)
