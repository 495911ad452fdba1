#!/usr/bin/env python3
"""/apply-template against llama-server's, byte for byte, on every chat template llama.cpp ships.

For each template in the vendored models/templates/, llm-worker serves the default model with it (a models.toml entry's
chat_template) and llama-server the same GGUF with `--chat-template-file` (its Jinja engine, as it runs by default);
both are asked for /apply-template on the same requests: a system prompt and a question; the question with a tool
offered; a whole tool round (the question, the assistant's call, the tool's result) with the tool offered; the
question with thinking turned off (chat_template_kwargs) and with a reasoning effort. A
template matches where every request gets the same prompt from both, or is refused by both. Target (issue #81): at
least 95 % of the templates; docs/models.md lists the rest with why. Run: .venv/bin/python bench/run.py templates
[--publish]   (bench/TEMPLATES.md)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.config import REPO_DIR, find_llama_server, find_model
from bench.report import write_report
from bench.servers import free_port, stop_process, wait_healthy
from tests.chat_templates import CALL, RESULT, TEMPLATES, TOOL, USER, VENDORED

SYSTEM = {"role": "system", "content": "You answer in one sentence."}
REQUESTS = {
    "chat": {"messages": [SYSTEM, USER]},
    "tools": {"messages": [USER], "tools": [TOOL]},
    "tool round": {"messages": [USER, CALL, RESULT], "tools": [TOOL]},
    "thinking off": {"messages": [USER], "chat_template_kwargs": {"enable_thinking": False}},
    "reasoning effort": {"messages": [USER], "reasoning_effort": "low"},
}


async def ask(url: str) -> dict[str, tuple[int, str]]:
    import aiohttp

    answers = {}
    async with aiohttp.ClientSession() as session:
        for name, body in REQUESTS.items():
            async with session.post(url + "/apply-template", json=body) as r:
                text = await r.text()
                answers[name] = (r.status, json.loads(text).get("prompt", "") if r.status == 200 else text[:200])
    return answers


def served(argv: list[str], health: str, log: Path) -> dict[str, tuple[int, str]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_DIR, start_new_session=True)
        try:
            port = argv[argv.index("--port") + 1]
            asyncio.run(wait_healthy(f"http://127.0.0.1:{port}{health}", proc, log))
            return asyncio.run(ask(f"http://127.0.0.1:{port}"))
        finally:
            stop_process(proc)


def compare(name: str, model: Path, llama_server: Path, work: Path) -> tuple[bool, str]:
    """Whether the two servers answer every request alike, and where they first differ."""
    source = VENDORED / f"{name}.jinja"
    models = work / "models.toml"
    models.write_text(f"[models.t]\nchat_template = {json.dumps(source.read_text())}\n"
                      f'[models.t.source]\nkind = "path"\npath = "{model}"\n')
    ours = served([sys.executable, "-m", "worker", "serve", "--model", "t", "--models-file", str(models),
                   "--host", "127.0.0.1", "--port", str(free_port()), "--parallel", "1", "--ctx-size", "2048",
                   "--log-level", "warning"],
                  "/health", work / "worker.log")
    theirs = served([str(llama_server), "-m", str(model), "--chat-template-file", str(source), "--jinja",
                     "--host", "127.0.0.1", "--port", str(free_port()), "-np", "1", "-c", "2048", "--no-webui"],
                    "/health", work / "llama-server.log")
    for request, (status, prompt) in theirs.items():
        our_status, our_prompt = ours[request]
        if status != 200 and our_status != 200:
            continue
        if (status, prompt) != (our_status, our_prompt):
            if status != 200 or our_status != 200:
                return False, f"{request}: llama-server {status}, llm-worker {our_status}: " \
                              f"{(prompt if status != 200 else our_prompt)[:160]!r}"
            return False, f"{request}: " + first_difference(prompt, our_prompt)
    return True, ""


def first_difference(theirs: str, ours: str) -> str:
    start = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    return f"at character {start}: llama-server {theirs[start:start + 60]!r}, llm-worker {ours[start:start + 60]!r}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model")
    p.add_argument("--llama-server")
    p.add_argument("--only", help="comma-separated template names")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    p.add_argument("--publish", action="store_true", help="also write bench/TEMPLATES.md")
    args = p.parse_args(argv)
    model, llama_server = find_model(args.model), find_llama_server(args.llama_server)
    work = args.out / "templates"
    work.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else TEMPLATES
    rows, matched = [], 0
    for name in names:
        same, why = compare(name, model, llama_server, work)
        matched += same
        print(f"{'same' if same else 'DIFFERENT'} {name} {why}", flush=True)
        if not same:
            rows.append(f"| `{name}` | {why.replace('|', '¦')} |")
    text = "\n".join([
        "# /apply-template against llama-server's", "",
        "`.venv/bin/python bench/run.py templates --publish` (bench/templates.py): every template in llama.cpp's "
        "models/templates/, served by llm-worker (models.toml chat_template) and by llama-server built from the same "
        "source (`--chat-template-file --jinja`), both asked for /apply-template on a chat with a system prompt, a "
        "question with a tool offered, a whole tool round, the question with thinking off and with a reasoning effort. "
        "Target (issue #81): the same bytes on at least 95 %.",
        "", f"**{matched} of {len(names)}** templates ({100 * matched / len(names):.0f} %) give the same prompt on "
        "every request (or are refused by both).", "",
        *(["| template | first difference |", "|---|---|", *rows, ""] if rows else [])])
    write_report(text, args.out, "templates.md", "TEMPLATES.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
