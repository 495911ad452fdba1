"""worker/engine/handoff.py: the engine thread's events reach the loop's thread whole, in order, and none is lost
at close."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from worker.engine.handoff import Handoff


async def test_items_from_another_thread_arrive_in_order_on_the_loops_thread() -> None:
    loop = asyncio.get_running_loop()
    got: list[tuple[int, int]] = []
    done = asyncio.Event()

    def deliver(item: int) -> None:
        got.append((item, threading.get_ident()))
        if item == 999:
            done.set()

    handoff: Handoff[int] = Handoff(loop, deliver)

    def engine() -> None:
        for i in range(1000):
            handoff.post(i)

    thread = threading.Thread(target=engine)
    thread.start()
    await asyncio.wait_for(done.wait(), 10)
    thread.join()
    assert [item for item, _ in got] == list(range(1000))
    assert {ident for _, ident in got} == {threading.get_ident()}
    handoff.close()


async def test_made_off_the_loops_thread_and_posted_before_it_listens() -> None:
    """load_model runs in an executor: the reader is registered later, on the loop's thread."""
    loop = asyncio.get_running_loop()
    got: list[str] = []
    made: list[Handoff[str]] = []

    def load() -> None:
        made.append(Handoff(loop, got.append))
        made[0].post("first")  # before the loop has run add_reader

    await loop.run_in_executor(None, load)
    for _ in range(100):
        if got:
            break
        await asyncio.sleep(0.01)
    assert got == ["first"]
    made[0].close()


async def test_close_delivers_what_is_pending_and_closes_its_pipe() -> None:
    loop = asyncio.get_running_loop()
    got: list[int] = []
    handoff: Handoff[int] = Handoff(loop, got.append)
    await asyncio.sleep(0)  # the reader is registered
    read_fd, write_fd = handoff._read_fd, handoff._write_fd
    engine = threading.Thread(target=lambda: [handoff.post(i) for i in range(3)])
    engine.start()
    engine.join()
    handoff.close()  # as Engine.shutdown does once the engine thread has stopped, before the loop drained the pipe
    for _ in range(100):
        if len(got) == 3:
            break
        await asyncio.sleep(0.01)
    assert got == [0, 1, 2]
    for fd in (read_fd, write_fd):
        with pytest.raises(OSError):
            os.fstat(fd)
