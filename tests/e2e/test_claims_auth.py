"""Bearer auth from each of its three sources: --api-key, LLM_WORKER_API_KEY and the manager's LLORCH_API_TOKEN."""

import asyncio

import pytest

from tests.conftest import start_worker


@pytest.fixture(scope="module")
def keyed_workers(tmp_path_factory, model_path):
    """One worker keyed by the flag (and the manager's token beside it), one by the environment variable."""
    tmp = tmp_path_factory.mktemp("auth")
    args = ("--model", str(model_path), "--parallel", "1", "--ctx-size", "512")
    workers = {
        "flag": start_worker(tmp, *args, "--api-key", "flag-key", env={"LLORCH_API_TOKEN": "manager-token"}),
        "env": start_worker(tmp, *args, env={"LLM_WORKER_API_KEY": "env-key"}),
    }
    yield workers
    for worker in workers.values():
        assert worker.stop() == 0


async def status(http, url: str, token: str | None, method: str = "GET", body: dict | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.request(method, url, headers=headers, json=body) as response:
        await response.read()
        return response.status


@pytest.mark.parametrize("source,accepted", [("flag", ("flag-key", "manager-token")), ("env", ("env-key",))])
async def test_each_key_source_guards_the_api(http, keyed_workers, source, accepted):
    url = keyed_workers[source].url
    completion = {"prompt": "Hi", "max_tokens": 1}
    for token in accepted:
        assert await status(http, url + "/v1/models", token) == 200
        assert await status(http, url + "/v1/completions", token, "POST", completion) == 200
    others = {"flag-key", "manager-token", "env-key"} - set(accepted)
    for token in (None, "wrong", *others):
        assert await status(http, url + "/v1/models", token) == 401, token
        assert await status(http, url + "/v1/completions", token, "POST", completion) == 401, token


async def test_both_health_routes_stay_open_under_auth(http, keyed_workers):
    for worker in keyed_workers.values():
        statuses = await asyncio.gather(*(status(http, worker.url + path, None) for path in ("/health", "/v1/health")))
        assert statuses == [200, 200]
