"""Results: a handler's return value kept with its finished job for the queue's results TTL, and
``jobs.result`` waiting on it (subscribe, read, wait: no polling), in this process and in
another; the typed errors of a dead, cancelled, unknown or late job; a queue that keeps none
runs the plain ack."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from echomq_trio import Ack, Bury, Bus, Consumer, Job, ids, jobs
from echomq_trio.errors import (
    ConnectionLost,
    JobCancelled,
    JobError,
    JobFailed,
    JobNotFound,
    ResultsNotKept,
    ResultTimedOut,
)
from echomq_trio.jobs import JobHandle, JobState, Outcome
from echomq_trio.settlement import HandlerResult
from echomq_trio.testing import FaultyTransport, scripts
from echomq_trio.transport import Message
from tests.support import read_line, spawn, wait_for

pytestmark = pytest.mark.cluster

TTL_MS = 60_000


async def _finished_by(bus: Bus, queue: str, handler_result: HandlerResult) -> str:
    """Enqueue one job, run a consumer whose handler returns ``handler_result`` until the job is
    settled; the job's id."""
    admitted = await jobs.enqueue(bus, queue, "work")

    async def handler(job: Job) -> HandlerResult:
        return handler_result

    consumer = Consumer(bus, queue, handler, concurrency=2, max_attempts=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked + consumer.statistics().dead == 1)
        nursery.cancel_scope.cancel()
    return admitted.id


async def test_a_result_is_kept_for_the_ttl_and_read_by_get_job_and_result(
    bus: Bus, queue: str
) -> None:
    assert await jobs.results_kept(bus, queue) == 0  # off by default
    assert await jobs.keep_results(bus, queue, TTL_MS) == TTL_MS
    assert await jobs.results_kept(bus, queue) == TTL_MS
    job_id = await _finished_by(bus, queue, "the answer")
    info = await jobs.get_job(bus, queue, job_id)
    assert info is not None
    assert (info.state, info.result, info.attempts) == (JobState.COMPLETED, b"the answer", 1)
    assert info.finished_ms is not None and info.finished_ms > 0
    ttl = int(await bus.command("PTTL", bus.keys(queue).job(job_id)))  # type: ignore[arg-type]
    assert 0 < ttl <= TTL_MS
    # finished before the wait: found at once
    assert await jobs.result(bus, queue, job_id, timeout_s=10) == b"the answer"
    assert await JobHandle(bus, queue, job_id).result(10) == b"the answer"
    # a kept id is not admitted again while kept
    again = await jobs.enqueue(bus, queue, "again", job_id=job_id)
    assert again.outcome is Outcome.DUPLICATE
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.completed_total) == (0, 0, 1)


async def test_ack_with_a_result_bytes_and_none_are_kept_as_given(bus: Bus, queue: str) -> None:
    await jobs.keep_results(bus, queue, TTL_MS)
    raw = await _finished_by(bus, queue, Ack("noted", result=b"\x00\xffbin"))
    none = await _finished_by(bus, queue, None)
    empty = await _finished_by(bus, queue, b"")
    assert await jobs.result(bus, queue, raw, timeout_s=10) == b"\x00\xffbin"
    assert await jobs.result(bus, queue, none, timeout_s=10) is None  # finished, no result
    assert await jobs.result(bus, queue, empty, timeout_s=10) == b""


async def test_a_waiter_is_told_when_the_job_finishes_without_polling(bus: Bus, queue: str) -> None:
    await jobs.keep_results(bus, queue, TTL_MS)
    job_id = (await jobs.enqueue(bus, queue, "slow")).id
    go = trio.Event()

    async def handler(job: Job) -> str:
        await go.wait()
        return f"done {job.text}"

    faulty = FaultyTransport(bus.transport)
    watcher = Bus(faulty)
    got: list[bytes | None] = []

    async def wait() -> None:
        got.append(await jobs.result(watcher, queue, job_id, timeout_s=30))

    reads = scripts("result")
    consumer = Consumer(bus, queue, handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().held == 1)
        nursery.start_soon(wait)
        await wait_for(lambda: sum(map(reads, faulty.calls)) == 1)  # it read: still running
        go.set()
        await wait_for(lambda: got)
        nursery.cancel_scope.cancel()
    assert got == [b"done slow"]
    # one read before the end, one after the message: no polling in between
    assert sum(map(reads, faulty.calls)) == 2
    assert [c.name for c in faulty.calls if c.op == "subscribe"] == ["SUBSCRIBE"]


class _LateSubscriptions:
    """A transport whose subscriptions miss the first message published on them, as one does
    whose ``SUBSCRIBE`` the server takes only after the waiter's first message went out."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dropped: list[bytes] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @asynccontextmanager
    async def subscribe(self, **kw: Any) -> AsyncIterator[Any]:
        async with self.inner.subscribe(**kw) as sub:
            first = True
            outer = self

            class Late:
                async def receive(self) -> Message:
                    nonlocal first
                    message = await sub.receive()
                    if first:
                        first = False
                        outer.dropped.append(message.data)
                        return await sub.receive()
                    return message

            yield Late()


async def test_a_waiter_whose_first_message_is_missed_publishes_again(bus: Bus, queue: str) -> None:
    await jobs.keep_results(bus, queue, TTL_MS)
    job_id = await _finished_by(bus, queue, "late but there")
    late = _LateSubscriptions(bus.transport)
    assert await jobs.result(Bus(late), queue, job_id, timeout_s=10) == b"late but there"
    assert len(late.dropped) == 1 and late.dropped[0].startswith(b"ready:")


@pytest.mark.timeout_s(90)
async def test_a_waiter_in_another_process_gets_the_result_then_it_expires(
    bus: Bus, server_url: str, queue: str
) -> None:
    await jobs.keep_results(bus, queue, 1_000)
    job_id = (await jobs.enqueue(bus, queue, "far")).id
    channel = bus.keys(queue).job(job_id)
    go = trio.Event()

    async def handler(job: Job) -> str:
        await go.wait()
        return "from afar"

    consumer = Consumer(bus, queue, handler)
    async with bus.subscribe(channels=[channel]) as sub, trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().held == 1)
        async with spawn("wait-result", server_url, queue, job_id, "30") as waiter:
            # the waiter is subscribed once its own message is published on the job's channel
            assert (await sub.receive()).data.startswith(b"ready:")
            go.set()
            assert await read_line(waiter) == "result from afar"
            assert await waiter.wait() == 0
        nursery.cancel_scope.cancel()

    async def expired() -> bool:
        return await jobs.get_job(bus, queue, job_id) is None

    await wait_for(expired, timeout=20)
    with pytest.raises(JobNotFound, match=f"no job {job_id}"):
        await jobs.result(bus, queue, job_id, timeout_s=5)


async def test_a_dead_job_raises_its_error(bus: Bus, queue: str) -> None:
    await jobs.keep_results(bus, queue, TTL_MS)
    job_id = (await jobs.enqueue(bus, queue, "doomed")).id
    go = trio.Event()

    async def handler(job: Job) -> Bury:
        await go.wait()
        return Bury("permanently broken")

    consumer = Consumer(bus, queue, handler)
    failed: list[JobFailed] = []

    async def wait() -> None:
        with pytest.raises(JobFailed) as info:
            await jobs.result(bus, queue, job_id, timeout_s=30)
        failed.append(info.value)

    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        nursery.start_soon(wait)
        await wait_for(lambda: consumer.statistics().held == 1)
        go.set()
        await wait_for(lambda: failed)
        nursery.cancel_scope.cancel()
    assert failed[0].error == "permanently broken"
    assert failed[0].job_id == job_id
    assert str(failed[0]) == f"job {job_id} is dead: permanently broken"
    # and a wait that starts after the death raises at once
    with pytest.raises(JobFailed, match="permanently broken"):
        await jobs.result(bus, queue, job_id, timeout_s=5)


async def test_a_handler_error_that_kills_the_job_is_its_error(bus: Bus, queue: str) -> None:
    await jobs.keep_results(bus, queue, TTL_MS)

    async def handler(job: Job) -> None:
        raise RuntimeError("no luck")

    job_id = (await jobs.enqueue(bus, queue, "x")).id
    consumer = Consumer(bus, queue, handler, max_attempts=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        with pytest.raises(JobFailed, match="RuntimeError: no luck"):
            await jobs.result(bus, queue, job_id, timeout_s=30)
        nursery.cancel_scope.cancel()


async def test_unknown_timeout_cancelled_and_results_off(bus: Bus, queue: str) -> None:
    unknown = ids.generate("JOB")
    # a queue that keeps no results: nothing to wait for, said at once
    with pytest.raises(ResultsNotKept, match="keeps no results"):
        await jobs.result(bus, queue, unknown, timeout_s=5)
    pending = (await jobs.enqueue(bus, queue, "p")).id
    with pytest.raises(ResultsNotKept):
        await jobs.result(bus, queue, pending, timeout_s=5)
    await jobs.keep_results(bus, queue, TTL_MS)
    with pytest.raises(JobNotFound, match=f"no job {unknown} in"):
        await jobs.result(bus, queue, unknown, timeout_s=5)
    with pytest.raises(ResultTimedOut, match=f"job {pending} did not finish within 0.2 s"):
        await jobs.result(bus, queue, pending, timeout_s=0.2)
    # a cancelled job (the state another part of the bus writes) is recognised by its word
    row = bus.keys(queue).job(pending)
    await bus.command("HSET", row, "state", "cancelled", "last_error", "not needed")
    with pytest.raises(JobCancelled, match="was cancelled: not needed") as info:
        await jobs.result(bus, queue, pending, timeout_s=5)
    assert isinstance(info.value, JobError)


async def test_bad_arguments_fail_before_any_io(bus: Bus, queue: str) -> None:
    faulty = FaultyTransport(bus.transport)
    watcher = Bus(faulty)
    with pytest.raises(ValueError, match="job id"):
        await jobs.result(watcher, queue, "nope", timeout_s=1)
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        await jobs.result(watcher, queue, ids.generate("JOB"), timeout_s=0)
    with pytest.raises(TypeError, match="timeout_s must be a number"):
        await jobs.result(watcher, queue, ids.generate("JOB"), timeout_s="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl_ms"):
        await jobs.keep_results(watcher, queue, -1)
    assert faulty.calls == []


async def test_results_off_runs_the_plain_ack_and_drops_the_result(bus: Bus, queue: str) -> None:
    faulty = FaultyTransport(bus.transport)
    job_id = await _finished_by(Bus(faulty), queue, "dropped")
    acks = [c for c in faulty.calls if c.name == "ack"]
    assert len(acks) == 1 and acks[0].args[1] == "results"  # it had a result to give
    assert await jobs.get_job(bus, queue, job_id) is None  # deleted, as without results
    plain = await _finished_by(Bus(faulty), queue, None)
    acks = [c for c in faulty.calls if c.name == "ack"]
    assert acks[-1].args[1:] == (plain, acks[-1].args[2], "")  # the plain ack: id, token, note
    assert not [c for c in faulty.calls if c.name in ("result", "progress", "keep_results")]


async def test_turning_results_off_keeps_what_was_kept_until_it_expires(
    bus: Bus, queue: str
) -> None:
    await jobs.keep_results(bus, queue, TTL_MS)
    kept = await _finished_by(bus, queue, "kept")
    assert await jobs.keep_results(bus, queue, 0) == 0
    gone = await _finished_by(bus, queue, "gone")
    assert await jobs.get_job(bus, queue, gone) is None
    info = await jobs.get_job(bus, queue, kept)
    assert info is not None and info.result == b"kept"


async def test_ack_with_results_answers_stale_for_a_second_try(bus: Bus, queue: str) -> None:
    await jobs.keep_results(bus, queue, TTL_MS)
    await jobs.enqueue(bus, queue, "once")
    (job,) = await jobs.claim(bus, queue)
    items = [(job.id, job.token, "", b"r")]
    assert await jobs.ack_with_results(bus, queue, items) == [Outcome.ACKED]
    assert await jobs.ack_with_results(bus, queue, items) == [Outcome.STALE]  # kept, settled
    assert await jobs.ack_with_results(bus, queue, []) == []
    with pytest.raises(TypeError, match="result must be bytes"):
        await jobs.ack_with_results(bus, queue, [(job.id, job.token, "", "s")])  # type: ignore[list-item]


@pytest.mark.slow
async def test_the_cli_prints_a_result_and_show_prints_result_and_progress(
    bus: Bus, server_url: str, queue: str
) -> None:
    from tests.echomq_trio.test_cli import echomq

    await jobs.keep_results(bus, queue, TTL_MS)
    await jobs.enqueue(bus, queue, "x")
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.write_progress(bus, queue, [(job.id, job.token, {"done": 7})]) == [
        Outcome.NOTED
    ]
    out = await echomq("show", queue, job.id, url=server_url)
    assert re.search(r'^progress\s+\{"done": 7\}$', out.stdout.decode(), re.M), out
    await jobs.ack_with_results(bus, queue, [(job.id, job.token, "", b"forty-two")])
    out = await echomq("result", queue, job.id, url=server_url)
    assert (out.returncode, out.stdout.decode()) == (0, "forty-two\n"), out
    out = await echomq("--json", "result", queue, job.id, url=server_url)
    assert json.loads(out.stdout) == {"id": job.id, "result": "forty-two"}
    out = await echomq("show", queue, job.id, url=server_url)
    text = out.stdout.decode()
    assert re.search(r"^state\s+completed$", text, re.M), text
    assert re.search(r"^result\s+forty-two$", text, re.M), text
    assert re.search(r"^finished\s+", text, re.M), text
    unknown = ids.generate("JOB")
    out = await echomq("result", queue, unknown, "--timeout", "5", url=server_url)
    assert out.returncode == 1 and f"no job {unknown}" in out.stderr.decode(), out
    waiting = (await jobs.enqueue(bus, queue, "y")).id
    out = await echomq("result", queue, waiting, "--timeout", "0.3", url=server_url)
    assert out.returncode == 124 and "did not finish within 0.3 s" in out.stderr.decode(), out


async def test_an_ack_with_a_result_whose_answer_is_lost_is_tried_again_and_kept_once(
    bus: Bus, queue: str
) -> None:
    """The server ran the ack, the answer was lost: the consumer tries again, the lease refuses
    the second ack (``stale``), and the job is completed once, with its result, and its waiter
    told."""
    await jobs.keep_results(bus, queue, TTL_MS)
    job_id = (await jobs.enqueue(bus, queue, "once")).id
    faulty = FaultyTransport(bus.transport)
    lost = faulty.fail(scripts("ack"), ConnectionLost("injected"), after=True)

    async def handler(job: Job) -> str:
        return "kept once"

    consumer = Consumer(Bus(faulty), queue, handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        got = await jobs.result(bus, queue, job_id, timeout_s=30)
        await wait_for(lambda: consumer.statistics().stale == 1)
        nursery.cancel_scope.cancel()
    assert lost.fired and got == b"kept once"
    assert [c.args[1] for c in faulty.calls if c.name == "ack"] == ["results", "results"]
    c = await jobs.counts(bus, queue)
    assert (c.completed_total, c.pending, c.active) == (1, 0, 0)
