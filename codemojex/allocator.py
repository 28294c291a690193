"""Memory given back: the service returns to the operating system what a crowd of live viewers
took, once the crowd has gone.

Theory of operation. A websocket viewer of the feed or an event stream of the bus dashboard
costs the process some 30-50 KB of small Python objects (its tasks, cancel scopes, protocol
state, buffers) while it is connected; 2,500 of them, some 80 MB. When they leave, Python frees
every one of those objects (the feed and the dashboard keep nothing per viewer once it has
gone, and their tests hold them to it), but the memory stays with the process:

* CPython's own small-object allocator (pymalloc) gives an arena of 1 MiB back only when every
  object in it is free, and the service never stops allocating (the game, the notices, the
  samples of the dashboard), so a few long-lived objects made while the crowd was there keep
  nearly every arena of the crowd's alive: measured, the 73 arenas 2,500 viewers added all
  stayed after they had left, and the process stayed 80 MB above where it was for as long as
  it ran.
* glibc's ``malloc`` keeps freed memory in its heap too, but ``malloc_trim`` gives back every
  free page of it, wherever it lies.

So the service runs with ``PYTHONMALLOC=malloc`` (Python's objects from glibc; ``relaunch``
starts the process again with it unless the operator set ``PYTHONMALLOC`` themselves), and a
``Trimmer`` watches how many viewers are connected: once they fell by ``min_drop`` or more from
their highest since it last looked so, and then stopped falling for ``settle_s``, it collects
cyclic garbage (``gc.collect``) and calls ``malloc_trim(0)``, and again a minute later.

glibc's heap has a cost of its own: a service that allocates and frees all the time spreads its
free chunks over pages that ``free`` never gives back (only the top of the heap goes back by
itself): under a steady load the process grows for hours, though Python's own heap is flat, and
one ``malloc_trim(0)`` gives back most of it (the docs' benchmarks measure it). So the
``Trimmer`` also calls ``malloc_trim(0)`` (no garbage collection) every ``tidy_every_s`` (a
minute), whatever the viewers do: each such call has little to give back and takes a few
milliseconds. Both are Linux and glibc only; elsewhere ``trim`` only
collects garbage, ``malloc_trim`` does nothing and ``relaunch`` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import sys
import time
from collections.abc import Callable

import attrs
import trio

__all__ = ["GLIBC", "Departures", "Trimmer", "TrimmerStats", "malloc_trim", "relaunch", "trim"]

log = logging.getLogger("codemojex.allocator")

ALLOCATOR_ENV = "PYTHONMALLOC"


def relaunch() -> None:
    """Start this process again (``execv``, same pid and arguments) with ``PYTHONMALLOC=malloc``,
    unless ``PYTHONMALLOC`` is set already (by the operator, or by the first start) or this is
    not Linux. Call it first thing, before any other side effect."""
    if ALLOCATOR_ENV in os.environ or not sys.platform.startswith("linux"):
        return
    if not sys.executable or not sys.orig_argv:
        return
    os.environ[ALLOCATOR_ENV] = "malloc"
    os.execv(sys.executable, sys.orig_argv)


def _glibc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if name is None:
        return None
    try:
        trim_fn: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    return trim_fn


_MALLOC_TRIM = _glibc_trim()
GLIBC = _MALLOC_TRIM is not None  # whether malloc_trim can give memory back here


def malloc_trim() -> bool:
    """glibc's ``malloc_trim(0)``: give the free pages of every malloc arena back; ``True`` if
    some were (``False`` also where there is no glibc)."""
    return bool(_MALLOC_TRIM(0)) if _MALLOC_TRIM is not None else False


def trim() -> bool:
    """Collect cyclic garbage, then ``malloc_trim``; whether memory was given back."""
    gc.collect()
    return malloc_trim()


@attrs.define
class Departures:
    """When to trim (pure): fed the number of connections now and then, it says ``True`` once
    they have fallen by ``min_drop`` or more from their highest since it last said so."""

    min_drop: int = 50
    high: int = 0

    def seen(self, connected: int) -> bool:
        self.high = max(self.high, connected)
        if self.high - connected < self.min_drop:
            return False
        self.high = connected
        return True


@attrs.frozen
class TrimmerStats:
    trims: int = 0  # after viewers left: garbage collected, then malloc_trim
    given_back: int = 0  # trims after which malloc_trim said it gave memory back
    tidies: int = 0  # the periodic malloc_trim alone
    busy_s: float = 0.0  # time spent in both, all told


class Trimmer:
    """Run with ``nursery.start_soon(trimmer.run)``; ``connected`` counts the viewers now. It
    looks every ``every_s``; after a fall of ``min_drop`` viewers it trims once the count has
    stopped falling for ``settle_s`` (a viewer's objects are freed a moment after it is
    counted out, as its connection closes), and once more ``again_s`` later (trio holds a
    timeout that has ended until it would have expired: the feed's pings, 10-20 s, the page
    server's handshake timeout, 60 s; what those held goes back then). Every ``tidy_every_s``
    it calls ``tidy_fn`` (``malloc_trim`` alone) whatever the viewers do (see the module's
    docstring)."""

    def __init__(
        self,
        connected: Callable[[], int],
        *,
        min_drop: int = 50,
        every_s: float = 1.0,
        settle_s: float = 5.0,
        again_s: float = 65.0,
        trim_fn: Callable[[], bool] = trim,
        tidy_every_s: float = 60.0,
        tidy_fn: Callable[[], bool] = malloc_trim,
    ) -> None:
        self.connected = connected
        self.every_s = every_s
        self.trim_after_s = (settle_s, settle_s + again_s)
        self._departures = Departures(min_drop)
        self._trim = trim_fn
        self.tidy_every_s = tidy_every_s
        self._tidy = tidy_fn
        self._stats = TrimmerStats()

    def statistics(self) -> TrimmerStats:
        return self._stats

    async def run(self) -> None:
        due: list[float] = []  # when to trim, once the viewers stopped leaving
        tidy_at = trio.current_time() + self.tidy_every_s
        while True:
            await trio.sleep(self.every_s)
            now = trio.current_time()
            if self._departures.seen(self.connected()):
                due = [now + after for after in self.trim_after_s]
            if due and now >= due[0]:
                del due[0]
                gave, took = _timed(self._trim)
                self._stats = attrs.evolve(self._stats, trims=self._stats.trims + 1,
                                           given_back=self._stats.given_back + gave,
                                           busy_s=self._stats.busy_s + took)  # fmt: skip
                log.debug("viewers left: memory trimmed (%s)", "given back" if gave else "none")
                tidy_at = now + self.tidy_every_s  # just done
            elif now >= tidy_at:
                _, took = _timed(self._tidy)
                self._stats = attrs.evolve(self._stats, tidies=self._stats.tidies + 1,
                                           busy_s=self._stats.busy_s + took)  # fmt: skip
                tidy_at = now + self.tidy_every_s


def _timed(call: Callable[[], bool]) -> tuple[bool, float]:
    """``call()`` and how long it took (``time.perf_counter``: a blocking call's own time)."""
    started = time.perf_counter()
    done = call()
    return done, time.perf_counter() - started
