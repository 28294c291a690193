"""``_timer.sleep_until``: never ends before its deadline, with the kernel's timer (Linux) and
without it (a ``MockClock``, or no timer to be had); cancellable; leaves no descriptor open.
How late it ends is the benchmarks' business (``tools/bench_lateness_parts.py``), not a test's."""

from __future__ import annotations

import os
import sys

import pytest
import trio
import trio.testing

from echomq_trio import _timer

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd: Linux")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@linux_only
async def test_a_timed_sleep_never_ends_before_its_deadline_and_closes_its_timer() -> None:
    assert _timer.precise()
    before = _open_fds()
    for wait in (0.0, -0.001, 0.0003, 0.002, 0.0105):
        deadline = trio.current_time() + wait
        await _timer.sleep_until(deadline)
        assert trio.current_time() >= deadline
    assert _open_fds() == before


@linux_only
async def test_a_timed_sleep_is_cancellable_and_closes_its_timer() -> None:
    before = _open_fds()
    with trio.CancelScope() as scope:
        scope.deadline = trio.current_time() + 0.001  # long before the sleep's
        await _timer.sleep_until(trio.current_time() + 3600)
    assert scope.cancelled_caught
    assert _open_fds() == before


async def test_under_a_mock_clock_it_is_trio_s_own_sleep(
    autojump_clock: trio.testing.MockClock,
) -> None:
    assert not _timer.precise()  # the mock clock's time is not the kernel's
    start = trio.current_time()
    await _timer.sleep_until(start + 30)
    assert trio.current_time() == start + 30


async def test_without_a_timer_it_is_trio_s_own_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_timer, "_TIMERFD", None)
    assert not _timer.precise()
    deadline = trio.current_time() + 0.001
    await _timer.sleep_until(deadline)
    assert trio.current_time() >= deadline
