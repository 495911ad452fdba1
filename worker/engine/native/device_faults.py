"""Configurations a device is known to crash on, and what the worker runs there instead, said at startup and on
/health (docs/backends.md, "Vulkan"). Mesa's lavapipe (22.3, Debian 12's) faults in its own queue thread while
flash attention runs over one KV stream per slot, with fast mode's prompts admitted beside each other's decode
rows: the process dies in llama_decode, every stream with it (bench/probes/vulkan_streams.py reproduces it in
about five minutes; with flash attention off, and under llama-server's calls, the same requests run through).
A Mesa bug: ggml's calls pass the Khronos validation layer, and Mesa 25.0.7's lavapipe runs the same requests
through. ggml's description of the device does not say Mesa's version, so the rule holds for every lavapipe."""

from __future__ import annotations

from dataclasses import replace

from worker.engine.exactness.kv_plan import Attention
from worker.engine.native.backends import Device
from worker.worker_error import WorkerError

LAVAPIPE = "llvmpipe"  # how Mesa's software Vulkan device (lavapipe) describes itself
LAVAPIPE_FLASH_ATTN = ("flash attention off: Mesa's lavapipe crashes in flash attention over one KV stream per slot "
                       "(Mesa 22.3; 25.0.7 does not, but the device does not say its version: docs/backends.md, "
                       "Vulkan)")


def device_attention(attention: Attention, device: Device | None, flash_attn_flag: str) -> Attention:
    """The planned attention as the device runs it without faulting: on lavapipe, flash attention off where the
    flag left it to llama.cpp (`auto`), and a WorkerError where it asked for it (`on`)."""
    if device is None or LAVAPIPE not in device.description or attention.flash_attn == "off":
        return attention
    if flash_attn_flag == "on":
        raise WorkerError(f"--flash-attn on on {device.description}: Mesa's lavapipe crashes in flash attention "
                          "over one KV stream per slot (Mesa 22.3; docs/backends.md, Vulkan); use --flash-attn "
                          "auto, which turns it off on this device, or another Vulkan device")
    return replace(attention, flash_attn="off", workaround=LAVAPIPE_FLASH_ATTN)
