"""``ServerClock``: how far ahead of the local clock the server's is, from readings; pure.

Theory of operation: a reading of the server's clock (``promote`` answers it to the µs) was taken
after its call was sent, so the server's lead over the local clock is at most the reading less
the local time of the send; by how much less, the call's way out (to a server that slept, a
good part of a millisecond now and then). A wake timed by the last reading alone is early
whenever that reading's way out was longer than the next call's: the promote moves nothing,
and the metronome pays another beat. So the readings of the last ``WINDOW_S`` are kept (at
most ``KEEP``), and the lead is their least upper bound: the least of them, each grown by what
the two clocks may have drifted apart since (``DRIFT`` of its age). It is too high by the
quickest recent call's way out, not the last call's.

A lead taken too high costs only time, never a job run early: the server moves a job only once
its own clock has reached it. A step of the server's clock (which ``clock.Witness`` notices) is
met at the first reading after it: a step back makes that reading's bound the least at once,
and a step ahead shows as a reading whose lead, even if the server read its clock just as its
answer left, exceeds the least upper bound of the others: those are dropped (kept, they would
place every time too late for a window).
"""

from __future__ import annotations

from collections import deque

__all__ = ["DRIFT", "KEEP", "WINDOW_S", "ServerClock"]

WINDOW_S = 1.0  # readings older than this are dropped (but the last)
KEEP = 32  # at most this many readings are kept
DRIFT = 1e-4  # how fast the two clocks are taken to part (100 ppm; NTP slews up to 500)


class ServerClock:
    """Readings of the server's clock (``observe``), and the local time at which the server's
    clock may first read a given time (``local_time_of``). Local times in seconds (trio's
    clock), the server's in ms."""

    def __init__(self) -> None:
        self._readings: deque[tuple[float, float]] = deque(maxlen=KEEP)  # (sent s, lead s)

    def observe(self, sent: float, answered: float, server_ms: float) -> None:
        """A reading ``server_ms`` answered at local ``answered`` to a call sent at ``sent``."""
        least = self._lead(answered)
        if least is not None and server_ms / 1000 - answered > least:
            self._readings.clear()  # the server's clock stepped ahead of every bound kept
        self._readings.append((sent, server_ms / 1000 - sent))

    def _lead(self, now: float) -> float | None:
        while len(self._readings) > 1 and now - self._readings[0][0] > WINDOW_S:
            self._readings.popleft()
        if not self._readings:
            return None
        return min(lead + DRIFT * max(0.0, now - sent) for sent, lead in self._readings)

    def local_time_of(self, server_ms: float, now: float) -> float | None:
        """The earliest local time at which the server's clock may read ``server_ms``, by the
        readings at ``now``; ``None`` before any reading."""
        lead = self._lead(now)
        return None if lead is None else server_ms / 1000 - lead
