"""Progress: ``await job.progress(value)`` from a handler, coalesced by the consumer into one
write per interval, seen by ``get_job`` and the events stream while the handler runs, fenced by
the job's lease; a consumer whose handlers never report makes no call for it."""

from __future__ import annotations

import math

import pytest
import trio

from echomq_trio import Bus, Consumer, Job, events, jobs, protocol
from echomq_trio.jobs import Outcome
from echomq_trio.testing import FaultyTransport, scripts
from tests.support import wait_for

pytestmark = pytest.mark.cluster


async def test_a_reader_sees_progress_while_the_handler_runs(bus: Bus, queue: str) -> None:
    job_id = (await jobs.enqueue(bus, queue, "long")).id
    go = trio.Event()

    async def handler(job: Job) -> None:
        await job.progress({"step": 3, "of": 10})
        await go.wait()

    async def seen() -> bool:
        info = await jobs.get_job(bus, queue, job_id)
        return info is not None and info.progress == {"step": 3, "of": 10}

    after = await events.last_id(bus, queue)
    consumer = Consumer(bus, queue, handler, progress_interval_s=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(seen)  # while the handler still waits
        info = await jobs.get_job(bus, queue, job_id)
        assert info is not None and info.state == "active"
        go.set()
        await wait_for(lambda: consumer.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    told = [e for e in await events.read(bus, queue, after) if e.kind == "progress"]
    assert [(e.subject, e.fields["progress"]) for e in told] == [(job_id, '{"step":3,"of":10}')]


async def test_a_tight_loop_of_reports_makes_few_writes(bus: Bus, queue: str) -> None:
    """10,000 reports: the first is written at once, the rest coalesce until the job settles,
    when its last value is written before the ack (kept in its completed row)."""
    await jobs.keep_results(bus, queue, 60_000)
    job_id = (await jobs.enqueue(bus, queue, "loop")).id

    async def handler(job: Job) -> None:
        for i in range(10_000):
            await job.progress(i)

    faulty = FaultyTransport(bus.transport)
    consumer = Consumer(Bus(faulty), queue, handler, progress_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    writes = [c for c in faulty.calls if scripts("progress")(c)]
    assert len(writes) == 2, writes
    info = await jobs.get_job(bus, queue, job_id)
    assert info is not None and (info.state, info.progress) == ("completed", 9999)


async def test_many_jobs_news_goes_in_one_round_trip(bus: Bus, queue: str) -> None:
    await jobs.enqueue_many(bus, queue, ["a", "b", "c"])
    go, finish = trio.Event(), trio.Event()
    reported: list[str] = []

    async def handler(job: Job) -> None:
        await job.progress(1)  # the first is written at once ...
        reported.append(job.id)
        await go.wait()
        await job.progress(2)  # ... the others coalesce: each job's news in one write
        await finish.wait()

    faulty = FaultyTransport(bus.transport)
    consumer = Consumer(Bus(faulty), queue, handler, concurrency=3, progress_interval_s=0.05)
    writes = scripts("progress")

    async def all_at(value: int) -> bool:
        infos = [await jobs.get_job(bus, queue, i) for i in reported]
        return all(i is not None and i.progress == value for i in infos)

    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: len(reported) == 3)
        await wait_for(lambda: all_at(1))
        before = sum(map(writes, faulty.calls))
        go.set()
        await wait_for(lambda: all_at(2))
        assert sum(map(writes, faulty.calls)) - before == 1
        finish.set()
        await wait_for(lambda: consumer.statistics().acked == 3)
        nursery.cancel_scope.cancel()


async def test_a_lost_lease_refuses_the_write(bus: Bus, queue: str) -> None:
    await jobs.enqueue(bus, queue, "x")
    (first,) = await jobs.claim(bus, queue, lease_ms=1)

    async def reaped() -> bool:
        return (await jobs.reap(bus, queue)).reaped == 1

    await wait_for(reaped, timeout=10)  # back to pending
    (second,) = await jobs.claim(bus, queue)
    assert second.id == first.id and second.token != first.token
    assert await jobs.write_progress(bus, queue, [(first.id, first.token, 10)]) == [Outcome.STALE]
    assert await jobs.write_progress(bus, queue, [(second.id, second.token, 20)]) == [Outcome.NOTED]
    info = await jobs.get_job(bus, queue, first.id)
    assert info is not None and info.progress == 20
    await jobs.ack(bus, queue, second.id, second.token)
    assert await jobs.write_progress(bus, queue, [(second.id, second.token, 30)]) == [Outcome.GONE]
    assert await jobs.get_job(bus, queue, first.id) is None  # no row made by the write
    assert await jobs.write_progress(bus, queue, []) == []


async def test_handlers_that_never_report_make_no_call_and_start_no_task(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue_many(bus, queue, [str(i) for i in range(50)])

    async def handler(job: Job) -> None:
        pass

    faulty = FaultyTransport(bus.transport)
    consumer = Consumer(Bus(faulty), queue, handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked == 50)
        nursery.cancel_scope.cancel()
    assert not [c for c in faulty.calls if c.name in ("progress", "result", "keep_results")]
    assert consumer._progress.writes == 0 and consumer._progress._scope is None  # no flusher


async def test_a_bad_value_is_the_handler_s_error(bus: Bus, queue: str) -> None:
    job_id = (await jobs.enqueue(bus, queue, "x")).id

    async def handler(job: Job) -> None:
        await job.progress(math.nan)

    consumer = Consumer(bus, queue, handler, max_attempts=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().dead == 1)
        nursery.cancel_scope.cancel()
    info = await jobs.get_job(bus, queue, job_id)
    assert info is not None and info.last_error == (
        "ValueError: progress must be a finite number, got nan"
    )


async def test_a_job_not_from_a_consumer_cannot_report() -> None:
    job = Job("q", "JOB0000000000x", b"", 1, 1, 0)
    with pytest.raises(RuntimeError, match="has no consumer to report progress to"):
        await job.progress(1)


def test_progress_values_are_checked() -> None:
    assert protocol.encode_progress(5) == "5"
    assert protocol.encode_progress(0.5) == "0.5"
    assert protocol.encode_progress(True) == "true"
    assert protocol.encode_progress({"a": [1, "b"]}) == '{"a":[1,"b"]}'
    assert protocol.decode_progress(b'{"a":[1,"b"]}') == {"a": [1, "b"]}
    assert protocol.decode_progress(None) is None
    for bad, error, match in [
        (math.inf, ValueError, "finite number"),
        (math.nan, ValueError, "finite number"),
        ({"x": math.nan}, TypeError, "JSON-able"),
        (object(), TypeError, "a number or a JSON-able value"),
        ({1: object()}, TypeError, "JSON-able"),
        ("x" * protocol.MAX_PROGRESS_BYTES, ValueError, "at most 4096 bytes as JSON, got 4098"),
    ]:
        with pytest.raises(error, match=match):
            protocol.encode_progress(bad)


# --- the dashboard: progress bars of running jobs, and a job's view with its result ---------------


def test_a_bar_shows_progress_that_says_a_share_of_the_work() -> None:
    from echomq_trio.dashboard import view

    assert view.percent(42) == 42.0
    assert view.percent(0.5) == 0.5
    assert view.percent({"step": 3, "of": 12}) == 25.0
    assert view.percent({"done": 1, "total": 3}) == 33.3
    assert view.percent({"percent": 80, "eta_s": 5}) == 80.0
    for none in (None, "half", True, 150, -1, {"step": 1, "of": 0}, [1, 2], math.inf):
        assert view.percent(none) is None, none
    q = view.parse_query(b"queue=q&running=20&job=JOB0000000000x")
    assert (q.running, q.job) == (20, "JOB0000000000x")
    with pytest.raises(ValueError, match="job id"):
        view.parse_query(b"queue=q&job=nope")


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_the_dashboard_shows_progress_bars_and_a_job_s_result(bus: Bus, queue: str) -> None:
    from echomq_trio.dashboard import Dashboard, view
    from tools.browser import open_page

    queue = "!" + queue  # first by name, so on the first page among the other tests' queues
    await jobs.keep_results(bus, queue, 60_000)
    job_id = (await jobs.enqueue(bus, queue, "resize")).id
    go = trio.Event()

    async def handler(job: Job) -> str:
        await job.progress({"step": 3, "of": 4})
        await go.wait()
        return "resized to 64x64"

    dashboard = Dashboard(bus, "token", sample_s=0.2, names_every_s=0.2)
    consumer = Consumer(bus, queue, handler, progress_interval_s=0.05)
    async with trio.open_nursery() as nursery, open_page() as page:
        await nursery.start(consumer.run)
        url = await nursery.start(dashboard.serve, "127.0.0.1", 0)

        async def running() -> bool:
            state = await dashboard.state(view.Query(queue=queue))
            rows = state["queue"]["running"]["rows"]
            return bool(rows) and rows[0]["percent"] == 75.0

        await wait_for(running)
        await page.goto(f"{url}/?queue={queue}#token=token")
        bar = f"document.querySelector('#running tr[data-job=\"{job_id}\"] .bar span')"
        await wait_for(lambda: _evaluates(page, f"({bar} || {{}}).style?.width", "75%"),
                       timeout=30, step=0.1)  # fmt: skip
        await page.evaluate(f"document.querySelector('#job-id').value = '{job_id}'")
        await page.evaluate("document.querySelector('#job-find button').click()")
        job_view = "(document.querySelector('#job-view') || {}).innerText || ''"
        await wait_for(lambda: _evaluates(page, job_view, "active", contains=True),
                       timeout=30, step=0.1)  # fmt: skip
        go.set()
        await wait_for(lambda: _evaluates(page, job_view, "resized to 64x64", contains=True),
                       timeout=30, step=0.1)  # fmt: skip
        text = await page.evaluate(job_view)
        assert "completed" in text and '"step": 3' in text, text
        state = await dashboard.state(view.Query(queue=queue, job=job_id))
        found = state["queue"]["job"]["found"]
        assert (found["state"], found["result"], found["percent"]) == (
            "completed",
            "resized to 64x64",
            75.0,
        )
        nursery.cancel_scope.cancel()


async def _evaluates(page: object, expression: str, want: str, *, contains: bool = False) -> bool:
    got = str(await page.evaluate(expression))  # type: ignore[attr-defined]
    return want in got if contains else got == want
