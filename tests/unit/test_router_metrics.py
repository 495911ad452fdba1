"""/metrics under the names cluster routers and llama-server's dashboards read, from the engine's own counters:
vLLM's gauges (the Gateway API Inference Extension's model-server protocol, llm-d), llama-server's counters."""

from __future__ import annotations

import time

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from worker.api.metrics import Metrics
from worker.engine import Finished, FinishReason, SchedulerStats

STATS = SchedulerStats(running=3, waiting=2, slots=4, kv_cells_used=1024, kv_cells_total=8192,
                       steps=57, running_adapters=(0, 1), waiting_adapters=(1,))


def _samples(metrics: Metrics) -> dict[str, list]:
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def test_vllm_gauges_are_the_engines_counts_and_kv_use_a_fraction():
    samples = _samples(Metrics(lambda: STATS, lambda: ["french", "legal"]))
    value = lambda name: samples[name][0].value  # noqa: E731
    assert (value("vllm:num_requests_running"), value("vllm:num_requests_waiting")) == (3, 2)
    assert value("vllm:kv_cache_usage_perc") == 0.125 == value("llm_worker_kv_cache_usage_ratio")
    [info] = samples["vllm:lora_requests_info"]
    assert info.labels == {"max_lora": "2", "running_lora_adapters": "french,legal", "waiting_lora_adapters": "legal"}
    assert abs(info.value - time.time()) < 60
    assert (value("llamacpp:requests_processing"), value("llamacpp:requests_deferred")) == (3, 2)
    assert value("llamacpp:n_decode_total") == 57


def test_no_adapters_no_lora_info_and_nothing_while_loading():
    assert "vllm:lora_requests_info" not in _samples(Metrics(lambda: STATS))
    assert "vllm:num_requests_running" not in _samples(Metrics(lambda: None))


def test_llama_servers_counters_count_what_requests_did():
    metrics = Metrics(lambda: STATS)
    metrics.finished(Finished(FinishReason.EOS, prompt_tokens=100, completion_tokens=20, cached_tokens=64,
                              draft_tokens=9, draft_accepted=5), 1.0)
    samples = _samples(metrics)
    counts = {name: samples[f"llamacpp:{name}_total"][0].value for name in (
        "prompt_tokens", "prompt_tokens_cached", "tokens_predicted", "spec_decode_num_draft_tokens",
        "spec_decode_num_accepted_tokens")}
    assert counts == {"prompt_tokens": 36, "prompt_tokens_cached": 64, "tokens_predicted": 20,
                      "spec_decode_num_draft_tokens": 9, "spec_decode_num_accepted_tokens": 5}
