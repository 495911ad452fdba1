# llm-worker on NVIDIA GPUs: llama.cpp built with the `cuda` preset of CMakePresets.json by nvcc
# from NVIDIA's pip wheels (no CUDA base image: the same Debian base as the cpu image), for the GPU
# architectures in CUDA_ARCHITECTURES. See docker/README.md.
#   DOCKER_BUILDKIT=1 docker build -f docker/cuda.Dockerfile -t llm-worker:cuda .
#   docker run --gpus all ... llm-worker:cuda
# CUDA 13.0 needs a host driver of 580 or newer.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ARG PRESET=cuda
ARG CUDA_VERSION=13.0
# 90: Hopper (H100, H200). Each architecture adds most of the compile time again; a list such as
# "80-real;86-real;89-real;90-real" covers Ampere to Hopper.
ARG CUDA_ARCHITECTURES=90-real
WORKDIR /src
# First only what the llama.cpp compile needs: its slow layer then survives edits to the rest.
COPY scripts/install-system-deps scripts/install-llama-cpp-libs scripts/build-llama-cpp scripts/install-cuda-toolkit \
     scripts/cuda-cmake-args scripts/
COPY CMakePresets.json pyproject.toml ./
# worker/CMakePresets.json is a link to the top-level file: copy the file itself there.
COPY worker/__init__.py worker/worker_error.py worker/build_presets.py CMakePresets.json worker/
RUN scripts/install-system-deps build ${PRESET}
# The host's CA bundle, when pip must trust a re-signing proxy: a secret, so no layer keeps it.
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    scripts/install-cuda-toolkit ${CUDA_VERSION} /usr/local/cuda
ENV PATH=/usr/local/cuda/bin:$PATH
# The build machine needs no GPU and no driver (scripts/cuda-cmake-args); cuBLAS comes from its wheel.
# llama.cpp is built by the script and with the flags scripts/gpu-bundle uses for a lent GPU (scripts/build-llama-cpp),
# so the GPU check's figures are this image's; llama-cpp-python's Python side runs on those libraries.
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" scripts/install-llama-cpp-libs ${PRESET} /opt/llm-worker \
    && scripts/install-cuda-toolkit --runtime /opt/llm-worker
COPY . .
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    scripts/install-worker /opt/llm-worker

FROM ${BASE_IMAGE}
ARG PRESET=cuda
RUN --mount=type=bind,source=.,target=/src /src/scripts/install-system-deps run ${PRESET} \
    && useradd --system --uid 10001 --create-home --home-dir /home/llm-worker llm-worker \
    && mkdir /models && chown llm-worker: /models
# The venv holds llama.cpp, the CUDA runtime and cuBLAS; the driver comes from the host (--gpus).
COPY --from=builder /opt/llm-worker /opt/llm-worker
ENV PATH=/opt/llm-worker/bin:$PATH \
    LLM_WORKER_CACHE=/models \
    HF_HOME=/models/huggingface \
    LLM_WORKER_HOST=0.0.0.0 \
    LLM_WORKER_PORT=8080 \
    LLM_WORKER_BACKEND=cuda \
    LLM_WORKER_LOG_FORMAT=json \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME /models
USER 10001
WORKDIR /home/llm-worker
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ['LLM_WORKER_PORT']}/health\", timeout=4)"]
ENTRYPOINT ["llm-worker", "serve"]
