"""`llm-worker models`: what models.toml names and what the caches already hold, with sizes. Never downloads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants, scan_cache_dir
from huggingface_hub.errors import CacheNotFound

from worker.source.ggufs import gguf_choices, human_bytes
from worker.source.hub import cached_hub_files
from worker.source.package import cached_path
from worker.source.registry import Registry
from worker.source.sources import HubSource, PackageSource, PathSource


def _existing(*paths: Path) -> list[Path] | None:
    return list(paths) if all(p.exists() for p in paths) else None


# source type -> (how to name it, its local files if they are already there)
_SOURCES: dict[type, tuple[Callable[..., str], Callable[..., list[Path] | None]]] = {
    PackageSource: (lambda s: f"package {s.package}=={s.version}", lambda s: _existing(cached_path(s))),
    PathSource: (lambda s: str(s.path), lambda s: _existing(s.path)),
    HubSource: (lambda s: s.ref + (f" --quant {s.quant}" if s.quant else ""), cached_hub_files),
}


@dataclass(frozen=True)
class Row:
    name: str
    source: str
    files: list[Path] | None  # None: not downloaded yet

    @property
    def size(self) -> int | None:
        if self.files is None:
            return None
        return sum(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
                   for p in self.files)


def registry_rows(registry: Registry) -> list[Row]:
    rows = []
    for name, entry in sorted(registry.entries.items()):
        describe, local = _SOURCES[type(entry.source)]
        mark = "*" if name == registry.default else " "
        rows.append(Row(f"{mark} {name}", describe(entry.source), local(entry.source)))
    return rows


def hub_cache_rows() -> list[tuple[str, int]]:
    """Every GGUF and SafeTensors folder in huggingface_hub's cache, as an hf: name and its size on disk."""
    try:
        cache = scan_cache_dir()
    except CacheNotFound:
        return []
    rows = []
    for repo in sorted(cache.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        for revision in repo.revisions:
            at = "" if "main" in revision.refs else f"@{min(revision.refs, default=revision.commit_hash)}"
            files = {f.file_path.relative_to(revision.snapshot_path).as_posix(): f.size_on_disk
                     for f in revision.files}
            for choice in gguf_choices(files):
                rows.append((f"hf:{repo.repo_id}/{choice.name}{at}", choice.size or 0))
            if any(name.endswith(".safetensors") for name in files):
                rows.append((f"hf:{repo.repo_id}{at} (SafeTensors folder)", revision.size_on_disk))
    return rows


def render(registry: Registry) -> str:
    rows = registry_rows(registry)
    width = max(len(r.name) for r in rows) + 2
    source_width = max(len(r.source) for r in rows) + 2
    lines = ["models.toml (* = the default):"]
    for row in rows:
        where = (f"{human_bytes(row.size):>9}  {row.files[0]}" if row.files
                 else f"{'-':>9}  not downloaded: llm-worker pull {row.name[2:]}")
        lines.append(f"{row.name:<{width}}{row.source:<{source_width}}{where}")
    hub_rows = hub_cache_rows()
    lines += ["", f"Hugging Face hub cache ({constants.HF_HUB_CACHE}):"]
    lines += [f"  {name}  {human_bytes(size)}" for name, size in hub_rows] or ["  (empty)"]
    return "\n".join(lines)
