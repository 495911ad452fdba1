"""The slow Docker tests' client and image builds (tests/e2e/test_docker.py, tests/e2e/test_gpu_backends.py)."""

import os
import shutil
import subprocess

from tests.conftest import REPO

DOCKER = os.environ.get("DOCKER", "docker")  # a client that can use BuildKit (RUN --mount)


def docker_available() -> bool:
    return bool(shutil.which(DOCKER)) and subprocess.run([DOCKER, "info"], capture_output=True).returncode == 0


def build_image(name: str, timeout: float = 3600) -> str:
    """docker/NAME.Dockerfile built as llm-worker:NAME-test. LLM_WORKER_BASE_IMAGE: a local base where no registry
    is reachable; PIP_CERT: a re-signing proxy's CA, given to pip as a build secret."""
    tag = f"llm-worker:{name}-test"
    args = []
    if base := os.environ.get("LLM_WORKER_BASE_IMAGE"):
        args += ["--build-arg", f"BASE_IMAGE={base}"]
    if cert := os.environ.get("PIP_CERT"):
        args += ["--secret", f"id=pip_cert,src={cert}"]
    subprocess.run([DOCKER, "build", "-f", f"docker/{name}.Dockerfile", "-t", tag, *args, "."], cwd=REPO,
                   check=True, env={**os.environ, "DOCKER_BUILDKIT": "1"}, timeout=timeout)
    return tag
