"""A whole queue's controls: pause and resume (claims answer nothing while paused, for flat and
lane jobs; enqueues, promotions and the settlement of running jobs go on; a parked consumer
stays parked and resume wakes it), and the queue-wide cap on jobs in flight, enforced in the
claim script across every consumer and process (checked on the server), beside the lanes' own
limits."""

import itertools
import json
import re
from collections.abc import Awaitable, Callable
from functools import partial

import httpx
import pytest
import trio
from prometheus_client import CollectorRegistry

from echomq_trio import Bus, Consumer, Job, ids, jobs, lanes, open_bus, queues
from echomq_trio.dashboard import Dashboard
from echomq_trio.jobs import Outcome
from echomq_trio.keys import queue_keys
from echomq_trio.metrics import QueueReadings, render
from echomq_trio.testing import FaultyTransport
from tests.echomq_trio.cap_proc import hwm_key
from tests.support import echomq, parse, read_line, spawn, value, wait_for

pytestmark = pytest.mark.cluster


def jid() -> str:
    return ids.generate("JOB")


async def _active(bus: Bus, queue: str) -> int:
    return int(await bus.transport.command("ZCARD", queue_keys(queue).active))


# --- pause and resume ----------------------------------------------------------------------------


async def test_a_paused_queue_claims_nothing_and_enqueues_land(bus: Bus, queue: str) -> None:
    flat, lane = jid(), jid()
    await jobs.enqueue(bus, queue, "f", job_id=flat)
    await lanes.enqueue(bus, queue, "A", "a", job_id=lane)
    assert await queues.control(bus, queue) == queues.QueueControl(None, None)
    assert await queues.pause(bus, queue) is True
    assert await queues.pause(bus, queue) is False  # paused already: its start is kept
    control = await queues.control(bus, queue)
    assert control.paused and control.paused_since_ms is not None
    assert await jobs.claim(bus, queue, 10) == []
    # Enqueues, lane enqueues and promotions go on while paused.
    later, due = jid(), jid()
    await jobs.enqueue(bus, queue, "g", job_id=later)
    await lanes.enqueue(bus, queue, "B", "b", job_id=jid())
    await jobs.enqueue_in(bus, queue, "d", 0, job_id=due)
    assert (await jobs.promote(bus, queue)).moved == 1
    assert await jobs.claim(bus, queue, 10) == []
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active) == (5, 0)
    assert await queues.resume(bus, queue) is True
    assert await queues.resume(bus, queue) is False
    assert not (await queues.control(bus, queue)).paused
    claimed = await jobs.claim(bus, queue, 10)
    assert len(claimed) == 5 and {flat, lane, later, due} <= {j.id for j in claimed}


async def test_pause_and_resume_are_events(bus: Bus, queue: str) -> None:
    from echomq_trio import events

    await queues.pause(bus, queue)
    await queues.resume(bus, queue)
    await queues.set_limit(bus, queue, 4)
    kinds = [(e.kind, e.subject) for e in await events.read(bus, queue)]
    assert kinds == [("queue_paused", queue), ("queue_resumed", queue), ("queue_limit", queue)]


async def test_a_consumer_parks_on_a_paused_queue_and_resume_wakes_it(bus: Bus, queue: str) -> None:
    await jobs.enqueue_many(bus, queue, [(jid(), "x") for _ in range(3)])
    await queues.pause(bus, queue)
    seen: list[str] = []

    async def handler(job: Job) -> None:
        seen.append(job.id)

    faulty = FaultyTransport(bus.transport)
    consumer = Consumer(Bus(faulty), queue, handler, beat_ms=5_000)

    def parks() -> int:
        return sum(c.name == "BLPOP" for c in faulty.calls)

    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: parks() >= 1)
        for _ in range(3):  # each enqueue wakes it: it claims nothing and parks again
            before = parks()
            await jobs.enqueue(bus, queue, "y", job_id=jid())
            await wait_for(lambda before=before: parks() > before)  # type: ignore[misc]
        assert seen == []
        # No busy loop: every claim after the first came after a park (a wake token or a beat).
        names = [c.name for c in faulty.calls if c.name in ("claim", "BLPOP")]
        assert all(a != b for a, b in itertools.pairwise(names)), names
        assert await queues.resume(bus, queue) is True
        with trio.fail_after(2):  # woken by resume, not by the 5 s beat
            await wait_for(lambda: len(seen) == 6)
        nursery.cancel_scope.cancel()


async def test_jobs_running_when_the_queue_is_paused_finish_and_settle(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue_many(bus, queue, [(jid(), "x") for _ in range(3)])
    go_on = trio.Event()
    done: list[str] = []

    async def handler(job: Job) -> None:
        await go_on.wait()
        done.append(job.id)

    consumer = Consumer(bus, queue, handler, concurrency=3, prefetch=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().held == 3)
        await queues.pause(bus, queue)
        late = jid()
        await jobs.enqueue(bus, queue, "late", job_id=late)
        go_on.set()
        await wait_for(lambda: consumer.statistics().acked == 3)

        async def settled() -> bool:
            c = await jobs.counts(bus, queue)
            return (c.active, c.completed_total, c.pending) == (0, 3, 1)

        await wait_for(settled)
        assert late not in done
        await queues.resume(bus, queue)
        await wait_for(lambda: late in done)
        nursery.cancel_scope.cancel()


# --- the cap on jobs in flight -------------------------------------------------------------------


async def test_a_claim_hands_out_at_most_the_cap_less_what_is_in_flight(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue_many(bus, queue, [(jid(), "x") for _ in range(10)])
    assert await queues.set_limit(bus, queue, 3) == (3, 0)
    assert (await queues.control(bus, queue)).max_active == 3
    first = await jobs.claim(bus, queue, 2)
    assert len(first) == 2
    assert len(await jobs.claim(bus, queue, 10)) == 1  # 3 - 2
    assert await jobs.claim(bus, queue, 10) == []
    assert await jobs.ack(bus, queue, first[0].id, first[0].token) is Outcome.ACKED
    assert len(await jobs.claim(bus, queue, 10)) == 1
    # Lowered below what runs: nothing is taken back, and nothing more is claimed.
    assert await queues.set_limit(bus, queue, 1) == (1, 3)
    assert await jobs.claim(bus, queue, 10) == []
    assert await queues.set_limit(bus, queue, None) == (None, 3)
    assert (await queues.control(bus, queue)).max_active is None
    assert len(await jobs.claim(bus, queue, 10)) == 6


async def test_the_cap_and_the_lanes_limits_both_hold(bus: Bus, queue: str) -> None:
    for g in "AB":
        await lanes.enqueue_many(bus, queue, g, [(jid(), g) for _ in range(4)], limit=2)
    await jobs.enqueue_many(bus, queue, [(jid(), "f") for _ in range(4)])
    await queues.set_limit(bus, queue, 3)
    held = await jobs.claim(bus, queue, 10)
    assert len(held) == 3
    await queues.set_limit(bus, queue, 100)
    held += await jobs.claim(bus, queue, 100)
    in_flight = {s.group: s.in_flight for s in await lanes.status(bus, queue, ["A", "B"])}
    assert in_flight == {"A": 2, "B": 2}  # each lane's limit holds under a larger cap
    assert sum(j.group is None for j in held) == 4
    assert await _active(bus, queue) == len(held) == 8


async def test_settling_a_job_under_the_cap_wakes_a_parked_consumer(bus: Bus, queue: str) -> None:
    await queues.set_limit(bus, queue, 1)
    await jobs.enqueue_many(bus, queue, [(jid(), "x") for _ in range(5)])
    # The enqueue's wake tokens used up, as by consumers that found the queue drained.
    await bus.transport.command("DEL", queue_keys(queue).wake)
    seen: list[str] = []

    async def handler(job: Job) -> None:
        seen.append(job.id)

    consumer = Consumer(bus, queue, handler, concurrency=4, beat_ms=5_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        # One at a time, each claim cut short by the cap; every ack wakes the parked claimer
        # (without the wake, each job would wait for the 5 s beat).
        with trio.fail_after(4):
            await wait_for(lambda: len(seen) == 5)
        nursery.cancel_scope.cancel()


async def test_bad_limits_are_refused_before_any_io(bus: Bus, queue: str) -> None:
    with pytest.raises(ValueError, match="max_active must be >= 1, got 0"):
        await queues.set_limit(bus, queue, 0)
    with pytest.raises(TypeError, match="max_active must be an int, got bool"):
        await queues.set_limit(bus, queue, True)
    with pytest.raises(TypeError, match="max_active must be an int, got str"):
        await queues.set_limit(bus, queue, "3")  # type: ignore[arg-type]
    assert not (await jobs.counts(bus, queue)).exists


CAP_PROC = "tests.echomq_trio.cap_proc"
JOBS = 150


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_the_cap_holds_across_three_worker_processes_and_when_lowered(
    bus: Bus, server_url: str, queue: str
) -> None:
    """Three processes, 4 handlers each, a cap of 3: never more than 3 jobs in flight, as the
    server counts them (each handler raises a high-water mark of ``active``'s size on the server
    as it starts); then, under load, the cap raised to 6 and lowered to 2: once the jobs in
    flight fall to 2, never more than 2 again."""
    mark = hwm_key(queue)

    async def active() -> int:
        return await _active(bus, queue)

    async def hwm() -> int:
        return int(await bus.transport.command("GET", mark) or 0)

    async def completed() -> int:
        return (await jobs.counts(bus, queue)).completed_total

    await queues.set_limit(bus, queue, 3)
    await jobs.enqueue_many(bus, queue, [(jid(), "x") for _ in range(JOBS)])
    worker = partial(spawn, server_url, queue, "--handle-ms", "50", module=CAP_PROC)
    async with worker() as w1, worker() as w2, worker() as w3:
        for w in (w1, w2, w3):
            assert await read_line(w) == "ready"
        await wait_for(lambda: _at_least(completed, 30), timeout=60)
        assert await hwm() == 3  # reached, never passed
        await queues.set_limit(bus, queue, 6)
        await wait_for(lambda: _at_least(hwm, 4), timeout=60)  # the raised cap is used
        await queues.set_limit(bus, queue, 2)
        await wait_for(lambda: _at_most(active, 2), timeout=60)
        await bus.transport.command("SET", mark, "0")  # from here on, at most 2
        await wait_for(lambda: _at_least(completed, JOBS), timeout=60)
        assert 1 <= await hwm() <= 2
        assert (await jobs.counts(bus, queue)).pending == 0


async def _at_least(read: Callable[[], Awaitable[int]], n: int) -> bool:
    return await read() >= n


async def _at_most(read: Callable[[], Awaitable[int]], n: int) -> bool:
    return await read() <= n


@pytest.mark.slow
async def test_the_cli_pauses_resumes_and_caps_and_stats_shows_them(
    bus: Bus, server_url: str, queue: str
) -> None:
    await jobs.enqueue(bus, queue, "x", job_id=jid())

    async def run(*args: str) -> tuple[int, str, str]:
        done = await echomq("--url", server_url, *args)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    code, out, _ = await run("stats", queue)
    assert code == 0 and re.search(r"^paused\s+no$", out, re.M), out
    assert re.search(r"^max_active\s+none$", out, re.M), out
    assert (await run("pause", queue))[:2] == (0, f"paused {queue}\n")
    assert (await run("pause", queue))[:2] == (0, f"{queue} was paused already\n")
    assert (await run("limit", queue, "5"))[:2] == (
        0, f"{queue}: at most 5 jobs in flight (0 in flight now)\n"
    )  # fmt: skip
    code, out, _ = await run("stats", queue)
    assert re.search(r"^paused\s+\S+Z \((now|.+ ago)\)$", out, re.M), out
    assert re.search(r"^max_active\s+5$", out, re.M), out
    stats = json.loads((await run("--json", "stats", queue))[1])
    assert stats["control"]["max_active"] == 5 and stats["control"]["paused_since_ms"] > 0
    assert await jobs.claim(bus, queue, 1) == []
    assert (await run("resume", queue))[:2] == (0, f"resumed {queue}\n")
    assert (await run("resume", queue))[:2] == (0, f"{queue} was not paused\n")
    assert json.loads((await run("--json", "limit", queue, "none"))[1]) == {
        "queue": queue, "max_active": None, "active": 0
    }  # fmt: skip
    assert await queues.control(bus, queue) == queues.QueueControl(None, None)
    await run("pause", queue)
    (line,) = [x for x in (await run("queues"))[1].splitlines() if x.startswith(queue + " ")]
    assert line.split()[-3:] == ["yes", "-", "1"]  # paused, no cap, one partition
    (mine,) = [q for q in json.loads((await run("--json", "queues"))[1]) if q["queue"] == queue]
    assert mine["control"]["paused_since_ms"] > 0 and mine["control"]["max_active"] is None
    code, _, err = await run("limit", queue, "0")
    assert code == 2 and err == "echomq: limit takes a number of jobs (>= 1) or none, got 0\n"
    code, _, err = await run("pause", "t.never-used")
    assert code == 1 and "unknown queue 't.never-used'" in err


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_the_dashboard_shows_and_switches_the_pause_and_the_cap_and_deletes(
    standalone_only: str, queue: str
) -> None:
    """In a real headless Chromium: the queue's pause and cap are shown, the page pauses and
    resumes the queue and deletes a scheduled job with its token; without the token the server
    refuses and nothing changes."""
    from tools.browser import open_page

    token = "queue-control-token"
    doomed = jid()
    async with open_bus(standalone_only) as bus, httpx.AsyncClient() as client:
        await jobs.enqueue_in(bus, queue, "later", 3_600_000, job_id=doomed)
        dashboard = Dashboard(bus, token, sample_s=0.2, names_every_s=0.2)
        async with trio.open_nursery() as nursery:
            url = await nursery.start(dashboard.serve, "127.0.0.1", 0)
            for path in ("pause_queue", "resume_queue", f"delete?job={doomed}&x=1"):
                sep = "&" if "?" in path else "?"
                refused = await client.post(f"{url}/{path}{sep}queue={queue}")
                assert refused.status_code == 403, refused.text
            assert not (await queues.control(bus, queue)).paused
            async with open_page() as page:
                await page.goto(f"{url}/?queue={queue}#token={token}")

                async def text(selector: str) -> str:
                    return str(
                        await page.evaluate(
                            f"(document.querySelector('{selector}') || {{}}).textContent || ''"
                        )
                    )

                async def shows(selector: str, part: str) -> bool:
                    return part in await text(selector)

                await wait_for(partial(shows, "#queue-state", "claiming"), timeout=30, step=0.1)
                assert await text("#queue-cap") == "no cap on jobs in flight"
                await page.evaluate("document.querySelector('#pause-queue').click()")
                await wait_for(partial(shows, "#queue-state", "paused since"), timeout=30)
                assert (await queues.control(bus, queue)).paused
                await queues.set_limit(bus, queue, 4)
                await wait_for(partial(shows, "#queue-cap", "at most 4 jobs in flight"), 30)
                await page.evaluate("document.querySelector('#resume-queue').click()")
                await wait_for(partial(shows, "#queue-state", "claiming"), timeout=30)
                assert not (await queues.control(bus, queue)).paused
                await page.evaluate("window.confirm = () => true")
                await wait_for(partial(shows, "#scheduled", doomed), timeout=30)
                await page.evaluate(
                    f"document.querySelector('tr[data-job=\"{doomed}\"] .delete').click()"
                )
                await wait_for(partial(shows, "#flash", f"{doomed}: deleted"), timeout=30)
                assert await jobs.get_job(bus, queue, doomed) is None
            nursery.cancel_scope.cancel()


async def test_metrics_show_the_pause_and_the_cap(bus: Bus, queue: str) -> None:
    other = queue + ".other"
    await jobs.enqueue(bus, other, "x", job_id=jid())
    await queues.pause(bus, queue)
    await queues.set_limit(bus, queue, 7)
    registry = CollectorRegistry()
    readings = QueueReadings(bus, [queue, other], registry)
    got = parse((await render(registry, [readings])).decode())
    assert value(got, "echomq_queue_paused", queue=queue) == 1
    assert value(got, "echomq_queue_max_active", queue=queue) == 7
    assert value(got, "echomq_queue_paused", queue=other) == 0
    assert ("echomq_queue_max_active", (("queue", other),)) not in got  # no cap: no sample
    await queues.resume(bus, queue)
    got = parse((await render(registry, [readings])).decode())
    assert value(got, "echomq_queue_paused", queue=queue) == 0
