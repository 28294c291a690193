"""``sleep_until``: ``trio.sleep_until`` that ends at its deadline to within microseconds.

trio sleeps in ``epoll_wait``, whose timeout Python rounds up to a whole ms: a trio sleep ends up
to a ms after its deadline, the same part of a scheduled job's lateness as the server's whole-ms
clock was. On Linux, ``sleep_until`` arms a ``timerfd`` (``CLOCK_MONOTONIC``, the clock trio's
own reads) for the deadline and waits for it to become readable: the kernel wakes the run loop
at that instant. Elsewhere, when the timer cannot be made, or when the run's clock is not trio's
system clock (a test's ``MockClock``: its time is not the kernel's), it is ``trio.sleep_until``.

It is cancellable as any trio sleep, never ends before its deadline, and (should the timer not
fire) ends at most ``FALLBACK_S`` after it. Each sleep has a descriptor of its own, closed when
the sleep ends; the metronome uses it for the last stretch before a due time (``metronome``).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import trio

__all__ = ["FALLBACK_S", "precise", "sleep_until"]

FALLBACK_S = 0.002  # a sleep whose timer never fired ends this long after its deadline
_CLOCK_MONOTONIC = 1
_TFD_CLOEXEC = 0o2000000
_TFD_NONBLOCK = 0o4000
_TFD_TIMER_ABSTIME = 1
_AHEAD_S = 2e-6  # the timer is set this much later: trio's clock and the kernel's, read apart


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> tuple[object, object] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes = [ctypes.c_int, ctypes.c_int]
    create.restype = ctypes.c_int
    settime.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(_Itimerspec),
        ctypes.POINTER(_Itimerspec),
    ]
    settime.restype = ctypes.c_int
    return create, settime


_TIMERFD = _libc()


def precise() -> bool:
    """Whether ``sleep_until`` can use a timer here (Linux, trio's system clock)."""
    clock = type(trio.lowlevel.current_clock())
    return (
        _TIMERFD is not None and clock.__name__ == "SystemClock" and clock.__module__[:5] == "trio."
    )


def _arm(deadline: float) -> int | None:
    """A timerfd that becomes readable at trio time ``deadline``; ``None`` if none can be made."""
    if _TIMERFD is None:
        return None
    create, settime = _TIMERFD
    fd: int = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)  # type: ignore[operator]
    if fd < 0:
        return None
    at = deadline - trio.current_time() + time.monotonic() + _AHEAD_S
    at = max(at, 1e-6)  # an it_value of zero would disarm the timer
    sec = int(at)
    spec = _Itimerspec(_Timespec(0, 0), _Timespec(sec, int((at - sec) * 1e9)))
    if settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:  # type: ignore[operator]
        os.close(fd)
        return None
    return fd


async def sleep_until(deadline: float) -> None:
    """Sleep until trio time ``deadline`` (see the module's docstring)."""
    fd = _arm(deadline) if precise() else None
    if fd is None:
        await trio.sleep_until(deadline)
        return
    try:
        with trio.move_on_at(deadline + FALLBACK_S):
            await trio.lowlevel.wait_readable(fd)
    finally:
        trio.lowlevel.notify_closing(fd)
        os.close(fd)
    if trio.current_time() < deadline:  # never early, whatever the clocks' reading apart
        await trio.sleep_until(deadline)
