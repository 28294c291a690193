"""The embedded server's memory: a ceiling and no eviction, so a write past the ceiling is
refused (and logged as such) while every earlier key stays; ``memory_use`` reports how full it
is; job rows are kept compact. Each on a real server (a tiny ``maxmemory`` for the ceiling)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from echomq_trio import Bus, OutOfMemory, ids, jobs, memory, open_bus
from echomq_trio.server import (
    AOF_REWRITE_MIN_SIZE,
    AOF_REWRITE_PERCENTAGE,
    COMPACT_ROWS,
    MAXMEMORY_CAP_BYTES,
    default_maxmemory_bytes,
    machine_memory_bytes,
    server_config,
    start_server,
)

MiB = 1 << 20


def test_the_config_has_a_ceiling_no_eviction_and_rewrite_thresholds(tmp_path: Path) -> None:
    text = server_config(tmp_path, 6379, "pw", maxmemory_bytes=64 * MiB)
    lines = dict(line.split(" ", 1) for line in text.splitlines())
    assert lines["maxmemory"] == f'"{64 * MiB}"'
    assert lines["maxmemory-policy"] == '"noeviction"'
    assert lines["auto-aof-rewrite-percentage"] == f'"{AOF_REWRITE_PERCENTAGE}"'
    assert lines["auto-aof-rewrite-min-size"] == f'"{AOF_REWRITE_MIN_SIZE}"'
    with pytest.raises(ValueError, match="maxmemory_bytes must be an int of at least"):
        server_config(tmp_path, 6379, "pw", maxmemory_bytes=1000)


def test_the_default_ceiling_is_a_quarter_of_the_machine_at_most_1_gib() -> None:
    machine = machine_memory_bytes()
    assert machine is not None and machine > 0
    assert default_maxmemory_bytes() == min(MAXMEMORY_CAP_BYTES, machine // 4)


def test_memory_use_parses_info_and_sizes_read_well() -> None:
    info = "# Memory\r\nused_memory:3300000\r\nused_memory_human:3.15M\r\nmaxmemory:4194304\r\n"
    use = memory.parse_info_memory(info + "maxmemory_policy:noeviction\r\n")
    assert use == memory.MemoryUse(3_300_000, 4 * MiB, "noeviction")
    assert use.fraction == pytest.approx(3_300_000 / (4 * MiB))
    assert memory.MemoryUse(5, 0, "noeviction").fraction is None
    sizes = [memory.size_text(n) for n in (512, 3_300_000, 850 * MiB, 1 << 30)]
    assert sizes == ["512 B", "3.1 MiB", "850 MiB", "1.0 GiB"]


@pytest.mark.server
async def test_the_embedded_server_runs_with_the_default_ceiling(tmp_path: Path) -> None:
    async with open_bus(data_dir=tmp_path) as bus:
        use = await memory.memory_use(bus)
        assert (use.max_bytes, use.policy) == (default_maxmemory_bytes(), "noeviction")
        assert 0 < use.used_bytes < use.max_bytes


@pytest.mark.server
async def test_the_embedded_server_keeps_job_rows_compact(tmp_path: Path) -> None:
    async with open_bus(data_dir=tmp_path) as bus:
        for name, value in COMPACT_ROWS:
            config = await bus.transport.command("CONFIG", "GET", name)  # a map in RESP3
            assert config == {name.encode(): value.encode()}
        # A row with a 500-byte payload (a hash table at the servers' default of 64) is one
        # listpack ("ziplist" on Redis 6.2).
        job = ids.generate("JOB")
        await jobs.enqueue(bus, "rows", b"x" * 500, job_id=job)
        encoding = await bus.transport.command("OBJECT", "ENCODING", bus.keys("rows").job(job))
        assert encoding in (b"listpack", b"ziplist")


@pytest.mark.server
async def test_writes_past_the_ceiling_are_refused_and_logged_and_nothing_is_evicted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        start_server(tmp_path, maxmemory_bytes=4 * MiB) as server,
        open_bus(server.url) as bus,
    ):
        before = await memory.memory_use(bus)
        assert (before.max_bytes, before.policy) == (4 * MiB, "noeviction")
        written = 0
        with caplog.at_level(logging.WARNING, "echomq_trio.wire"):
            with pytest.raises(OutOfMemory, match="out of memory and refused a write"):
                for written in range(20_000):
                    await bus.transport.command("SET", f"k:{written}", "x" * 1000)
            # A script's write is refused too, whole: the job is not there.
            job = ids.generate("JOB")
            with pytest.raises(OutOfMemory):
                await jobs.enqueue(bus, "full", "payload", job_id=job)
        assert 1000 < written < 20_000
        # Nothing was evicted to make room: every key written before the refusal is there.
        present = await bus.transport.command("EXISTS", *[f"k:{n}" for n in range(written)])
        assert present == written == await bus.transport.command("DBSIZE")
        assert await jobs.get_job(bus, "full", job) is None
        # Logged as such, once for the two refusals (at most one line per 10 s).
        lines = [r.getMessage() for r in caplog.records if "out of memory" in r.getMessage()]
        assert len(lines) == 1 and "maxmemory" in lines[0], lines
        # How full it is, for the service's summary line: at the ceiling.
        use = await memory.memory_use(bus)
        assert use.fraction is not None and use.fraction >= 0.95
        # Freeing memory lets writes in again.
        for start in range(0, written, 1000):
            await bus.transport.command("DEL", *[f"k:{n}" for n in range(start, start + 1000)])
        assert (
            await jobs.enqueue(bus, "full", "payload", job_id=job)
        ).outcome == jobs.Outcome.ENQUEUED


@pytest.mark.cluster
async def test_memory_use_on_every_topology(bus: Bus) -> None:
    use = await memory.memory_use(bus)  # a cluster answers per primary: the fullest is reported
    assert use.used_bytes > 0 and use.policy == "noeviction"
    assert use.max_bytes == MAXMEMORY_CAP_BYTES  # the test servers' config: the cap
