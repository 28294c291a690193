"""Repair and restore of the embedded server's append-only file, on real servers, with ``echomq``
run as an operator runs it: a damaged file is refused at the start, and at a supervised
restart, in one line that names the repair command; ``echomq repair`` refuses while the data
directory's owner holds it, keeps a copy, cuts the file at the damage, says what it cut and
records it; ``echomq restore`` puts an older copy in place (never a damaged one) and records
it."""

import shutil
from pathlib import Path

import pytest
import trio

from echomq_trio import DamagedAppendOnlyFile, jobs, open_bus, repair
from echomq_trio.server import start_server
from servicekit.datadir import DataDir
from tests.support import damage_aof, echomq

pytestmark = pytest.mark.server

QUEUE = "repaired"
JOBS = 200
ACKED = 100


def copies(data_dir: Path, prefix: str) -> list[Path]:
    """The files as they were before a repair (``damaged-aof``) or restore (``replaced-aof``)."""
    return sorted(data_dir.glob(f"{prefix}-*"))


async def enqueue(data_dir: Path, n: int) -> None:
    async with start_server(data_dir) as server, open_bus(server.url) as bus:
        for i in range(n):
            await jobs.enqueue(bus, QUEUE, f"job {i} " * 8)


async def counts(data_dir: Path) -> jobs.Counts:
    async with start_server(data_dir) as server, open_bus(server.url) as bus:
        return await jobs.counts(bus, QUEUE)


@pytest.mark.timeout_s(120)
async def test_a_damaged_file_is_refused_naming_the_command_that_repairs_it(
    tmp_path: Path,
) -> None:
    async with start_server(tmp_path) as server, open_bus(server.url) as bus:
        for i in range(JOBS):  # one write each (a script call), then one claim and 100 acks
            await jobs.enqueue(bus, QUEUE, f"job {i} " * 8)
        for job in await jobs.claim(bus, QUEUE, ACKED, lease_ms=600_000):
            await jobs.ack(bus, QUEUE, job.id, job.token)
    path, at = damage_aof(tmp_path)
    damaged = path.read_bytes()

    with pytest.raises(DamagedAppendOnlyFile) as refused:
        async with start_server(tmp_path):
            pass
    message = str(refused.value)
    assert "\n" not in message and "redis-check-aof" not in message
    assert f"`echomq repair --data-dir {tmp_path}`" in message, message

    with DataDir.own(tmp_path):  # the service holds it: refused, nothing touched
        busy = await echomq("repair", "--data-dir", str(tmp_path))
    assert busy.returncode == 1 and b"in use by process" in busy.stderr, busy.stderr
    assert path.read_bytes() == damaged and not copies(tmp_path, "damaged-aof")
    assert repair.read_records(tmp_path) == []

    done = await echomq("repair", "--data-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (kept,) = copies(tmp_path, "damaged-aof")
    assert (kept / path.name).read_bytes() == damaged  # the copy was made before the cut
    (record,) = repair.read_records(tmp_path)
    assert record.kind == "repair" and record.file == path.name and record.kept == str(kept)
    assert record.cut_at is not None and record.cut_at <= at  # at the damage's transaction
    assert path.stat().st_size == record.cut_at
    assert record.cut_bytes == len(damaged) - record.cut_at
    said = done.stdout.decode()
    assert f"cut {record.cut_bytes:,} bytes" in said
    assert f"{record.commands:,} commands in {record.writes:,} writes" in said, said

    # The server starts again, with what was written before the damage; what the repair said it
    # cut is what is missing: enqueues, the claim, acks.
    c = await counts(tmp_path)
    enqueued = c.pending + c.active + c.completed_total
    lost = (JOBS - enqueued) + (ACKED - c.completed_total) + (0 if c.active or c.completed_total
                                                               else 1)  # fmt: skip
    assert lost > 0 and record.writes == lost, (record, c)

    again = await echomq("repair", "--data-dir", str(tmp_path))
    assert again.returncode == 0 and b"nothing to repair" in again.stdout
    assert len(repair.read_records(tmp_path)) == 1


@pytest.mark.timeout_s(120)
async def test_damage_the_checker_cannot_cut_is_refused_and_nothing_is_changed(
    tmp_path: Path,
) -> None:
    """Damage in the base snapshot (not the last file the server loads, and a snapshot cannot
    be cut), or a manifest naming a file that is gone: the repair says to restore an older copy
    and changes nothing. The base is checked with the snapshot checker on either server
    (Valkey 9's append-only file checker misreads Valkey's own snapshots)."""
    await enqueue(tmp_path, 20)
    folder = tmp_path / "appendonlydir"
    (base,) = folder.glob("*.base.rdb")
    whole = await echomq("repair", "--data-dir", str(tmp_path))
    assert whole.returncode == 0 and b"nothing to repair" in whole.stdout, whole.stderr

    data = base.read_bytes()
    base.write_bytes(data[:20] + bytes([data[20] ^ 0xFF]) + data[21:])  # its checksum fails
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    refused = await echomq("repair", "--data-dir", str(tmp_path))
    assert refused.returncode == 1, refused.stderr
    said = refused.stderr.decode()
    assert "cannot cut it" in said and f"`echomq restore --data-dir {tmp_path}" in said, said
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not copies(tmp_path, "damaged-aof") and repair.read_records(tmp_path) == []

    base.write_bytes(data)
    (incr,) = folder.glob("*.incr.aof")
    incr.unlink()
    gone = await echomq("repair", "--data-dir", str(tmp_path))
    assert gone.returncode == 1 and f"names {incr.name}, which is not in" in gone.stderr.decode()
    assert not copies(tmp_path, "damaged-aof") and repair.read_records(tmp_path) == []


@pytest.mark.timeout_s(120)
async def test_a_restart_that_meets_a_damaged_file_gives_up_at_once(tmp_path: Path) -> None:
    with pytest.raises(DamagedAppendOnlyFile) as refused:
        async with start_server(tmp_path) as server:
            async with open_bus(server.url) as bus:
                for i in range(50):
                    await jobs.enqueue(bus, QUEUE, f"job {i}")
            damage_aof(tmp_path)  # the disk goes bad under the running server
            server.kill()  # the supervisor restarts it: the server refuses the file
            await trio.sleep_forever()
    assert server.restarts == 0  # no restart succeeded, and none was tried again
    assert f"`echomq repair --data-dir {tmp_path}`" in str(refused.value)


@pytest.mark.timeout_s(120)
async def test_restore_puts_an_older_copy_in_place_and_records_it(tmp_path: Path) -> None:
    data, backup, bad = tmp_path / "data", tmp_path / "backup", tmp_path / "bad"
    await enqueue(data, 10)
    shutil.copytree(data / "appendonlydir", backup / "appendonlydir")  # the server is stopped
    await enqueue(data, 15)
    shutil.copytree(backup, bad)
    damage_aof(bad)

    refused = await echomq("restore", "--data-dir", str(data), "--from", str(bad))
    assert refused.returncode == 1 and b"damaged itself" in refused.stderr, refused.stderr
    assert repair.read_records(data) == [] and (await counts(data)).pending == 25

    done = await echomq("restore", "--data-dir", str(data), "--from", str(backup))
    assert done.returncode == 0, done.stderr
    (replaced,) = copies(data, "replaced-aof")
    (record,) = repair.read_records(data)
    assert record.kind == "restore" and record.kept == str(replaced)
    assert record.source == str(backup / "appendonlydir")
    assert f"restored the append-only files of {data}" in done.stdout.decode()
    assert (await counts(data)).pending == 10  # the older copy's

    # Files put in place by hand: the restore is recorded, nothing else changes.
    marked = await echomq("restore", "--data-dir", str(data))
    assert marked.returncode == 0 and b"replaced by hand" in marked.stdout, marked.stderr
    first, second = repair.read_records(data)
    assert second.kind == "restore" and second.source is None
    assert repair.rewound_at_ms(data) == second.at_ms >= first.at_ms
    assert (await counts(data)).pending == 10
