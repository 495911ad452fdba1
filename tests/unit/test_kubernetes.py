"""docs/kubernetes/*.yaml against the worker: each flag, environment variable, probe and scrape path, port, volume
and image they name exists, so the manifests cannot drift from the code."""

from __future__ import annotations

import itertools
from pathlib import Path

import yaml

from worker.cli import serve

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((REPO / "docs" / "kubernetes").glob("*.yaml"))


def _documents() -> dict[str, dict]:
    found = {}
    for path in MANIFESTS:
        for document in yaml.safe_load_all(path.read_text()):
            found[document["kind"]] = document
    return found


def _flag_values(args: list[str]) -> dict[str, str]:
    return {name: value for name, value in itertools.pairwise(args) if name.startswith("--")}


async def _get_routes() -> set[str]:
    from worker.api import WorkerState, build_app
    from worker.settings import Settings

    app = build_app(WorkerState(Settings(model=None, model_ref=None, worker_id="w"), model_id="m"))
    return {route.resource.canonical for route in app.router.routes() if route.method == "GET"}


async def test_the_manifests_name_only_what_the_worker_has():
    docs = _documents()
    deployment, service, pool = docs["Deployment"], docs["Service"], docs["InferencePool"]
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    options = {opt: param for param in serve.params for opt in param.opts}
    flags = _flag_values(container["args"])
    assert flags and set(flags) <= set(options), set(flags) - set(options)
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert set(env) <= {param.envvar for param in serve.params}
    port = int(env["LLM_WORKER_PORT"])
    ports = {entry["name"]: entry["containerPort"] for entry in container["ports"]}
    assert ports == {"http": port, "kv-events": int(flags["--kv-events"].rsplit(":", 1)[1])}
    gets = await _get_routes()
    probes = [container[name]["httpGet"] for name in ("startupProbe", "readinessProbe", "livenessProbe")]
    assert all(p["path"] in gets and p["port"] == "http" for p in probes)
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] in gets and int(annotations["prometheus.io/port"]) == port
    assert pod["spec"]["terminationGracePeriodSeconds"] > float(flags["--drain-timeout"])
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    assert any(flags["--kv-dir"].startswith(mount) for mount in mounts)
    assert flags["--model"].startswith("/models/") and "/models" in mounts
    assert (REPO / "docker" / f"{container['image'].split(':')[1]}.Dockerfile").exists()
    labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items() and service["spec"]["ports"][0]["targetPort"] == "http"
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [port]
