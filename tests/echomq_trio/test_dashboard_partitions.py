"""The dashboard on a partitioned queue of 3: one row in the queue list (its partitions' counts
added up, a partitions badge), and a queue page of the merged view: lanes page by page through
every partition, scheduled and dead jobs and recurring schedules of every partition, a job by id
found in its partition, and actions (replay, cancel, a lane's resume, the queue's pause) routed
to the partition that holds what they name. Over plain HTTP, then in a real headless Chromium."""

from __future__ import annotations

from functools import partial

import httpx
import pytest
import trio

from echomq_trio import Bus, jobs, partitions, queues
from echomq_trio.dashboard import TOKEN_HEADER, Dashboard
from echomq_trio.partitions import PartitionedQueue
from tests.support import wait_for
from tools.browser import open_page

TOKEN = "dashboard-test-token"
HEADERS = {TOKEN_HEADER.decode(): TOKEN}


def _dashboard(bus: Bus) -> Dashboard:
    return Dashboard(bus, TOKEN, sample_s=0.2, names_every_s=0.2)


def _lanes_by_partition(pq: PartitionedQueue, each: int) -> list[list[str]]:
    """``each`` lanes in every partition, by partition."""
    by: list[list[str]] = [[] for _ in pq.names]
    for group in (f"chat{i:03}" for i in range(500)):
        part = by[pq.names.index(pq.partition_of(group))]
        if len(part) < each:
            part.append(group)
    return by


async def _dead_in(bus: Bus, queue: str, error: str) -> str:
    job_id = (await jobs.enqueue(bus, queue, "x")).id
    (job,) = await jobs.claim(bus, queue, 1)
    await jobs.retry(bus, queue, job.id, job.token, 0, 1, error)
    return job_id


async def _listed(client: httpx.AsyncClient, url: str, queue: str) -> list[dict[str, object]]:
    """The queue list's rows whose name starts with ``queue``, from every page of names."""
    rows, after = [], ""
    while True:
        page = (await client.get(f"{url}/state.json?count=100&queues_after={after}")).json()
        rows += [q for q in page["queues"] if q["name"].startswith(queue)]
        if not page["queues_next"]:
            return rows
        after = page["queues_next"]


async def test_a_partitioned_queue_s_state_is_one_queue_s(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    dead = [await _dead_in(bus, q, f"HTTP 50{i}") for i, q in enumerate(pq.names)]  # first
    by = _lanes_by_partition(pq, 3)
    for groups in by:
        for group in groups:
            await pq.lane_enqueue(group, f"in {group}")
    later = [(await pq.enqueue_in(f"later {i}", 3_600_000)).id for i in range(3)]
    for i, groups in enumerate(by):
        await pq.register(f"r{i}", every_ms=60_000 * (i + 1), template="x", group=groups[0])
    async with trio.open_nursery() as nursery, httpx.AsyncClient() as client:
        url = await nursery.start(_dashboard(bus).serve, "127.0.0.1", 0)

        async def one_row() -> bool:
            rows = await _listed(client, url, queue)
            return [r["name"] for r in rows] == [queue] and rows[0]["counts"] != {}

        await wait_for(one_row, timeout=30, step=0.1)
        (row,) = await _listed(client, url, queue)
        assert row["partitions"] == 3
        assert row["counts"]["pending"] == 9 and row["counts"]["dead"] == 3  # type: ignore[index]

        groups: list[str] = []
        sizes: list[int] = []
        query = f"queue={queue}&count=2"
        while True:  # the lanes, page by page through every partition
            detail = (await client.get(f"{url}/state.json?{query}")).json()["queue"]
            groups += [r["group"] for r in detail["lanes"]["rows"]]
            sizes.append(len(detail["lanes"]["rows"]))
            if detail["lanes"]["next"] is None:
                break
            query = f"queue={queue}&count=2&lanes_after={detail['lanes']['next']}"
        assert sorted(groups) == sorted(g for part in by for g in part)
        assert len(groups) == len(set(groups)), "each lane once"
        assert sizes[:4] == [2, 2, 2, 2], "a page is filled from the next partitions"
        whole = (await client.get(f"{url}/state.json?queue={queue}")).json()["queue"]["lanes"]
        assert (len(whole["rows"]), whole["next"]) == (9, None)  # every partition's, one page

        detail = (await client.get(f"{url}/state.json?queue={queue}")).json()["queue"]
        assert detail["partitions"] == list(pq.names)
        assert {r["id"] for r in detail["scheduled"]["rows"]} == set(later)
        assert {r["id"] for r in detail["dead"]["rows"]} == set(dead)
        assert [r["name"] for r in detail["repeats"]["rows"]] == ["r0", "r1", "r2"]
        one = (await client.get(f"{url}/state.json?queue={queue}&job={dead[2]}")).json()
        assert one["queue"]["job"]["found"]["error"] == "HTTP 502"
        bad = await client.get(f"{url}/state.json?queue={queue}&lanes_after=p1%2Fnope")
        assert bad.status_code == 400

        replay = f"{url}/replay?queue={queue}&job={dead[2]}"
        assert (await client.post(replay, headers=HEADERS)).json() == {"outcome": "replayed"}
        cancel = f"{url}/cancel?queue={queue}&job={later[1]}"
        assert (await client.post(cancel, headers=HEADERS)).json() == {"outcome": "cancelled"}
        group = by[2][1]
        await pq.pause_lane(group)
        resume = f"{url}/resume?queue={queue}&lane={group}"
        assert (await client.post(resume, headers=HEADERS)).json() == {"outcome": "resumed"}
        assert not (await pq.lane_status([group]))[0].paused
        pause = f"{url}/pause_queue?queue={queue}"
        assert (await client.post(pause, headers=HEADERS)).json() == {"outcome": "paused"}
        assert [(await queues.control(bus, q)).paused for q in pq.names] == [True] * 3
        c = await pq.counts()
        assert (c.dead, c.cancelled) == (2, 1)
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_the_page_shows_a_partitioned_queue_as_one(bus: Bus, queue: str) -> None:
    queue = "!" + queue  # first by name, so on the first page among the other tests' queues
    pq = await partitions.create(bus, queue, 3)
    dead = [await _dead_in(bus, q, f"HTTP 50{i}") for i, q in enumerate(pq.names)]
    await pq.enqueue_many([f"j{i}" for i in range(6)])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(_dashboard(bus).serve, "127.0.0.1", 0)
        async with open_page() as page:
            await page.goto(f"{url}/?x=1#token={TOKEN}")
            cell = f'tr[data-queue="{queue}"]'

            async def text(selector: str) -> str:
                return str(await page.evaluate(
                    f"(document.querySelector('{selector}') || {{}}).textContent || ''"
                ))  # fmt: skip

            async def shows(selector: str, wanted: str) -> bool:
                return wanted in await text(selector)

            await wait_for(partial(shows, f"{cell} td[data-count=pending]", "6"), timeout=30,
                           step=0.1)  # fmt: skip
            assert await text(f"{cell} td[data-count=dead]") == "3"
            assert "3 partitions" in await text(f"{cell} .partitions")
            rows = await page.evaluate(
                f"Array.from(document.querySelectorAll('#queues tr')).filter("
                f"r => (r.dataset.queue || '').startsWith('{queue}')).length"
            )
            assert rows == 1, "the partitions folded into one row"
            await page.evaluate(f"document.querySelector('{cell} a').click()")
            await wait_for(partial(shows, "#detail-title", "(3 partitions)"), timeout=30, step=0.1)
            for job_id in dead:
                await wait_for(partial(shows, "#dead", job_id), timeout=30, step=0.1)
            await page.evaluate(
                f"document.querySelector('tr[data-job=\"{dead[1]}\"] .replay').click()"
            )
            await wait_for(partial(shows, "#flash", f"{dead[1]}: replayed"), timeout=30,
                           step=0.1)  # fmt: skip
            info = await jobs.get_job(bus, pq.names[1], dead[1])
            assert info is not None and info.state == "pending"
            await wait_for(partial(shows, f"{cell} td[data-count=dead]", "2"), timeout=30,
                           step=0.1)  # fmt: skip
        nursery.cancel_scope.cancel()
