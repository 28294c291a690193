"""The stores the notification worker reads on a real server: a chat's streak of 429s (set at
its first 429, its length told by the key's remaining lifetime, ended by a delivery) and the
migrated chats it sends to instead."""

from __future__ import annotations

import pytest

from codemojex.keys import queue_app_keys
from codemojex.notify import streak
from codemojex.notify.migration import migrate_chat, moved_to
from echomq_trio import Bus
from tests.support import wait_for


async def test_a_streak_grows_from_its_first_429_and_a_delivery_ends_it(
    bus: Bus, queue: str
) -> None:
    assert streak.streak_key(bus, -5, queue=queue) == queue_app_keys(queue).flooded(-5)
    assert streak.streak_key(bus, -5, queue=queue) == bus.keys(queue).app("flooded:-5")
    # The first 429 starts the streak (a loaded machine may take a while between the two calls).
    assert await streak.flooded_for_ms(bus, -5, 60_000, queue=queue) < 500
    # Later 429s read the time since the first; the key is not set again.
    await wait_for(lambda: _longer_than(bus, queue, 600))
    assert await streak.flooded_for_ms(bus, -6, 60_000, queue=queue) < 500  # chats apart
    await streak.end_streak(bus, -5, queue=queue)
    assert await bus.command("EXISTS", streak.streak_key(bus, -5, queue=queue)) == 0
    assert await streak.flooded_for_ms(bus, -5, 60_000, queue=queue) < 500  # a new streak
    with pytest.raises(ValueError, match="ttl_ms must be a positive int"):
        await streak.flooded_for_ms(bus, -5, 0, queue=queue)


async def _longer_than(bus: Bus, queue: str, ms: int) -> bool:
    return await streak.flooded_for_ms(bus, -5, 60_000, queue=queue) > ms


async def test_moved_to_reads_the_recorded_move(bus: Bus, queue: str) -> None:
    assert await moved_to(bus, -100, queue=queue) is None
    await migrate_chat(bus, -100, -1_000_100, queue=queue)
    assert await moved_to(bus, -100, queue=queue) == -1_000_100
    assert await moved_to(bus, -1_000_100, queue=queue) is None
