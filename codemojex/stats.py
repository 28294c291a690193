"""Statistics snapshots (pure): every long-lived part (the notification worker, the rate
limiter, the feed, the archiver's folder and replicator) keeps its counters in a frozen attrs
value and replaces it as it counts, so ``statistics()`` hands out the value itself: a snapshot
that never changes under the reader, as ``echomq_trio.Consumer.statistics()`` does."""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

__all__ = ["added"]

S = TypeVar("S")


def added(stats: S, **more: int) -> S:
    """``stats`` (a frozen attrs value) with each named counter raised by its amount."""
    changes: dict[str, Any] = {name: getattr(stats, name) + n for name, n in more.items()}
    return attrs.evolve(stats, **changes)  # type: ignore[misc]
