"""hf: names, picking the GGUF of a repo, and models.toml's hub sources and defaults; no network, no model."""

from pathlib import Path

import pytest

from worker.api.model_sampling import check_entry, model_defaults
from worker.api.openai.request import parse_completion
from worker.api.orch.request import parse_execute
from worker.source import load_registry
from worker.source.ggufs import gguf_choices, pick, pick_projector
from worker.source.hubref import parse_hub_ref
from worker.source.registry import ModelDefaults
from worker.source.sources import HubSource
from worker.worker_error import WorkerError


@pytest.mark.parametrize("value,expected", [
    ("hf:o/r", HubSource("o/r")),
    ("hf:o/r@v1.0", HubSource("o/r", revision="v1.0")),
    ("hf:o/r/sub/m.Q4_0.gguf", HubSource("o/r", file="sub/m.Q4_0.gguf")),
    ("hf:o/r/m.gguf@" + "a" * 40, HubSource("o/r", file="m.gguf", revision="a" * 40)),
    ("hf:o/r:m.gguf", HubSource("o/r", file="m.gguf")),  # the pool-manager contract's spelling
    ("hf:o/r@refs/pr/1", HubSource("o/r", revision="refs/pr/1")),
])
def test_hub_names_parse(value, expected):
    assert parse_hub_ref(value) == expected


@pytest.mark.parametrize("value", ["hf:", "hf:owner", "hf:/r", "hf:o/r@", "hf:o/r/a.gguf:b.gguf"])
def test_bad_hub_names_say_how_to_write_one(value):
    with pytest.raises(WorkerError, match=r"write hf:owner/repo, hf:owner/repo/file.gguf or hf:owner/repo@revision"):
        parse_hub_ref(value)


def test_a_file_and_a_quant_together_are_refused():
    with pytest.raises(WorkerError, match="name a file or a quant, not both"):
        parse_hub_ref("hf:o/r/m.Q4_0.gguf", quant="Q8_0")


FILES = {
    "m.Q4_K_M.gguf": 4_100_000_000, "m.Q4_K_S.gguf": 3_900_000_000, "README.md": 10,
    "Q8_0/m-Q8_0-00001-of-00002.gguf": 5_000_000_000, "Q8_0/m-Q8_0-00002-of-00002.gguf": 3_000_000_000,
    "mmproj-m-f16.gguf": 600_000_000,  # a vision projector, never a model on its own
}


def test_split_parts_are_one_choice_and_projectors_none():
    choices = {c.name: c for c in gguf_choices(FILES)}
    assert set(choices) == {"m.Q4_K_M.gguf", "m.Q4_K_S.gguf", "Q8_0/m-Q8_0-00001-of-00002.gguf"}
    split = choices["Q8_0/m-Q8_0-00001-of-00002.gguf"]
    assert (split.parts[1], split.count, split.size, split.quant) == (
        "Q8_0/m-Q8_0-00002-of-00002.gguf", 2, 8_000_000_000, "Q8_0")


@pytest.mark.parametrize("quant,expected", [
    ("Q4_K_M", "m.Q4_K_M.gguf"), ("q4_k_s", "m.Q4_K_S.gguf"), ("Q8_0", "Q8_0/m-Q8_0-00001-of-00002.gguf"),
])
def test_quant_picks_by_whole_name_part(quant, expected):
    assert pick(gguf_choices(FILES), "hf:o/r", file=None, quant=quant).name == expected


def test_ambiguity_lists_the_choices_with_sizes():
    with pytest.raises(WorkerError) as info:
        pick(gguf_choices(FILES), "hf:o/r", file=None, quant=None)
    assert "hf:o/r has 3 GGUF models; pick one with --quant (Q4_K_S, Q4_K_M, Q8_0)" in str(info.value)
    assert "Q8_0 (8.0 GB, 2 parts: Q8_0/m-Q8_0-00001-of-00002.gguf)" in str(info.value)
    with pytest.raises(WorkerError, match="has no Q4_K GGUF; pick a --quant from: "):
        pick(gguf_choices(FILES), "hf:o/r", file=None, quant="Q4_K")  # Q4_K is not Q4_K_M


def test_a_split_gguf_with_a_missing_part_is_refused():
    files = {"m-00001-of-00003.gguf": 1, "m-00002-of-00003.gguf": 1}
    with pytest.raises(WorkerError, match="one of 3 parts but the repo has 2 of them"):
        pick(gguf_choices(files), "hf:o/r", file=None, quant=None)


PROJECTORS = {"mmproj-m-F16.gguf": 600_000_000, "mmproj-m-BF16.gguf": 600_000_000, "mmproj-m-Q8_0.gguf": 320_000_000,
              "m-BF16.gguf": 7_000_000_000, "m.Q4_K_M.gguf": 4_100_000_000, "README.md": 10}


@pytest.mark.parametrize("model,expected", [
    ("m-BF16.gguf", "mmproj-m-BF16.gguf"),  # BF16, not the F16 inside its name
    ("m-f16.gguf", "mmproj-m-F16.gguf"),
    ("Q8_0/m-Q8_0-00001-of-00002.gguf", "mmproj-m-Q8_0.gguf"),
])
def test_a_projector_of_the_model_type_is_picked_among_several(model, expected):
    assert pick_projector(PROJECTORS, "hf:o/r", file=None, model=model).name == expected


def test_the_only_projector_is_picked_whatever_the_model_and_a_named_file_is_taken_as_named():
    files = {"mmproj-colours.gguf": 1000, "m.Q4_K_M.gguf": 4_100_000_000}
    assert pick_projector(files, "hf:o/r", file=None, model="m.Q4_K_M.gguf").name == "mmproj-colours.gguf"
    assert pick_projector(PROJECTORS, "hf:o/r", file="mmproj-m-F16.gguf", model="m.Q8_0.gguf").name == (
        "mmproj-m-F16.gguf")


@pytest.mark.parametrize("files,file,model,message", [
    (PROJECTORS, None, "m.Q4_K_M.gguf",
     "hf:o/r has 3 projectors and none of the model's type (Q4_K_M): BF16 (600.0 MB: mmproj-m-BF16.gguf); "
     "F16 (600.0 MB: mmproj-m-F16.gguf); Q8_0 (320.0 MB: mmproj-m-Q8_0.gguf); name one as hf:OWNER/REPO/FILE"),
    (PROJECTORS, None, "folder", "hf:o/r has 3 projectors and none of the model's type (not in its file name): "),
    ({"mmproj-a-F16.gguf": 1, "mmproj-b-F16.gguf": 1}, None, "m-F16.gguf",
     "hf:o/r has 2 F16 projectors: F16 (1 B: mmproj-a-F16.gguf); F16 (1 B: mmproj-b-F16.gguf); name one as "),
    ({"m.Q4_K_M.gguf": 1, "mmproj.txt": 1}, None, "m.Q4_K_M.gguf",
     "hf:o/r has no projector (no mmproj*.gguf file); name a repo that holds the model's projector, or the file"),
    (PROJECTORS, "mmproj-x.gguf", "m.gguf", "hf:o/r has no file mmproj-x.gguf; its projectors: BF16 (600.0 MB: "),
])
def test_no_projector_or_no_way_to_choose_is_one_line(files, file, model, message):
    with pytest.raises(WorkerError) as info:
        pick_projector(files, "hf:o/r", file=file, model=model)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_hub_entries_and_defaults_parse(tmp_path: Path):
    extra = tmp_path / "models.toml"
    extra.write_text(f'''
[models.tiny]
ctx_size = 2048
chat_template = "{{{{ messages[0].content }}}}"
sampling = {{ temperature = 0.2, top_k = 40 }}
[models.tiny.source]
kind = "hf"
repo = "o/r"
quant = "Q4_K_M"
revision = "{'b' * 40}"
sha256 = "{'c' * 64}"
''')
    entry = load_registry(extra).get("tiny")
    assert entry.source == HubSource("o/r", quant="Q4_K_M", revision="b" * 40, sha256=("c" * 64,))
    assert entry.defaults == ModelDefaults(2048, "{{ messages[0].content }}", {"temperature": 0.2, "top_k": 40})


@pytest.mark.parametrize("table,message", [
    ('ctx-size = 1', r"unknown keys \['ctx-size'\]"),
    ('ctx_size = -1', "ctx_size must be a whole number >= 0"),
    ('sampling = { seed = 1 }', "sampling must be a table of temperature, top_k"),
    ('chat_template = ""', "chat_template must be a non-empty Jinja template string"),
])
def test_bad_defaults_are_named(tmp_path: Path, table, message):
    extra = tmp_path / "models.toml"
    extra.write_text(f'[models.x]\n{table}\n[models.x.source]\nkind = "hf"\nrepo = "o/r"\n')
    with pytest.raises(WorkerError, match=message):
        load_registry(extra)


def test_a_bad_sha256_pin_is_named(tmp_path: Path):
    extra = tmp_path / "models.toml"
    extra.write_text('[models.x.source]\nkind = "hf"\nrepo = "o/r"\nsha256 = "abc"\n')
    with pytest.raises(WorkerError, match="sha256 'abc' is not 64 lowercase hex digits"):
        load_registry(extra)


def test_sampling_defaults_sit_under_the_request():
    defaults = model_defaults({"temperature": 0.0, "top_k": 40, "repeat_penalty": 1.1}, {}).params
    assert (defaults.temperature, defaults.top_k, defaults.repeat_penalty) == (0.0, 40, 1.1)
    completion = parse_completion({"prompt": "x", "top_k": 5}, 100, defaults).generation.sampling
    assert (completion.temperature, completion.top_k, completion.repeat_penalty) == (0.0, 5, 1.1)
    job = parse_execute({"job_id": "j", "prompt": "x", "max_tokens": 1, "temperature": 0.7}, defaults)
    assert (job.generation.sampling.temperature, job.generation.sampling.top_k) == (0.7, 40)
    with pytest.raises(WorkerError, match="temperature must satisfy 0 <= temperature <= 2"):
        check_entry({"temperature": 3})
