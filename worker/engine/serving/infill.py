"""Fill-in-the-middle prompts as llama-server lays them out (tools/server format_prompt_infill), from a model's FIM
tokens: the repo-level pattern of Qwen2.5-Coder and its kind, other files' text first, then the code before and after
the cursor around the model's own markers. Unlike llama-server, nothing is cut to fit a batch: a prompt that does not
fit the context is refused as any other is."""

from __future__ import annotations

from worker.engine.errors import NoInfill
from worker.engine.native.model import LlamaModel
from worker.engine.requests import ExtraFile

_NEEDED = {"pre": "prefix", "suf": "suffix", "mid": "middle"}
# llama-server's separator before another file's text, where the vocabulary has no file separator token.
_SNIPPET = "\n\n--- snippet ---\n\n"


def infill_tokens(model: LlamaModel, prefix: str, suffix: str, extra: tuple[ExtraFile, ...] = (),
                  prompt: str = "") -> list[int]:
    """[FIM_REP]myproject [FIM_SEP]filename text... [FIM_SEP]filename [BOS] [FIM_PRE]prefix prompt [FIM_SUF]suffix
    [FIM_MID], each part where the vocabulary has its token; `prompt` is the start of the middle, which the model
    continues. NoInfill where the model has no prefix, suffix or middle token."""
    fim = model.fim_tokens()
    if missing := [name for token, name in _NEEDED.items() if token not in fim]:
        raise NoInfill(f"this model has no fill-in-the-middle tokens (its vocabulary lacks the {', '.join(missing)} "
                       "token): serve a code model trained for infill (Qwen2.5-Coder, CodeLlama, StarCoder...)")

    def text(part: str) -> list[int]:
        return model.tokenize(part, add_special=False, parse_special=False)

    tokens = [fim["rep"], *text("myproject\n")] if "rep" in fim else []
    for file in extra:
        tokens += [fim["sep"], *text(file.filename + "\n")] if "sep" in fim else text(_SNIPPET)
        tokens += text(file.text)
    if "sep" in fim:
        tokens += [fim["sep"], *text("filename\n")]
    tokens += [model.bos_token] if model.add_bos else []
    return [*tokens, fim["pre"], *text(prefix), *text(prompt), fim["suf"], *text(suffix), fim["mid"]]
