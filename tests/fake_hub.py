"""A local stand-in for the Hugging Face hub: a real aiohttp server speaking the file API huggingface_hub uses.

Served like the hub serves them (huggingface_hub 2.x reads exactly these):
  GET  /api/models/{repo}[/revision/{rev}]      model info; with ?blobs=true each sibling has size and lfs
  GET  /api/models/{repo}/tree/{rev}            the file tree (snapshot_download lists with it)
  HEAD /{repo}/resolve/{rev}/{file}             X-Repo-Commit, ETag; LFS files answer 302 to the CDN with
                                                X-Linked-Etag (their sha256) and X-Linked-Size
  GET  /{repo}/resolve/{rev}/{file}             small (git) files; LFS files redirect to the CDN
  GET  http://localhost:PORT/cdn/{sha256}       LFS bytes, with Range support; a different origin than
                                                127.0.0.1, as the real CDN is, so the client stops at the 302
Errors carry X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound), which the client maps to its
exceptions. A private repo answers 401 RepoNotFound unless `Authorization: Bearer <token>` matches.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from aiohttp import web

CHUNK = 1 << 20


@dataclass(frozen=True)
class HubFile:
    content: bytes | Path  # small files inline, big ones read from disk
    lfs: bool = True

    @property
    def size(self) -> int:
        return len(self.content) if isinstance(self.content, bytes) else self.content.stat().st_size

    def read(self, start: int = 0, end: int | None = None) -> bytes:
        if isinstance(self.content, bytes):
            return self.content[start:end]
        with self.content.open("rb") as f:
            f.seek(start)
            return f.read((end if end is not None else self.size) - start)

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for start in range(0, self.size, CHUNK):
            digest.update(self.read(start, min(start + CHUNK, self.size)))
        return digest.hexdigest()

    def git_sha1(self) -> str:
        """The blob id the hub lists and sends as ETag: asked for by every listing and HEAD, and a model's file is
        ~100 MB to hash, so each file is hashed once a run (again if it is written again)."""
        written = self.content.stat().st_mtime_ns if isinstance(self.content, Path) else 0
        return _git_sha1(self, written)


@cache
def _git_sha1(file: HubFile, _written: int) -> str:
    return hashlib.sha1(b"blob %d\0" % file.size + file.read()).hexdigest()


@dataclass
class HubRepo:
    files: dict[str, HubFile]
    commit: str
    tags: tuple[str, ...] = ()  # revisions besides "main" and the commit that name it
    token: str | None = None  # private: only this bearer token may read it

    def knows(self, revision: str) -> bool:
        return revision in ("main", self.commit, *self.tags)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    repos: dict[str, HubRepo]
    seen: list[Seen] = field(default_factory=list)
    cut_once: dict[str, int] = field(default_factory=dict)  # sha256 -> bytes sent before dropping the connection
    url: str = ""
    _port: int = 0
    _blobs: dict[str, HubFile] = field(default_factory=dict)
    _sha256: dict[int, str] = field(default_factory=dict)

    def sha256(self, file: HubFile) -> str:
        if id(file) not in self._sha256:
            self._sha256[id(file)] = file.sha256()
            self._blobs[self._sha256[id(file)]] = file
        return self._sha256[id(file)]

    def requests(self, method: str | None = None, path_part: str = "") -> list[Seen]:
        return [s for s in self.seen if (method is None or s.method == method) and path_part in s.path]

    # --- the routes

    def _repo(self, request: web.Request) -> HubRepo:
        repo = self.repos.get(f"{request.match_info['owner']}/{request.match_info['name']}")
        if repo is None:
            raise _error(404, "RepoNotFound", "Repository not found")
        if repo.token is not None and request.headers.get("Authorization") != f"Bearer {repo.token}":
            raise _error(401, "RepoNotFound", "Invalid username or password.")
        revision = request.match_info.get("revision", "main")
        if not repo.knows(revision):
            raise _error(404, "RevisionNotFound", "Invalid rev id: " + revision)
        return repo

    async def model_info(self, request: web.Request) -> web.Response:
        repo = self._repo(request)
        blobs = request.query.get("blobs", "").lower() == "true"
        siblings = []
        for name, file in sorted(repo.files.items()):
            sibling: dict = {"rfilename": name}
            if blobs:
                sibling |= {"size": file.size, "blobId": file.git_sha1()}
                if file.lfs:
                    sibling["lfs"] = {"sha256": self.sha256(file), "size": file.size, "pointerSize": 134}
            siblings.append(sibling)
        owner, name = request.match_info["owner"], request.match_info["name"]
        return web.json_response({"_id": "0" * 24, "id": f"{owner}/{name}", "modelId": f"{owner}/{name}",
                                  "sha": repo.commit, "private": repo.token is not None, "gated": False,
                                  "disabled": False, "tags": ["gguf"], "siblings": siblings})

    async def tree(self, request: web.Request) -> web.Response:
        repo = self._repo(request)
        entries = []
        for name, file in sorted(repo.files.items()):
            entry: dict = {"type": "file", "oid": file.git_sha1(), "size": file.size, "path": name}
            if file.lfs:
                entry["lfs"] = {"oid": self.sha256(file), "size": file.size, "pointerSize": 134}
            entries.append(entry)
        return web.json_response(entries)

    def _file(self, request: web.Request) -> tuple[HubRepo, HubFile]:
        repo = self._repo(request)
        file = repo.files.get(request.match_info["filename"])
        if file is None:
            raise _error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo.commit})
        return repo, file

    async def resolve(self, request: web.Request) -> web.StreamResponse:
        repo, file = self._file(request)
        headers = {"X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes"}
        if file.lfs:
            sha256 = self.sha256(file)
            headers |= {"ETag": f'"{sha256}"', "X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(file.size),
                        "Location": f"http://localhost:{self._port}/cdn/{sha256}"}
            return web.Response(status=302, headers=headers)
        headers["ETag"] = f'"{file.git_sha1()}"'
        if request.method == "HEAD":
            return web.Response(headers={**headers, "Content-Length": str(file.size)})
        return web.Response(body=file.read(), headers=headers)

    async def cdn(self, request: web.Request) -> web.StreamResponse:
        sha256 = request.match_info["sha256"]
        file = self._blobs.get(sha256)
        if file is None:
            raise web.HTTPNotFound()
        start, status = 0, 200
        if (asked := request.headers.get("Range")) is not None:
            start, status = int(asked.removeprefix("bytes=").split("-")[0]), 206
        headers = {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes", "Content-Length": str(file.size - start)}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{file.size - 1}/{file.size}"
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        cut = self.cut_once.pop(sha256, None)
        for offset in range(start, file.size, CHUNK):
            if cut is not None and offset >= cut:
                # The interrupted download: the body stops short and the connection goes away.
                request.transport.close()
                return response
            await response.write(file.read(offset, min(offset + CHUNK, file.size)))
        await response.write_eof()
        return response

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.seen.append(Seen(request.method, request.path, request.headers.get("Range"),
                              request.headers.get("Authorization")))
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        repo = "/{owner}/{name}"
        app.router.add_get(f"/api/models{repo}", self.model_info)
        app.router.add_get(f"/api/models{repo}/revision/{{revision}}", self.model_info)
        app.router.add_get(f"/api/models{repo}/tree/{{revision}}", self.tree)
        app.router.add_route("*", f"{repo}/resolve/{{revision}}/{{filename:.+}}", self.resolve)
        app.router.add_route("*", "/cdn/{sha256}", self.cdn)
        return app

    # --- running it beside the tests, on its own thread and loop

    def start(self) -> FakeHub:
        for repo in self.repos.values():
            for file in repo.files.values():
                if file.lfs:
                    self.sha256(file)
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def serve() -> None:
            self._runner = web.AppRunner(self.app(), access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self._port = self._runner.addresses[0][1]
            self.url = f"http://127.0.0.1:{self._port}"
            ready.set()

        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-hub", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(serve(), self._loop)
        ready.wait(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.HTTPException:
    kind = {401: web.HTTPUnauthorized, 404: web.HTTPNotFound}[status]
    return kind(headers={"X-Error-Code": code, "X-Error-Message": message, **(headers or {})},
                text=f'{{"error": "{message}"}}', content_type="application/json")
