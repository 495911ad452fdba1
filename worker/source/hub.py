"""Models from the Hugging Face hub, through huggingface_hub, which owns the cache, resuming and the HF_* settings; here
the file is picked, pinned hashes are checked and the library's errors become one line that says what to do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import structlog
from huggingface_hub import HfApi, constants, hf_hub_download, scan_cache_dir, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import (
    CacheNotFound,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from worker.logs import bridge_library_logs
from worker.source.download_progress import DownloadProgress
from worker.source.ggufs import GgufChoice, gguf_choices, pick, pick_projector
from worker.source.sources import HubSource
from worker.user_cache import sha256_of
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)
bridge_library_logs()  # importing huggingface_hub just gave its logger a plain handler

# What a SafeTensors folder needs for conversion: config, weights, tokenizer files.
FOLDER_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]


@dataclass(frozen=True)
class RepoListing:
    commit: str | None  # None: the hub did not say (model_info's sha is optional)
    files: Mapping[str, int | None]  # path in the repo -> size
    snapshot: Path | None = None  # set when listed from the local cache (hub unreachable or HF_HUB_OFFLINE)


# huggingface_hub's errors, most specific first, as what happened and what to do.
_ERRORS: list[tuple[type[Exception], str]] = [
    (GatedRepoError, "{repo} is gated: accept its terms on the hub, then set HF_TOKEN to a token of that account"),
    (RepositoryNotFoundError, "the hub at {endpoint} has no model repo {repo}, or it is private and HF_TOKEN is "
                              "unset or not allowed to read it; check the name (hf:owner/repo) or set HF_TOKEN"),
    (RevisionNotFoundError, "{repo} has no revision {revision!r}; use one of its branches, tags or commit hashes"),
    (RemoteEntryNotFoundError, "{repo}@{revision} has no file {file}; list its files with "
                               "`llm-worker pull hf:{repo}` (without a file)"),
    (LocalEntryNotFoundError, "{repo}/{file} is not in the hub cache ({cache}) and the hub was not reachable "
                              "or HF_HUB_OFFLINE is set; pull it while online first"),
    (HfHubHTTPError, "the hub at {endpoint} refused {repo}: {error}"),
]


@contextmanager
def _hub_errors(source: HubSource, file: str | None = None) -> Iterator[None]:
    try:
        yield
    except WorkerError:
        raise
    except Exception as exc:
        for kind, message in _ERRORS:
            if isinstance(exc, kind):
                first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise WorkerError(message.format(
                    repo=source.repo, revision=source.revision, file=file, endpoint=constants.ENDPOINT,
                    cache=constants.HF_HUB_CACHE, error=first_line,
                )) from None
        raise


def _list_online(source: HubSource) -> RepoListing:
    with _hub_errors(source):
        info = HfApi().model_info(source.repo, revision=source.revision, files_metadata=True)
    return RepoListing(info.sha, {s.rfilename: s.size for s in info.siblings or []})


def cached_listing(source: HubSource) -> RepoListing | None:
    """The files huggingface_hub's cache holds for this repo and revision (branch, tag or commit)."""
    try:
        cache = scan_cache_dir()
    except CacheNotFound:
        return None
    for repo in cache.repos:
        if repo.repo_type != "model" or repo.repo_id != source.repo:
            continue
        for revision in repo.revisions:
            if source.revision == revision.commit_hash or source.revision in revision.refs:
                files = {f.file_path.relative_to(revision.snapshot_path).as_posix(): f.size_on_disk
                         for f in revision.files}
                return RepoListing(revision.commit_hash, files, revision.snapshot_path)
    return None


def list_repo(source: HubSource) -> RepoListing:
    """The repo's files at the revision, from the hub; from the local cache when the hub can't be asked."""
    try:
        return _list_online(source)
    except (httpx2.TransportError, ConnectionError) as exc:  # no network, or HF_HUB_OFFLINE (a ConnectionError)
        cached = cached_listing(source)
        if cached is None:
            raise WorkerError(
                f"cannot reach the hub at {constants.ENDPOINT} ({exc}) and {source.ref} is not in the hub cache "
                f"({constants.HF_HUB_CACHE}); check the network and HF_ENDPOINT, or unset HF_HUB_OFFLINE"
            ) from None
        log.warning("hub_unreachable_using_cache", repo=source.repo, revision=source.revision, commit=cached.commit)
        return cached


def _is_folder_repo(files: Mapping[str, int | None]) -> bool:
    return "config.json" in files and any(name.endswith(".safetensors") for name in files)


def _verify(path: Path, expected: str, source: HubSource, name: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        blob = path.resolve()  # the cache's snapshot entry is a symlink to the blob
        path.unlink()
        blob.unlink(missing_ok=True)
        raise WorkerError(f"{source.ref}: {name} has sha256 {actual}, expected {expected} (pinned in models.toml); "
                          "the downloaded file was deleted: check the pin, or the hub repo changed")
    log.info("verified", file=name, sha256=actual)


def _download(source: HubSource, choice: GgufChoice) -> Path:
    if source.sha256 and len(source.sha256) != len(choice.parts):
        raise WorkerError(f"{source.ref}: {len(source.sha256)} sha256 pins for {len(choice.parts)} files "
                          f"({', '.join(choice.parts)}); pin one hash per file, in part order")
    paths = []
    for name in choice.parts:
        with _hub_errors(source, name):
            path = Path(hf_hub_download(source.repo, name, revision=source.revision,
                                        tqdm_class=DownloadProgress.for_file(name)))
        log.info("hub_file", repo=source.repo, file=name, path=str(path))
        paths.append(path)
    for path, name, expected in zip(paths, choice.parts, source.sha256):
        _verify(path, expected, source, name)
    return paths[0]  # llama.cpp finds the other parts of a split GGUF beside the first


def _download_folder(source: HubSource) -> Path:
    log.info("download", stage="download", repo=source.repo, revision=source.revision, files=FOLDER_FILES)
    with _hub_errors(source):
        return Path(snapshot_download(source.repo, revision=source.revision, allow_patterns=FOLDER_FILES))


def fetch_hub(source: HubSource) -> Path:
    """A local GGUF file (the first part, when split), or the folder of a SafeTensors repo."""
    listing = list_repo(source)
    choices = gguf_choices(listing.files)
    if not choices and _is_folder_repo(listing.files):
        return _download_folder(source)
    if not choices:
        where = "the hub cache holds" if listing.snapshot else "it has"
        raise WorkerError(f"{source.ref} has no GGUF files and no SafeTensors weights (config.json + *.safetensors); "
                          f"{where}: {', '.join(sorted(listing.files)) or 'nothing'}")
    return _download(source, pick(choices, _listed_ref(source, listing), file=source.file, quant=source.quant))


def fetch_hub_projector(source: HubSource, model: Path) -> Path:
    """A projector GGUF (--mmproj hf:...) for the model at `model`: the file named, or the one the repo's
    mmproj*.gguf files and the model's type leave; listed, downloaded and cached as a model's GGUF is."""
    listing = list_repo(source)
    return _download(source, pick_projector(listing.files, _listed_ref(source, listing), file=source.file,
                                            model=model.name))


def _listed_ref(source: HubSource, listing: RepoListing) -> str:
    """The repo as messages name it; a listing from the cache may lack what the hub now holds, so they say so."""
    return f"hf:{source.repo}" + (" as cached (hub unreachable or HF_HUB_OFFLINE)" if listing.snapshot else "")


def cached_hub_files(source: HubSource) -> list[Path] | None:
    """The GGUF files (or folder) this source names, if the hub cache already holds them all; never asks the hub."""
    listing = cached_listing(source)
    if listing is None:
        return None
    choices = gguf_choices(listing.files)
    if not choices and _is_folder_repo(listing.files):
        assert listing.snapshot is not None  # a listing from the cache names its snapshot
        return [listing.snapshot]
    try:
        choice = pick(choices, source.ref, file=source.file, quant=source.quant)
    except WorkerError:
        return None
    paths = [try_to_load_from_cache(source.repo, name, revision=listing.commit) for name in choice.parts]
    found = [p for p in paths if isinstance(p, str)]
    return [Path(p) for p in found] if len(found) == len(paths) else None
