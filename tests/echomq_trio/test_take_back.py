"""A restart takes back its own leases at once: every job leased by the bus of a data
directory's previous owner (recorded as its holder) goes back to pending when the next owner
opens the directory, whatever the leases' deadlines; a job leased by any other bus (a worker
reaching the server by URL) stays where it is. Real embedded servers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from echomq_trio import jobs, lanes, open_bus
from echomq_trio._opening import HOLDER_FILE

pytestmark = pytest.mark.server


async def test_the_next_owner_of_a_data_dir_takes_back_what_the_last_one_held(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "echomq_trio.bus")
    data = tmp_path / "data"
    async with open_bus(data_dir=data) as first:
        await jobs.enqueue_many(first, "flat", ["a", "b", "c"])
        for chat in ("1", "2"):
            await lanes.enqueue(first, "chats", chat, f"to {chat}", limit=1)
        await lanes.enqueue(first, "chats", "1", "behind", limit=1)
        held = await jobs.claim(first, "flat", 2, lease_ms=600_000)
        held += await jobs.claim(first, "chats", 2, lease_ms=600_000)
        assert (data / HOLDER_FILE).read_text().strip() == first.holder
        # Another worker, on the same server by its URL, holds the third flat job.
        async with open_bus(first.server.url if first.server else "") as other:
            (theirs,) = await jobs.claim(other, "flat", 1, lease_ms=600_000)
        # The owner ends without settling or releasing (as a process killed would).
    async with open_bus(data_dir=data) as second:
        assert second.holder != first.holder
        flat = await jobs.counts(second, "flat")
        assert (flat.pending, flat.active) == (2, 1)  # theirs is still leased
        assert (await jobs.get_job(second, "flat", theirs.id)).state == "active"  # type: ignore[union-attr]
        chats = await jobs.counts(second, "chats")
        assert (chats.pending, chats.active) == (3, 0)
        for job in held:  # pending again, attempts unchanged (the next claim raises them)
            info = await jobs.get_job(second, job.queue, job.id)
            assert info is not None and (info.state, info.attempts) == ("pending", job.attempts)
        # Their lanes are free again and keep their order.
        again = await jobs.claim(second, "chats", 3)
        assert sorted(j.text for j in again) == ["to 1", "to 2"]  # chat 1's second waits
    told = [r.getMessage() for r in caplog.records if "took back" in r.getMessage()]
    assert told == [
        f"took back 4 job(s) the previous owner of {data} held when it ended (chats: 2, flat: "
        "2): they run again now instead of when their leases expire"
    ]


async def test_a_holder_s_jobs_are_taken_back_a_page_at_a_time(tmp_path: Path) -> None:
    async with open_bus(data_dir=tmp_path / "data") as bus:
        await jobs.enqueue_many(bus, "q", [f"job {i}" for i in range(25)])
        async with open_bus(bus.server.url if bus.server else "") as other:
            mine = await jobs.claim(bus, "q", 10, lease_ms=600_000)
            theirs = await jobs.claim(other, "q", 10, lease_ms=600_000)
            more = await jobs.claim(bus, "q", 5, lease_ms=600_000)
            assert len(mine) + len(more) == 15 and len(theirs) == 10
            assert await jobs.take_back(bus, "q", bus.holder, batch=4) == 15
            assert await jobs.take_back(bus, "q", bus.holder, batch=4) == 0
            c = await jobs.counts(bus, "q")
            assert (c.pending, c.active) == (15, 10)


async def test_taking_back_pages_by_deadline_so_other_holders_renewing_skip_none(
    tmp_path: Path,
) -> None:
    """While the pages are read, another bus renews its leases past the dead holder's: paged by
    deadline, not by rank, none of the dead holder's jobs is passed over."""
    async with open_bus(data_dir=tmp_path / "data") as bus:
        await jobs.enqueue_many(bus, "q", [f"job {i}" for i in range(30)])
        async with open_bus(bus.server.url if bus.server else "") as other:
            theirs = await jobs.claim(other, "q", 15, lease_ms=10_000)  # due first
            mine = await jobs.claim(bus, "q", 15, lease_ms=600_000)
            renewing = trio.Event()

            async def renew() -> None:
                items = [(j.id, j.token) for j in theirs]
                for lease in range(1_200_000, 1_300_000, 1_000):  # ever later, past mine
                    await jobs.extend(other, "q", items, lease)
                    renewing.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(renew)
                await renewing.wait()
                assert await jobs.take_back(bus, "q", bus.holder, batch=2) == len(mine)
                nursery.cancel_scope.cancel()
            c = await jobs.counts(bus, "q")
            assert (c.pending, c.active) == (15, 15)
