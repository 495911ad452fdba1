"""models.toml without the model: clear errors for an unknown name and a bad source kind."""

from pathlib import Path

import pytest

from worker.source import load_registry, resolve_model
from worker.worker_error import WorkerError


def test_unknown_name_lists_the_aliases():
    with pytest.raises(WorkerError, match=r"neither a file nor a models.toml alias.*smollm2-135m-instruct"):
        resolve_model("no-such-model", load_registry())


def test_bad_source_kind_is_named(tmp_path: Path):
    extra = tmp_path / "models.toml"
    extra.write_text('[models.x.source]\nkind = "ftp"\n')
    with pytest.raises(WorkerError, match="source kind 'ftp'; use one of: package, path, hf"):
        load_registry(extra)
