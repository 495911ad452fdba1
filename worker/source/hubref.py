"""hf: model names, parsed without huggingface_hub: serving a local file never loads the hub client."""

from __future__ import annotations

from worker.source.sources import HubSource
from worker.worker_error import WorkerError

HUB_PREFIX = "hf:"


def parse_hub_ref(value: str, quant: str | None = None) -> HubSource:
    """hf:owner/repo, hf:owner/repo/file.gguf (or the pool manager's hf:owner/repo:file.gguf), each with @revision."""
    body, at, revision = value.removeprefix(HUB_PREFIX).partition("@")
    repo_path, _, colon_file = body.partition(":")
    owner, _, rest = repo_path.partition("/")
    name, _, file = rest.partition("/")
    if not owner or not name or (at and not revision) or (file and colon_file):
        raise WorkerError(f"{value!r} is not a hub model name; write hf:owner/repo, "
                          "hf:owner/repo/file.gguf or hf:owner/repo@revision")
    return HubSource(f"{owner}/{name}", file or colon_file or None, quant, revision or "main")
