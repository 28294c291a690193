"""The service's summary line reports the server's memory once it passes a fraction of its
ceiling: against a real embedded server with a tiny ``maxmemory``, filled until it refuses."""

import re
from pathlib import Path

import pytest

from codemojex.notify import WorkerStats
from codemojex.run import MEMORY_REPORT_AT, memory_note, summary_line
from echomq_trio import OutOfMemory, open_bus
from echomq_trio.memory import MemoryUse
from echomq_trio.server import start_server

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
        calm = await summary_line(bus, WorkerStats(), None)
        assert calm.startswith("notices sent 0") and "server memory" not in calm
        with pytest.raises(OutOfMemory):
            for n in range(20_000):
                await bus.wire.command("SET", f"fill:{n}", "x" * 1000)
        line = await summary_line(bus, WorkerStats(), None)
        assert re.search(r" \| server memory \d\.\d MiB of 4\.0 MiB \((9\d|1\d\d)%\)", line), line
