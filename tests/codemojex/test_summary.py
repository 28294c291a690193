"""The service's summary line reports the server's memory once it passes a fraction of its
ceiling: against a real embedded server with a tiny ``maxmemory``, filled until it refuses. It
shows the round leaders of the first three rooms, and reads the same whatever the number of
rooms."""

import re
from pathlib import Path
from typing import cast

import pytest

from codemojex import game, ids
from codemojex.game import board
from codemojex.notify import DeliveryStats
from codemojex.run import MEMORY_REPORT_AT, memory_note, summary_line
from echomq_trio import Bus, OutOfMemory, open_bus
from echomq_trio.memory import MemoryUse
from echomq_trio.server import start_server
from echomq_trio.testing import FaultyTransport
from echomq_trio.wire import Wire

MiB = 1 << 20


def test_the_memory_note_appears_past_the_fraction_only() -> None:
    assert MEMORY_REPORT_AT == 0.8
    assert memory_note(MemoryUse(800 * MiB, 1024 * MiB, "noeviction")) == ""
    assert memory_note(MemoryUse(850 * MiB, 1024 * MiB, "noeviction")) == (
        " | server memory 850 MiB of 1.0 GiB (83%)"
    )
    assert memory_note(MemoryUse(1025 * MiB, 1024 * MiB, "noeviction")).endswith(
        "(100%): WRITES REFUSED"
    )
    assert memory_note(MemoryUse(5 * MiB, 0, "noeviction")) == ""  # no ceiling: nothing to say


@pytest.mark.server
async def test_the_summary_line_shows_the_server_s_memory_under_pressure(tmp_path: Path) -> None:
    async with (
        start_server(tmp_path, maxmemory_bytes=4 * MiB) as server,
        open_bus(server.url) as bus,
    ):
        calm = await summary_line(bus, DeliveryStats(), None)
        assert calm.startswith("notices sent 0") and "server memory" not in calm
        assert ", dead 0 |" in calm
        with pytest.raises(OutOfMemory):
            for n in range(20_000):
                await bus.transport.command("SET", f"fill:{n}", "x" * 1000)
        line = await summary_line(bus, DeliveryStats(), None)
        assert re.search(r" \| server memory \d\.\d MiB of 4\.0 MiB \((9\d|1\d\d)%\)", line), line


async def test_the_summary_line_reads_the_first_three_rooms_only(bus: Bus) -> None:
    await bus.transport.command("DEL", "cm:room-index")
    for i in range(5):
        room = await game.create_room(bus, -600 - i, f"Room {i}")
        player = await game.create_player(bus, f"P{i}", 600 + i)
        rnd = await game.start_round(bus, room.id, starts_in_ms=0)
        await board.record(bus, room.id, rnd.id, player.id, 10 + i)

    async def summary() -> tuple[str, list[tuple[str, str]]]:
        counting = FaultyTransport(bus.transport)
        line = await summary_line(Bus(cast(Wire, counting)), DeliveryStats(), None)
        # Sorted: the room records are read concurrently, in any order.
        return line, sorted((c.name, str(c.args[0]) if c.args else "") for c in counting.calls)

    line, reads = await summary()
    assert "round leaders: P0 10% (Room 0), P1 11% (Room 1), P2 12% (Room 2)" in line, line
    await bus.transport.command(
        "ZADD", "cm:room-index", *[a for _ in range(3_000) for a in ("0", ids.new(ids.ROOM))]
    )  # many more rooms, after the first three
    assert await summary() == (line, reads)  # the same line from the same reads
    assert [r for r in reads if r[1] == "cm:room-index"] == [("ZRANGE", "cm:room-index")]
