"""Remote devices: model layers on llama.cpp's ggml-rpc-server processes on other hosts, through llama.cpp's own
distributed backend, as `llama-server --rpc` does (common/arg.cpp)."""

from __future__ import annotations

import ctypes
import functools
import socket

import structlog

from worker.engine.native.backends import build_info, ggml
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)

PROBE_TIMEOUT_S = 5.0
_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)  # ggml_backend_reg_t (const char * endpoint)


def check_rpc(endpoints: tuple[str, ...]) -> None:
    """Fail in one line, before anything binds or loads, if --rpc cannot work."""
    if not endpoints:
        return
    info = build_info()
    if not info.rpc:
        raise WorkerError(
            f"--rpc needs llama.cpp built with RPC, and this build has only: {', '.join(info.backends)}; "
            "rebuild it with the rpc preset after your backend's (llm-worker build-backend cpu rpc)"
        )
    for endpoint in endpoints:
        _probe(endpoint)


def _probe(endpoint: str) -> None:
    # ggml aborts the whole process when it cannot connect, so ask the network first.
    host, _, port = endpoint.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise WorkerError(
            f"cannot reach the rpc server {endpoint}: {exc.strerror or exc}; "
            f"start `ggml-rpc-server --host 0.0.0.0 --port {port}` on {host} (see the README's RPC setup)"
        ) from None


@functools.cache
def rpc_devices(endpoints: tuple[str, ...]) -> tuple[int, ...]:
    """Register each server's devices with ggml (once per process), through the RPC registry's
    ggml_backend_rpc_add_server, before the model loads; their ggml_backend_dev_t pointers. The loader then splits
    layers over the devices it is given, by their free memory."""
    lib = ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    add_server = _ADD_SERVER(lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server"))
    devices: list[int] = []
    for endpoint in endpoints:
        server = add_server(endpoint.encode())
        if not server:
            raise WorkerError(f"the rpc server {endpoint} offers no devices; check what it was started with")
        lib.ggml_backend_register(server)
        found = [lib.ggml_backend_reg_dev_get(server, i) for i in range(lib.ggml_backend_reg_dev_count(server))]
        log.info("rpc_server_added", endpoint=endpoint, devices=len(found))
        devices += found
    return tuple(devices)
