# llm-worker on any GPU with a Vulkan driver: llama.cpp built with the `vulkan` preset
# of CMakePresets.json. Ubuntu 24.04, as llama.cpp's own Vulkan image, for Vulkan headers
# recent enough for it; on an older base (Debian 12) scripts/vulkan-cmake-args brings
# newer headers. Mesa's drivers (lavapipe among them) are in the image. See docker/README.md.
#   DOCKER_BUILDKIT=1 docker build -f docker/vulkan.Dockerfile -t llm-worker:vulkan .
#   docker run --device /dev/dri ... llm-worker:vulkan --backend vulkan
ARG BASE_IMAGE=ubuntu:24.04

FROM ${BASE_IMAGE} AS builder
ARG PRESET=vulkan
WORKDIR /src
# First only what the llama.cpp compile needs: its slow layer then survives edits to the rest.
COPY scripts/install-system-deps scripts/install-llama-cpp-libs scripts/build-llama-cpp scripts/vulkan-cmake-args \
     scripts/
COPY CMakePresets.json pyproject.toml ./
# worker/CMakePresets.json is a link to the top-level file: copy the file itself there.
COPY worker/__init__.py worker/worker_error.py worker/build_presets.py CMakePresets.json worker/
RUN scripts/install-system-deps build ${PRESET}
# The host's CA bundle, when pip must trust a re-signing proxy: a secret, so no layer keeps it.
# llama.cpp built as the GPU check's bundle builds it (scripts/build-llama-cpp; PRESET=vulkan scripts/gpu-bundle
# rehearses the check on lavapipe), llama-cpp-python's Python side on those libraries.
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    scripts/install-llama-cpp-libs ${PRESET} /opt/llm-worker
COPY . .
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    scripts/install-worker /opt/llm-worker

FROM ${BASE_IMAGE}
ARG PRESET=vulkan
RUN --mount=type=bind,source=.,target=/src /src/scripts/install-system-deps run ${PRESET} \
    && useradd --system --uid 10001 --create-home --home-dir /home/llm-worker llm-worker \
    && mkdir /models && chown llm-worker: /models
COPY --from=builder /opt/llm-worker /opt/llm-worker
# NVIDIA_DRIVER_CAPABILITIES: with --gpus all, the NVIDIA runtime also mounts its Vulkan driver.
ENV PATH=/opt/llm-worker/bin:$PATH \
    LLM_WORKER_CACHE=/models \
    HF_HOME=/models/huggingface \
    LLM_WORKER_HOST=0.0.0.0 \
    LLM_WORKER_PORT=8080 \
    LLM_WORKER_BACKEND=vulkan \
    LLM_WORKER_LOG_FORMAT=json \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics
VOLUME /models
USER 10001
WORKDIR /home/llm-worker
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ['LLM_WORKER_PORT']}/health\", timeout=4)"]
ENTRYPOINT ["llm-worker", "serve"]
