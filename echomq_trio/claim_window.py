"""``ClaimWindow``: how many jobs a consumer asks for per claim, following the backlog (pure).

A claim that comes back full means more are waiting: the next asks for twice as many, up to
``most``. One that comes back short means the queue is nearly drained: the next asks for half
as many, down to ``least``. So a deep queue is drained in large batches (few round trips per
job) and a shallow one in small ones (jobs are not hoarded by one consumer while others idle).
"""

from __future__ import annotations

import attrs

__all__ = ["ClaimWindow"]


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
