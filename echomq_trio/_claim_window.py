"""How much an untuned consumer claims (pure): ``ClaimWindow`` follows the backlog, ``HoldAhead``
the handlers' pace.

``ClaimWindow``: a claim that comes back full means more are waiting: the next asks for twice
as many, up to ``most``. One that comes back short means the queue is nearly drained: the next
asks for half as many, down to ``least``. So a deep queue is drained in large batches (few round
trips per job) and a shallow one in small ones (jobs are not hoarded by one consumer while
others idle).

``HoldAhead``: how many jobs to hold ahead of the handlers: about ``horizon_s`` of their work
at the pace they have been finishing jobs (measured over spans of at least ``span_s``, each
span weighing as much as all before it together), between ``least`` and ``most``. Fast handlers
get a deep buffer, so claims and acks stay in flight while they work (why 512 at most: the
docs' benchmarks, "Measurements behind the design"); slow ones get a shallow one, so a job
does not wait behind them while another consumer idles.
"""

from __future__ import annotations

import math

import attrs

__all__ = ["ClaimWindow", "HoldAhead"]


@attrs.define
class ClaimWindow:
    least: int
    most: int
    size: int = attrs.field(default=0)

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.least <= self.most:
            raise ValueError(f"need 1 <= least <= most, got {self.least}, {self.most}")
        if not self.least <= self.size <= self.most:
            self.size = self.least

    def claimed(self, asked: int, got: int) -> None:
        """Record a claim that asked for ``asked`` jobs and got ``got``."""
        if got >= asked and asked >= self.size:
            self.size = min(self.most, self.size * 2)
        elif got < asked:
            self.size = max(self.least, min(self.size, asked) // 2)


@attrs.define
class HoldAhead:
    least: int
    most: int
    horizon_s: float
    span_s: float
    pace: float | None = None  # jobs finished per second; None until a first span is measured
    _since: float | None = None  # the start of the span being measured
    _finished_then: int = 0

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.least <= self.most:
            raise ValueError(f"need 0 <= least <= most, got {self.least}, {self.most}")
        if not (self.horizon_s > 0 and self.span_s > 0):
            raise ValueError(f"need horizon_s, span_s > 0, got {self.horizon_s}, {self.span_s}")

    def observe(self, now: float, finished: int) -> None:
        """Record that ``finished`` jobs (a running total) had been finished by ``now``."""
        if self._since is None:
            self._since, self._finished_then = now, finished
            return
        span = now - self._since
        if span < self.span_s:
            return
        pace = (finished - self._finished_then) / span
        self.pace = pace if self.pace is None else (self.pace + pace) / 2
        self._since, self._finished_then = now, finished

    @property
    def allowance(self) -> int:
        """Jobs to hold ahead now."""
        if self.pace is None:
            return self.least
        return max(self.least, min(self.most, math.ceil(self.pace * self.horizon_s)))
