"""``DedicatedThread``: every call on one thread, one at a time, in order; errors come back; a
cancelled caller waits for its call to finish."""

import threading

import pytest
import trio
import trio.testing

from codemojex.audit.dedicated import DedicatedThread


async def test_calls_from_many_tasks_run_on_one_thread_one_at_a_time() -> None:
    thread = DedicatedThread("test")
    thread.start()
    seen: list[int] = []
    inside = [0]
    overlapped = []

    def call(n: int) -> int:
        inside[0] += 1
        overlapped.append(inside[0] > 1)
        seen.append(threading.get_ident())
        inside[0] -= 1
        return n * 2

    results: dict[int, int] = {}

    async def caller(n: int) -> None:
        for i in range(20):
            results[n * 100 + i] = await thread.run(call, n * 100 + i)
            if i % 5 == 0:
                await trio.to_thread.run_sync(lambda: None)  # trio's own workers meanwhile

    async with trio.open_nursery() as nursery:
        for n in range(8):
            nursery.start_soon(caller, n)
    thread.stop()
    assert results == {k: 2 * k for k in results} and len(results) == 160
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()
    assert not any(overlapped)


async def test_errors_come_back_and_a_stopped_thread_refuses() -> None:
    thread = DedicatedThread("test")
    with pytest.raises(RuntimeError, match="not started"):
        await thread.run(int, "1")
    thread.start()
    with pytest.raises(ValueError):
        await thread.run(int, "x")
    assert await thread.run(int, "7") == 7
    thread.stop()
    thread.start()  # again: a new thread, with a queue of its own
    assert await thread.run(int, "8") == 8
    thread.stop()


async def test_a_cancelled_caller_waits_for_its_call_to_finish() -> None:
    thread = DedicatedThread("test")
    thread.start()
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []
    unwound = trio.Event()

    def slow() -> str:
        started.set()
        release.wait(30)
        finished.append(True)
        return "done"

    async def caller(scope: trio.CancelScope) -> None:
        with scope:
            await thread.run(slow)
            await trio.lowlevel.checkpoint()
        unwound.set()

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller, scope)
        await trio.to_thread.run_sync(started.wait, 30)
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert not unwound.is_set()  # cancelled, it still waits for its call
        release.set()
        await unwound.wait()
    assert scope.cancelled_caught and finished == [True]
    assert await thread.run(str, 5) == "5"  # the thread goes on
    thread.stop()
