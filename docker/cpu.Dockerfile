# llm-worker on any x86-64 or arm64 CPU: llama.cpp built with the `cpu` preset of
# CMakePresets.json (portable, no -march=native). See docker/README.md.
#   DOCKER_BUILDKIT=1 docker build -f docker/cpu.Dockerfile -t llm-worker:cpu .
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ARG PRESET=cpu
WORKDIR /src
# First only what the llama.cpp compile needs: its slow layer then survives edits to the rest.
COPY scripts/install-system-deps scripts/install-llama-cpp-libs scripts/build-llama-cpp scripts/install-batch-invariant scripts/
COPY patches/llama.cpp patches/llama.cpp/
COPY CMakePresets.json pyproject.toml ./
# worker/CMakePresets.json is a link to the top-level file: copy the file itself there.
COPY worker/__init__.py worker/worker_error.py worker/build_presets.py CMakePresets.json worker/
RUN scripts/install-system-deps build ${PRESET}
# The host's CA bundle, when pip must trust a re-signing proxy: a secret, so no layer keeps it
# (docker build --secret id=pip_cert,src=/etc/ssl/certs/ca-certificates.crt).
# llama.cpp compiled once, with our patches (patches/llama.cpp), as make install does: its libraries under
# llama-cpp-python's Python side (its own compile off), and the same build's copy where exact and off modes load it
# with the batch-invariant switch on (worker/engine/exactness/build_choice.py); the second script compiles nothing.
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    LLAMA_CPP_PATCHES=/src/patches/llama.cpp scripts/install-llama-cpp-libs ${PRESET} /opt/llm-worker \
    && scripts/install-batch-invariant ${PRESET} /opt/llm-worker
COPY . .
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    scripts/install-worker /opt/llm-worker

FROM ${BASE_IMAGE}
ARG PRESET=cpu
RUN --mount=type=bind,source=.,target=/src /src/scripts/install-system-deps run ${PRESET} \
    && useradd --system --uid 10001 --create-home --home-dir /home/llm-worker llm-worker \
    && mkdir /models && chown llm-worker: /models
COPY --from=builder /opt/llm-worker /opt/llm-worker
# Downloads (registry packages, the Hugging Face cache) land in the volume; bind your own
# GGUF files there too. Listen on all interfaces: docker publishes the port.
ENV PATH=/opt/llm-worker/bin:$PATH \
    LLM_WORKER_CACHE=/models \
    HF_HOME=/models/huggingface \
    LLM_WORKER_HOST=0.0.0.0 \
    LLM_WORKER_PORT=8080 \
    LLM_WORKER_LOG_FORMAT=json
VOLUME /models
USER 10001
WORKDIR /home/llm-worker
EXPOSE 8080
# 503 while loading, 200 once warm; follows LLM_WORKER_PORT (set the port there, not with --port).
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ['LLM_WORKER_PORT']}/health\", timeout=4)"]
ENTRYPOINT ["llm-worker", "serve"]
