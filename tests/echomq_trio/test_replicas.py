"""``durability.Replicas``: admissions and settlements return once ``n`` replicas of the primary
that took them hold them (``WAIT``), committed in groups; a replica that does not acknowledge
in time makes the call raise ``NotReplicated`` naming how many did; ``NOREPLICAS`` is tried
again until the replica is back; a primary killed while replication is held back loses no
write that returned. Real servers: a primary and a replica (``tests.echomq_trio.replicas``),
and a cluster of two primaries with a replica each; the fault-injecting transport only counts
the waits."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from echomq_trio import Bus, Consumer, ids, jobs, open_bus
from echomq_trio._replies import as_text
from echomq_trio.durability import (
    DurableCalls,
    InMemory,
    NotDurable,
    NotReplicated,
    Replicas,
)
from echomq_trio.errors import BusError, ConnectionLost, WritesRefused
from echomq_trio.jobs import Job, Outcome
from echomq_trio.resp import open_resp
from echomq_trio.testing import FaultyTransport, scripts
from tests.echomq_trio.inmemory import InMemoryQueue
from tests.echomq_trio.replicas import Pair, replicated_pair
from tests.echomq_trio.replicas import replicated_cluster as cluster_of_pairs
from tests.support import (
    PASSWORD,
    server_has_waitaof,
    wait_for,
)


def test_replicas_says_which_calls_wait_and_checks_its_numbers() -> None:
    both = Replicas(1, 100)
    assert (both.n, both.timeout_ms, both.on_disk) == (1, 100, False)
    assert all(both.waits_for(s) for s in ("enqueue", "lane_enqueue", "schedule", "ack", "retry"))
    assert not both.waits_for("claim") and not both.waits_for("extend")
    assert not Replicas(2, settlements=False).waits_for("ack")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n \\(the replicas"):
            Replicas(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout_ms"):
            Replicas(1, bad)  # type: ignore[arg-type]
    error = NotReplicated("x", replicas=0, wanted=2)
    assert isinstance(error, NotDurable) and (error.replicas, error.wanted) == (0, 2)


async def test_a_bus_per_call_durability_is_checked_before_any_io() -> None:
    bus = Bus(_NoTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Replicas\\(n, timeout_ms\\)"):
        bus.with_durability("replicas")  # type: ignore[arg-type]
    assert bus.with_durability(InMemory()) is bus
    view = bus.with_durability(Replicas(1, 100))
    assert view is bus.with_durability(Replicas(1, 100))  # kept: its waits are grouped
    assert view.holder == bus.holder and view.durable is not None
    assert view.durable.durability == Replicas(1, 100)


class _NoTransport:
    """Stands for a transport where none is called (the checks come first)."""


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    with replicated_pair(tmp_path) as p:
        yield p


async def _has_job(url: str, queue: str, job_id: str) -> bool:
    async with open_bus(url) as bus:
        return bool(await bus.command("EXISTS", bus.keys(queue).job(job_id)))


@pytest.mark.server
async def test_writes_return_once_the_replica_has_them_and_waits_are_shared(
    pair: Pair, queue: str
) -> None:
    """Enqueues, concurrent and sequential, return with the job on the replica; one ``WAIT``
    covers many writes; a batch of acks waits once; the replica has the acks too. A default
    bus sends no ``WAIT``."""
    await pair.linked()
    durability = Replicas(1, 30_000)  # it must return: long, the machine may be loaded
    async with open_bus(pair.primary_url) as plain, plain.transport.blocking() as own:
        counted = FaultyTransport(own)
        bus = Bus(plain.transport, durability=durability,
                  durable=DurableCalls([counted], durability))  # fmt: skip
        job_ids = [ids.generate("JOB") for _ in range(60)]
        async with trio.open_nursery() as nursery:
            for job_id in job_ids:
                nursery.start_soon(partial(jobs.enqueue, bus, queue, "x", job_id=job_id))
        waits = [c for c in counted.calls if c.name == "WAIT"]
        assert 1 <= len(waits) < len(job_ids)  # grouped
        assert {c.keys for c in waits} == {(bus.keys(queue).meta,)}  # in the queue's slot
        async with open_bus(pair.replica_url) as replica:
            for job_id in job_ids:  # on the replica as soon as the calls return
                assert await replica.command("EXISTS", replica.keys(queue).job(job_id)), job_id
            claimed = await jobs.claim(bus, queue, 20)
            before = len(counted.calls)
            outcomes = await jobs.ack_many(bus, queue, [(j.id, j.token) for j in claimed])
            assert set(outcomes) == {Outcome.ACKED}
            # One batch of acks, one wait (after the lead's own small write).
            assert [c.name for c in counted.calls[before:]] == ["ack", "sync_mark", "WAIT"]
            for j in claimed:
                assert not await replica.command("EXISTS", replica.keys(queue).job(j.id))
        plain_calls = FaultyTransport(plain.transport)
        await jobs.enqueue(Bus(plain_calls), queue, "in memory")
        assert [c.name for c in plain_calls.calls] == ["enqueue"]  # no WAIT, no mark


@pytest.mark.server
@pytest.mark.parametrize("transport", ["trio", "glide"])
async def test_a_held_back_replica_makes_the_write_raise_not_replicated(
    pair: Pair, queue: str, transport: str
) -> None:
    """With the replica taking nothing more, a write raises ``NotReplicated`` naming 0 of 1
    (it is on the primary); released, the same call again returns (a duplicate). On either
    transport."""
    await pair.linked()
    durability = Replicas(1, 200)
    async with open_bus(pair.primary_url, durability=durability, transport=transport) as bus:
        await jobs.enqueue(bus.with_durability(Replicas(1, 20_000)), queue, "warm")
        await pair.hold_back()
        job_id = ids.generate("JOB")
        started = trio.current_time()
        with pytest.raises(NotReplicated, match="0 of 1 replica") as raised:
            await jobs.enqueue(bus, queue, "held", job_id=job_id)
        assert (raised.value.replicas, raised.value.wanted) == (0, 1)
        assert trio.current_time() - started < 5  # the wait's timeout, not the request's
        assert (await jobs.get_job(bus, queue, job_id)) is not None  # on the primary
        # A batch of acks waits as well, and raises alike.
        (job,) = await jobs.claim(bus, queue, 1)
        with pytest.raises(NotReplicated):
            await jobs.ack(bus, queue, job.id, job.token)
        await pair.release()
        patient = bus.with_durability(Replicas(1, 20_000))
        again = await jobs.enqueue(patient, queue, "held", job_id=job_id)
        assert again.outcome == Outcome.DUPLICATE
        assert await _has_job(pair.replica_url, queue, job_id)


@pytest.mark.server
async def test_a_replica_whose_process_stops_makes_the_write_raise_not_replicated(
    pair: Pair, queue: str
) -> None:
    """The replica's process stopped (``SIGSTOP``: its link cut, as a dead host's): the write
    raises ``NotReplicated``; the same with the primary's and the replicas' disks
    (``on_disk``: ``WAITAOF 1 1``)."""
    await pair.linked()
    # On disk, a wait lasts until the replica's next sync of its file: up to a second.
    modes = [Replicas(1, 200), Replicas(1, 2_000, on_disk=True)]
    for durability in modes if server_has_waitaof() else modes[:1]:  # WAITAOF: Redis 7.2+
        async with open_bus(pair.primary_url, durability=durability) as bus:
            # With the replica in step it returns (a wait of its own, long: the machine may be
            # loaded; a durability per call).
            await jobs.enqueue(bus.with_durability(attrs.evolve(durability, timeout_ms=20_000)),
                               queue, "warm")  # fmt: skip
            os.kill(pair.replica.pid, signal.SIGSTOP)
            try:
                with pytest.raises(NotReplicated, match="0 of 1") as raised:
                    await jobs.enqueue(bus, queue, "stopped")
                assert raised.value.local  # the primary's own file has it (on_disk)
            finally:
                os.kill(pair.replica.pid, signal.SIGCONT)


@pytest.mark.server
async def test_no_replicas_is_tried_again_until_the_replica_is_back(
    tmp_path: Path, queue: str
) -> None:
    """A primary with ``min-replicas-to-write 1`` refuses writes while its replica is gone
    (``NOREPLICAS``): the call waits (tried again, nothing written meanwhile) and returns once
    the replica is back, its job on the replica; no attempt of a job is spent."""
    with replicated_pair(tmp_path, [("min-replicas-to-write", "1")]) as pair:
        await pair.linked()
        url = pair.primary_url + "?timeout_ms=30000"  # the budget for trying again
        async with open_bus(url, durability=Replicas(1, 1_000)) as bus:
            await jobs.enqueue(bus, queue, "warm")
            await pair.replica_command("REPLICAOF", "NO", "ONE")  # the replica leaves
            job_id = ids.generate("JOB")
            done = trio.Event()

            async def enqueue() -> None:
                admitted = await jobs.enqueue(bus, queue, "back", job_id=job_id)
                assert admitted.outcome == Outcome.ENQUEUED
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(enqueue)
                await wait_for(lambda: _refusals(bus), timeout=20)  # refused, more than once
                assert not done.is_set()
                await pair.replica_command("REPLICAOF", "127.0.0.1", str(pair.primary_port))
            assert await _has_job(pair.replica_url, queue, job_id)
            # A consumer's claim refused meanwhile spends no attempt either.
            await pair.replica_command("REPLICAOF", "NO", "ONE")
            seen: list[int] = []

            async def handler(job: Job) -> None:
                seen.append(job.attempts)

            consumer = Consumer(bus, queue, handler, concurrency=1)
            async with trio.open_nursery() as nursery:
                await nursery.start(consumer.run)
                await trio.sleep(0.3)  # let it meet the refusals (not a synchronisation)
                await pair.replica_command("REPLICAOF", "127.0.0.1", str(pair.primary_port))
                await wait_for(lambda: consumer.statistics().acked == 2, timeout=30)
                nursery.cancel_scope.cancel()
            assert seen == [1, 1]


async def _refusals(bus: Bus) -> int:
    stats = as_text(await bus.command("INFO", "errorstats"))
    for line in stats.splitlines():
        if line.startswith("errorstat_NOREPLICAS:"):
            return int(line.split("count=")[1].split(",")[0])
    return 0


@pytest.mark.server
@pytest.mark.timeout_s(90)
async def test_a_primary_killed_while_replication_is_held_back_loses_no_write_that_returned(
    pair: Pair, queue: str
) -> None:
    """Chaos: tasks enqueue and ack under ``Replicas(1, 100)``, each write that returns noted in
    a ledger (this process: it survives the kill); replication is held back, the primary is
    killed (``SIGKILL``) and the replica promoted. Every enqueue that returned is on the
    promoted replica, and no ack that returned is undone there. (Without ``Replicas``, the
    same run loses the writes made while it was held back: ``tools/failover.py``.)"""
    await pair.linked()
    enqueued: list[str] = []  # the ledger: enqueues that returned
    acked: list[str] = []  # and acks that returned ACKED
    tried: set[str] = set()  # jobs an ack was sent for (returned or not)
    refused = 0
    async with open_bus(pair.primary_url + "?timeout_ms=2000", durability=Replicas(1, 100)) as bus:

        async def enqueuer(n: int) -> None:
            nonlocal refused
            for i in range(10_000):
                job_id = ids.generate("JOB")
                try:
                    await jobs.enqueue(bus, queue, f"{n}.{i}", job_id=job_id)
                except NotReplicated:
                    refused += 1
                    continue
                enqueued.append(job_id)

        async def acker() -> None:
            nonlocal refused
            while True:
                claimed = await jobs.claim(bus, queue, 8)
                if not claimed:
                    await trio.sleep(0.005)
                    continue
                tried.update(j.id for j in claimed)
                try:
                    outcomes = await jobs.ack_many(bus, queue, [(j.id, j.token) for j in claimed])
                except NotReplicated:
                    refused += 1
                    continue
                acked.extend(j.id for j, o in zip(claimed, outcomes, strict=True)
                             if o == Outcome.ACKED)  # fmt: skip

        with trio.move_on_after(60):
            async with trio.open_nursery() as nursery:
                for n in range(4):
                    nursery.start_soon(_until_killed, enqueuer, n)
                nursery.start_soon(_until_killed, acker)
                await wait_for(lambda: len(acked) >= 50 and len(enqueued) >= 200, timeout=30)
                await pair.hold_back()
                await wait_for(lambda: refused >= 5, timeout=30)  # writes go on meanwhile
                await pair.fail_over()
                await trio.sleep(0.2)  # the load meets the dead primary (not a synchronisation)
                nursery.cancel_scope.cancel()
    async with open_bus(pair.replica_url) as promoted:
        k = promoted.keys(queue)
        # A job an ack was sent for may be acked there even if the ack raised NotReplicated.
        lost = [j for j in enqueued if j not in tried
                and not await promoted.command("EXISTS", k.job(j))]  # fmt: skip
        undone = [j for j in acked if await promoted.command("EXISTS", k.job(j))]
    assert len(enqueued) >= 200 and len(acked) >= 50
    assert (lost, undone) == ([], [])


async def _until_killed(fn: Callable[..., Awaitable[None]], *args: object) -> None:
    """Run a load task until the primary is gone (its calls then fail: the run is over)."""
    with contextlib.suppress(BusError):
        await fn(*args)


Cluster = tuple[str, list[int], list[subprocess.Popen[bytes]]]


@pytest.fixture
async def replicated_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Two primaries (the slots halved) with a replica each: the cluster's URL, the primaries'
    ports and the replicas' processes (in the same order)."""
    async with cluster_of_pairs(tmp_path, 2) as cluster:
        yield cluster.url, cluster.primary_ports, cluster.procs[2:]


async def _on(port: int, *args: str) -> object:
    async with open_resp(f"redis://:{PASSWORD}@127.0.0.1:{port}") as wire:
        return await wire.command(*args)


@pytest.mark.server
@pytest.mark.timeout_s(120)
async def test_on_a_cluster_the_wait_goes_to_the_primary_that_took_the_write(
    replicated_cluster: Cluster,
) -> None:
    """Queues on both primaries: writes return once each one's own replica has them; with one
    primary's replica stopped, a write to a queue of that primary raises ``NotReplicated``
    while one to the other primary's queue returns (a wait sent to the wrong primary would
    pass the first or fail the second)."""
    url, primaries, replicas = replicated_cluster
    async with open_bus(url, durability=Replicas(1, 300)) as bus:
        by_primary: dict[int, str] = {}
        for i in range(100):
            queue = f"rq{i}"
            slot = int(await _on(primaries[0], "CLUSTER", "KEYSLOT", bus.keys(queue).meta))  # type: ignore[call-overload]
            by_primary.setdefault(0 if slot < 16384 // 2 else 1, queue)
            if len(by_primary) == 2:
                break
        patient = bus.with_durability(Replicas(1, 20_000))  # where it must return: the machine
        for queue in by_primary.values():  # may be loaded
            assert (await jobs.enqueue(patient, queue, "x")).outcome == Outcome.ENQUEUED
        pid = replicas[1].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(NotReplicated, match="0 of 1"):
                await jobs.enqueue(bus, by_primary[1], "y")
            assert (await jobs.enqueue(patient, by_primary[0], "y")).outcome == Outcome.ENQUEUED
        finally:
            os.kill(pid, signal.SIGCONT)
        assert (await jobs.enqueue(patient, by_primary[1], "z")).outcome == Outcome.ENQUEUED


async def test_a_refusal_that_passes_is_tried_again_until_the_request_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``NOREPLICAS``, ``LOADING``... refuse a call before it runs: ``Bus.run`` runs it again
    with backoff and returns its answer; past the request timeout it raises the refusal; any
    other failure (and ``NotReplicated``, which follows a write) is raised at once."""
    q = InMemoryQueue()
    job_id = ids.generate("JOB")
    q.enqueue(job_id)
    wire = FaultyTransport(q)
    bus = Bus(wire)
    noreplicas = WritesRefused("the server refused a write for now: NOREPLICAS Not enough good")
    refusal = wire.fail(scripts("claim"), noreplicas, times=3)
    assert [j.id for j in await jobs.claim(bus, "q", 1)] == [job_id]
    assert len(refusal.hits) == 3 and [c.name for c in wire.calls].count("claim") == 4
    loading = ConnectionLost("LOADING Redis is loading the dataset in memory")
    wire.fail(scripts("claim"), loading, times=10_000)
    started = trio.current_time()
    with pytest.raises(ConnectionLost, match="LOADING"):
        await jobs.claim(bus, "q", 1)
    waited = trio.current_time() - started
    assert q.spec.timeout_ms / 1000 <= waited < q.spec.timeout_ms / 1000 + 1
    for once in (ConnectionLost("connection reset"), NotReplicated("NOREPLICAS", wanted=1)):
        calls = len(wire.calls)
        wire.faults.clear()
        wire.fail(scripts("claim"), once)
        with pytest.raises(type(once)):
            await jobs.claim(bus, "q", 1)
        assert len(wire.calls) == calls + 1  # not tried again
