"""llama-server's slot routes, in its shapes: GET /slots and POST /slots/{id_slot}?action=save|restore|erase, a slot's
reusable cells to and from a file under --slot-save-path (docs/api.md, "Slots").
"""

from __future__ import annotations

from aiohttp import web

from worker.api.error_shapes import Failure, Family, response
from worker.api.problems import Problem, Reader, parse_json_object
from worker.api.state import WORKER

routes = web.RouteTableDef()

ACTIONS = ("save", "restore", "erase")
MAX_NAME_BYTES = 255  # a file name's limit on common filesystems
PLAIN_NAME = "a plain file name inside --slot-save-path"
# llama-server answers 501 here; a 404, as for /v1/embeddings without --embeddings: the route is not served here
# (a 5xx would say the worker failed).
DISABLED = Failure(404, "slots_disabled", [Problem(
    "worker", "--slot-save-path",
    "this worker saves no slot files: start it with --slot-save-path DIR (or LLM_WORKER_SLOT_SAVE_PATH)")])


def name_problem(name: str) -> str | None:
    """Why `name` is not a plain file name inside the folder (no separator, no leading dot, so no `..` and no absolute
    path); None: it is."""
    if not name:
        return "is empty"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"is over {MAX_NAME_BYTES} bytes"
    if any(separator in name for separator in "/\\:"):
        return "holds a path separator"
    if name.startswith("."):
        return "starts with a dot (hidden names, `.` and `..` are refused)"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character"
    return None


@routes.get("/slots")
async def slots(request: web.Request) -> web.Response:
    served = request.app[WORKER].require_served()
    busy, speculative = served.engine.busy_slots(), served.facts.exactness.speculative != "none"
    return web.json_response([{"id": slot, "n_ctx": served.facts.n_ctx_seq, "speculative": speculative,
                               "is_processing": slot in busy} for slot in range(served.facts.parallel)])


# save writes the slot's reusable cells (what its prefix cache would reuse); restore loads them into the slot, which
# then serves the prompts that continue them as if a request had left them; erase empties it. Each waits until no
# request holds the slot, as llama-server's do. A file carries its writer's fingerprint (engine/kv/cell_file.py): one
# another model, build or cell type wrote, or truncated or corrupt, is refused and nothing of it loads.
@routes.post("/slots/{id_slot}")
async def slot_action(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    served = worker.require_served()
    folder = worker.settings.slot_save_path
    if folder is None:
        return response(DISABLED, Family.OPENAI)
    raw = await request.read()
    r = Reader(parse_json_object(raw) if raw.strip() else {})
    slot = _slot(r, request.match_info["id_slot"], served.facts.parallel)
    action = request.query.get("action")
    if action not in ACTIONS:
        r.problem("action", " | ".join(ACTIONS), f"action must be one of {', '.join(ACTIONS)}", action)
    filename = r.string("filename", required=action in ("save", "restore"))
    if isinstance(filename, str) and (why := name_problem(filename)) is not None:
        r.problem("filename", PLAIN_NAME, f"filename {why}", filename)
    r.done()
    if action == "erase":
        return web.json_response({"id_slot": slot, "n_erased": await served.cells.erase_slot(slot)})
    path = folder / filename
    if action == "save":
        saved = await served.cells.save_slot(slot, path)  # Refused: a slot whose cells were made under adapters
        return web.json_response({"id_slot": slot, "filename": filename, "n_saved": saved.tokens,
                                  "n_written": saved.bytes, "timings": {"save_ms": round(saved.ms, 3)}})
    restored = await served.cells.restore_slot(slot, path)  # Refused: a file not there, or one that must not load
    return web.json_response({"id_slot": slot, "filename": filename, "n_restored": restored.tokens,
                              "n_read": restored.bytes, "timings": {"restore_ms": round(restored.ms, 3)}})


def _slot(r: Reader, raw: str, slots: int) -> int:
    constraint = f"0 <= id_slot <= {slots - 1}"
    if not (raw.isascii() and raw.isdigit() and int(raw) < slots):
        r.problem("id_slot", constraint, f"id_slot must be a slot of this worker ({constraint})", raw)
        return -1
    return int(raw)
