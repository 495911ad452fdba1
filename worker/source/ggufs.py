"""Which GGUF of a repo to serve (split parts grouped, picked by quant) or to project images with (--mmproj), the
choices named when ambiguous."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gguf import LlamaFileType

from worker.worker_error import WorkerError

# llama.cpp's own split naming (llama_split_path): PREFIX-00001-of-00003.gguf. Given the
# first part, llama.cpp finds the others beside it by name.
SPLIT_PART = re.compile(r"(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")

# Quant labels for messages, from gguf-py's file types (MOSTLY_Q4_K_M -> Q4_K_M); longest
# first so Q4_K_M wins over Q4_K.
QUANT_LABELS = sorted(
    (t.name.split("_", 1)[1] for t in LlamaFileType if t.name.startswith(("MOSTLY_", "ALL_"))),
    key=len, reverse=True,
)

# GGUFs that are not a model to serve on their own: multimodal projectors, picked for --mmproj instead.
PROJECTOR = re.compile(r"(^|/)mmproj[^/]*\.gguf$", re.IGNORECASE)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "? B"
    size: float = n
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def _has_token(path: str, token: str) -> bool:
    """`token` appears in `path` delimited by anything but letters, digits and underscores
    (so Q4_K does not match Q4_K_M)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(token)}(?![A-Za-z0-9_])", path, re.IGNORECASE) is not None


def quant_of(name: str) -> str | None:
    """The quant (or float type) label a GGUF's file name holds: Q4_K_M, Q8_0, F16, BF16, ..."""
    return next((q for q in QUANT_LABELS if _has_token(name, q)), None)


@dataclass(frozen=True)
class GgufChoice:
    """One servable GGUF: a single file, or every part of a split one, in order."""

    parts: tuple[str, ...]
    count: int  # parts the names promise; more than len(parts) means some are missing
    size: int | None

    @property
    def name(self) -> str:
        return self.parts[0]

    @property
    def quant(self) -> str | None:
        return quant_of(self.name)

    def describe(self) -> str:
        parts = f", {self.count} parts" if self.count > 1 else ""
        return f"{self.quant or '?'} ({human_bytes(self.size)}{parts}: {self.name})"

    def matches(self, quant: str) -> bool:
        return _has_token(self.name, quant)


def gguf_choices(files: Mapping[str, int | None]) -> list[GgufChoice]:
    """The repo's GGUF models, from its file names and sizes; split parts become one choice."""
    groups: dict[tuple[str, int], list[str]] = {}
    for name in sorted(files):
        if not name.lower().endswith(".gguf") or PROJECTOR.search(name):
            continue
        split = SPLIT_PART.fullmatch(name)
        key = (split["prefix"], int(split["count"])) if split else (name, 1)
        groups.setdefault(key, []).append(name)
    choices = []
    for (_, count), parts in groups.items():
        sizes = [files[p] for p in parts]
        known = [s for s in sizes if s is not None]
        size = sum(known) if len(known) == len(sizes) else None
        choices.append(GgufChoice(tuple(parts), count, size))
    return sorted(choices, key=lambda c: (c.size or 0, c.name))  # smallest first, as people pick quants


def _listing(choices: list[GgufChoice]) -> str:
    return "; ".join(c.describe() for c in choices)


def pick(choices: list[GgufChoice], ref: str, *, file: str | None, quant: str | None) -> GgufChoice:
    """The one GGUF that `file` or `quant` names, or the only one; otherwise say what to pick from."""
    if file is not None:
        found = [c for c in choices if file in c.parts]
        if not found:
            raise WorkerError(f"{ref} has no GGUF file {file}; it has: {_listing(choices) or 'no GGUF files'}")
        choice = found[0]
    elif quant is not None:
        found = [c for c in choices if c.matches(quant)]
        if not found:
            raise WorkerError(f"{ref} has no {quant} GGUF; pick a --quant from: {_listing(choices)}")
        if len(found) > 1:
            raise WorkerError(f"{ref} has {len(found)} {quant} GGUFs: {_listing(found)}; "
                              f"name one as hf:OWNER/REPO/FILE")
        choice = found[0]
    elif len(choices) == 1:
        choice = choices[0]
    else:
        quants = ", ".join(dict.fromkeys(c.quant or c.name for c in choices))
        raise WorkerError(f"{ref} has {len(choices)} GGUF models; pick one with --quant ({quants}) "
                          f"or name the file as hf:OWNER/REPO/FILE: {_listing(choices)}")
    if len(choice.parts) != choice.count:
        raise WorkerError(f"{ref}: {choice.name} is one of {choice.count} parts but the repo has "
                          f"{len(choice.parts)} of them; the upload looks incomplete")
    return choice


def pick_projector(files: Mapping[str, int | None], ref: str, *, file: str | None, model: str) -> GgufChoice:
    """The projector `file` names, else the repo's only mmproj*.gguf, else the only one of the model's type (its file
    name's quant or float type, as `model` says it); otherwise say which there are."""
    if file is not None:
        if file not in files:  # any file the user names: not every repo calls its projector mmproj*
            raise WorkerError(f"{ref} has no file {file}; its projectors: {_listing(_projectors(files)) or 'none'}")
        return GgufChoice((file,), 1, files[file])
    projectors = _projectors(files)
    if not projectors:
        raise WorkerError(f"{ref} has no projector (no mmproj*.gguf file); name a repo that holds the model's "
                          "projector, or the file itself as hf:OWNER/REPO/FILE")
    if len(projectors) == 1:
        return projectors[0]
    quant = quant_of(model)
    typed = [p for p in projectors if quant is not None and p.matches(quant)]
    if len(typed) == 1:
        return typed[0]
    if typed:
        raise WorkerError(f"{ref} has {len(typed)} {quant} projectors: {_listing(typed)}; "
                          "name one as hf:OWNER/REPO/FILE")
    raise WorkerError(f"{ref} has {len(projectors)} projectors and none of the model's type "
                      f"({quant or 'not in its file name'}): {_listing(projectors)}; name one as hf:OWNER/REPO/FILE")


def _projectors(files: Mapping[str, int | None]) -> list[GgufChoice]:
    return [GgufChoice((name,), 1, size) for name, size in sorted(files.items()) if PROJECTOR.search(name)]
