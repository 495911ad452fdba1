#!/usr/bin/env bash
# Build a Debian bookworm base image without a container registry: debootstrap a
# minimal root file system (with Python, as the official python:3.11-slim-bookworm
# image has) and `docker import` it. For machines that reach a Debian mirror but no
# registry; pass the result to any Dockerfile here as --build-arg BASE_IMAGE=...
#
# Usage: docker/base-image.sh [TAG]          (default llm-worker-base:bookworm; needs root)
# Env:   DEBIAN_MIRROR   default http://deb.debian.org/debian
set -euo pipefail

tag="${1:-llm-worker-base:bookworm}"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

# python3-venv: the build scripts install into a venv, which Debian's python3 lacks without it.
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >&2
# The official image's apt sources include security updates; keep the same.
echo "deb ${DEBIAN_MIRROR:-http://deb.debian.org/debian}-security bookworm-security main" \
    >> "$root/etc/apt/sources.list"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$tag" >&2
echo "$tag"
