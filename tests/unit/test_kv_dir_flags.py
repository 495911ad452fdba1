"""--kv-dir, --slot-save-path and the fingerprint, without a model: the flags' rules, the plain file names the slot
routes take, and what the fingerprint is made of."""

from __future__ import annotations

import pytest

from worker.api.llama_server.slots import name_problem
from worker.engine.kv.fingerprint import Fingerprint, library_files
from worker.worker_error import WorkerError


def settings(*args: str):
    from worker.cli import serve
    from worker.settings import settings_from_flags

    return settings_from_flags(serve.make_context("serve", list(args)).params)


def test_kv_dir_is_bounded_by_cache_ram_unless_told_and_refused_where_it_cannot_work(tmp_path):
    engine = settings("--kv-dir", str(tmp_path), "--cache-ram", "512").engine
    assert (engine.kv_dir, engine.kv_dir_mib) == (tmp_path, 512)
    assert settings("--kv-dir", str(tmp_path), "--kv-dir-size", "100").engine.kv_dir_mib == 100
    assert settings().engine.kv_dir is None and settings().kv_dir_interval == 60
    for args, names in ((("--prefix-cache", "off"), "--prefix-cache off"), (("--cache-ram", "0"), "--cache-ram 0"),
                        (("--rpc", "10.0.0.2:50052"), "--rpc")):
        with pytest.raises(WorkerError, match=names):
            settings("--kv-dir", str(tmp_path), *args)


@pytest.mark.parametrize("name", ["slot0.bin", "conversation 7", "é.kv", "a" * 255])
def test_plain_names_are_taken(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("name,why", [
    ("", "empty"), ("..", "dot"), (".hidden", "dot"), ("../etc/passwd", "separator"), ("/etc/passwd", "separator"),
    ("a/b", "separator"), ("a\\b", "separator"), ("C:evil", "separator"), ("a\nb", "control"), ("é" * 200, "bytes"),
])
def test_anything_but_a_plain_name_is_refused(name, why):
    assert why in (name_problem(name) or "")


def test_the_fingerprint_hashes_the_llama_cpp_libraries_this_process_mapped():
    import llama_cpp  # noqa: F401  (maps the libraries)

    names = [path.name for path in library_files()]
    assert any(name.startswith("libllama") for name in names) and any(name.startswith("libggml") for name in names)
    print_ = Fingerprint.of({"b": "2", "a": "1"})
    assert print_.parts == (("a", "1"), ("b", "2")) and print_.explain({"a": "1", "b": "2"}) == ""
    assert print_.explain({"a": "1"}) == "b (none) here 2"
