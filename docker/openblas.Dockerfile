# llm-worker on the CPU with OpenBLAS for prompt processing: llama.cpp built with the
# `openblas` preset of CMakePresets.json. See docker/README.md.
#   DOCKER_BUILDKIT=1 docker build -f docker/openblas.Dockerfile -t llm-worker:openblas .
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ARG PRESET=openblas
WORKDIR /src
# First only what the llama.cpp compile needs: its slow layer then survives edits to the rest.
COPY scripts/install-system-deps scripts/install-llama-cpp-libs scripts/build-llama-cpp scripts/install-batch-invariant scripts/
COPY patches/llama.cpp patches/llama.cpp/
COPY CMakePresets.json pyproject.toml ./
# worker/CMakePresets.json is a link to the top-level file: copy the file itself there.
COPY worker/__init__.py worker/worker_error.py worker/build_presets.py CMakePresets.json worker/
RUN scripts/install-system-deps build ${PRESET}
# The host's CA bundle, when pip must trust a re-signing proxy: a secret, so no layer keeps it.
# llama.cpp with OpenBLAS and our patches (patches/llama.cpp), under llama-cpp-python's Python side (its own
# compile off): fast mode's library.
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    LLAMA_CPP_PATCHES=/src/patches/llama.cpp scripts/install-llama-cpp-libs ${PRESET} /opt/llm-worker
# Exact mode's build of the same patched llama.cpp, into the venv: the worker
# loads it in exact and off modes for every weight type (worker/engine/exactness/build_choice.py). Built with the
# cpu preset, without OpenBLAS: ggml hands BLAS the matrix products of 32 rows or more, so a prompt's rows would
# be summed in another order than the same rows decoded or prefilled in a smaller batch (the image answered a
# cached prompt with other text than the cold one). OpenBLAS serves fast mode's prefill.
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    scripts/install-batch-invariant cpu /opt/llm-worker
COPY . .
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    scripts/install-worker /opt/llm-worker

FROM ${BASE_IMAGE}
ARG PRESET=openblas
RUN --mount=type=bind,source=.,target=/src /src/scripts/install-system-deps run ${PRESET} \
    && useradd --system --uid 10001 --create-home --home-dir /home/llm-worker llm-worker \
    && mkdir /models && chown llm-worker: /models
COPY --from=builder /opt/llm-worker /opt/llm-worker
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
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ['LLM_WORKER_PORT']}/health\", timeout=4)"]
ENTRYPOINT ["llm-worker", "serve"]
