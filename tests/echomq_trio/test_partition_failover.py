"""Chaos on a partitioned queue (issue 28): ``kill -9`` of one primary of a cluster mid-burst,
with ``durability.Replicas(1, ...)``, loses no job whose enqueue returned, and nothing runs
twice but what the bus never said was done.

The cluster: three primaries with a replica each (``tests.echomq_trio.replicas``), a queue of
three partitions (one on each primary). Producers enqueue flat jobs and jobs of strictly ordered
lanes (``limit=1``) from several tasks, each with an id of its own minted first, and call again
with the same id after any error of the bus (``NotReplicated``, a connection lost, a request
timed out): what a careful caller does, and idempotent (a second enqueue of a live id answers
``DUPLICATE``). A ``PartitionedConsumer`` and a ``PartitionedMetronome`` serve the queue. The
ledger is this process's lists: the ids whose enqueue returned, and every run of a handler.

Mid-burst, replication of one partition's primary is held back (``CLIENT PAUSE WRITE`` on its
replica) so that the replica surely lacks that primary's latest writes, and the consumer claims
nothing more (its claim gate) so that the jobs admitted meanwhile still wait; the primary is then
killed (``SIGKILL``) and its replica promoted (``CLUSTER FAILOVER TAKEOVER``), and the load goes
on against the new primary, whose writes wait (and raise ``NotReplicated``, called again) until
the killed node, started again on its files, follows it as its replica. Without ``Replicas``
the same run loses the jobs whose enqueue returned while replication was held back
(``test_without_replicas_the_same_kill_loses_jobs``: the check can fail).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio

from echomq_trio import ids, open_bus, partitions
from echomq_trio.durability import Durability, InMemory, NotReplicated, Replicas
from echomq_trio.errors import BusError
from echomq_trio.resp._cluster import key_slot
from echomq_trio.results import Counts, Job
from tests.echomq_trio.replicas import replicated_cluster
from tests.support import wait_for

pytestmark = [pytest.mark.server, pytest.mark.slow]

QUEUE = "chaos"
LANES = 12  # lanes over the three partitions (crc32 shares them out)
LEASE_MS = 2_000  # short: a job running on the killed primary comes back soon (the reaper)


@attrs.define
class Run:
    """A handler's run of a job: its partition, and when it started and ended (trio's clock)."""

    queue: str
    started: float
    ended: float | None = None


@attrs.define
class Ledger:
    """What this process saw: ``admitted`` (ids whose enqueue returned, in the order they
    returned), ``lane_of`` (a lane job's lane), ``retried`` (ids whose enqueue raised at least
    once before it returned), ``runs`` (every run of a handler, by id), the errors the
    producers met by type, and the number of enqueues that returned while replication was held
    back in the killed partition."""

    admitted: list[str] = attrs.Factory(list)
    lane_of: dict[str, str] = attrs.Factory(dict)
    retried: set[str] = attrs.Factory(set)
    runs: dict[str, list[Run]] = attrs.Factory(dict)
    errors: Counter[str] = attrs.Factory(Counter)
    returned_while_held: int = 0


@attrs.frozen
class Outcome:
    """The run's ledger and what was read once it was over: the killed partition's name, when
    its replication was held back and when its primary was killed, and the consumer's and the
    queue's counters."""

    ledger: Ledger
    killed: str
    held_at: float
    killed_at: float
    acked: int
    stale: int
    counts: Counts


async def _chaos(root: Path, durability: Durability) -> Outcome:
    """The run (see the module): returns once the load is over and the queue holds nothing
    waiting or running; the caller checks the ledger (a job lost is one that never ran)."""
    ledger = Ledger()
    holding = False
    claims = trio.Event()  # the consumer's claim gate: it claims while this is set
    claims.set()

    async def gate() -> None:
        await claims.wait()

    async with (
        replicated_cluster(root, 3) as cluster,
        open_bus(cluster.url + "&timeout_ms=3000", durability=durability) as bus,
    ):
        pq = await partitions.create(bus, QUEUE, 3)
        victim = 1  # the partition whose primary is killed
        killed = pq.names[victim]
        primary = cluster.owner(key_slot(bus.keys(killed).pending))
        assert len({cluster.owner(key_slot(bus.keys(q).pending)) for q in pq.names}) == 3

        async def handler(job: Job) -> None:
            run = Run(job.queue, trio.current_time())
            ledger.runs.setdefault(job.id, []).append(run)
            await trio.sleep(0.001)  # a little work: some runs are in flight at the kill
            run.ended = trio.current_time()

        async def admit(job_id: str, call: Callable[[], Awaitable[object]]) -> None:
            """Call until it returns, with the same id each time (idempotent)."""
            while True:
                try:
                    await call()
                except BusError as exc:
                    ledger.errors[type(exc).__name__] += 1
                    ledger.retried.add(job_id)
                    await trio.sleep(0.02)
                    continue
                break
            ledger.admitted.append(job_id)
            if holding and pq.partition_of(ledger.lane_of.get(job_id, job_id)) == killed:
                ledger.returned_while_held += 1

        async def flat(stop: trio.Event) -> None:
            while not stop.is_set():
                job_id = ids.generate("JOB")
                await admit(job_id, partial(pq.enqueue, "flat", job_id=job_id))

        async def lane(stop: trio.Event, first: int) -> None:
            for i in itertools.count(first, 2):
                if stop.is_set():
                    return
                group = f"chat:{i % LANES}"
                job_id = ids.generate("JOB")
                ledger.lane_of[job_id] = group
                call = partial(pq.lane_enqueue, group, "lane", job_id=job_id, limit=1)
                await admit(job_id, call)

        consumer = partitions.PartitionedConsumer(pq, handler, concurrency=8, lease_ms=LEASE_MS,
                                                  beat_ms=200, claim_gate=gate)  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            await nursery.start(partitions.PartitionedMetronome(pq, beat_ms=200).run)
            stop = trio.Event()
            async with trio.open_nursery() as producers:
                for _ in range(2):
                    producers.start_soon(flat, stop)
                for first in range(2):
                    producers.start_soon(lane, stop, first)
                await wait_for(lambda: len(ledger.admitted) >= 300 and len(ledger.runs) >= 100,
                               timeout=30)  # fmt: skip
                # Hold the killed partition's replication back, so its replica surely lacks
                # writes its primary answered; then kill the primary mid-burst. Meanwhile the
                # consumer claims nothing more (what it holds runs on), so the jobs whose
                # enqueue returned meanwhile are still waiting at the kill.
                await cluster.replica_command(primary, "CLIENT", "PAUSE", "60000", "WRITE")
                claims = trio.Event()
                holding, held_at = True, trio.current_time()
                refused = ledger.errors[NotReplicated.__name__]
                await wait_for(lambda: ledger.returned_while_held >= 20
                               or ledger.errors[NotReplicated.__name__] >= refused + 3,
                               timeout=20)  # fmt: skip
                killed_at = trio.current_time()
                await cluster.fail_over(primary)
                holding = False
                claims.set()
                # Until a replica follows the new primary, Replicas(1, ...) refuses its writes
                # (NotReplicated, called again): the killed node comes back as that replica.
                await cluster.rejoin(primary)
                after = len(ledger.admitted)
                await wait_for(lambda: len(ledger.admitted) >= after + 300, timeout=30)
                stop.set()

            async def settled() -> bool:
                c = await pq.counts()
                return (c.pending, c.scheduled, c.active) == (0, 0, 0)

            # Nothing waiting or running anywhere: every job the queue still has has run (a
            # job whose lease died with its primary is active until the reaper hands it back).
            await wait_for(settled, timeout=30, step=0.05)
            nursery.cancel_scope.cancel()
        stats = consumer.statistics()
        counts = await pq.counts()
    return Outcome(ledger, killed, held_at, killed_at, stats.acked, stats.stale, counts)


def _lost(ledger: Ledger) -> list[str]:
    return [j for j in ledger.admitted if j not in ledger.runs]


@pytest.mark.timeout_s(150)
async def test_kill_9_of_a_primary_mid_burst_loses_nothing_with_replicas(tmp_path: Path) -> None:
    """With ``Replicas(1, 1000)``:

    * no loss: every job whose enqueue returned ran (on whichever primary then held it);
    * an ack the bus confirmed stays: a job runs twice only if it is of the killed partition
      and its first run was in flight at the kill (it started before the kill, and its ack
      may not have been confirmed: the run ended after replication was held back, or at most
      the wait's timeout and a request's before), or its enqueue raised and was called again
      (the first call may have admitted it, and it may have run and gone before the second,
      which then admits it anew). Nothing else may repeat: not a job of the partitions whose
      primaries lived;
    * a lane keeps its order: each lane's jobs first ran in the order their enqueues returned
      (a lane's producer enqueues its next job only once the last returned);
    * the counts agree with the ledger: nothing pending, scheduled, active or dead at the end;
      the acks counted on the server (``completed_total``) are the consumer's confirmed acks,
      plus at most the acks it was not told of (answered ``STALE`` when it tried again), and
      at least one per job admitted."""
    out = await _chaos(tmp_path, Replicas(1, 1_000))
    ledger = out.ledger
    assert len(ledger.admitted) >= 600
    assert _lost(ledger) == []
    # What may repeat.
    window = 1.0 + 3.0 + 0.5  # the wait's timeout, the request timeout, and some slack
    repeated = {j: runs for j, runs in ledger.runs.items() if len(runs) > 1}
    for job_id, runs in repeated.items():
        first = runs[0]
        in_flight = (first.queue == out.killed and first.started <= out.killed_at
                     and (first.ended is None or first.ended >= out.held_at - window))  # fmt: skip
        assert in_flight or job_id in ledger.retried, (job_id, runs, out.killed_at)
    # Lanes in order.
    admitted_at = {j: i for i, j in enumerate(ledger.admitted)}
    first_run = {j: runs[0].started for j, runs in ledger.runs.items()}
    by_lane: dict[str, list[str]] = {}
    for job_id in ledger.admitted:
        if job_id in ledger.lane_of:
            by_lane.setdefault(ledger.lane_of[job_id], []).append(job_id)
    for group, order in by_lane.items():
        ran = sorted(order, key=lambda j: (first_run[j], admitted_at[j]))
        assert ran == order, group
    # Counts.
    c = out.counts
    assert (c.pending, c.scheduled, c.active, c.dead) == (0, 0, 0, 0)
    assert out.acked <= c.completed_total <= out.acked + out.stale
    assert c.completed_total >= len(set(ledger.admitted))
    print(f"admitted {len(ledger.admitted)}, runs {sum(map(len, ledger.runs.values()))}, "
          f"repeated {len(repeated)}, retried {len(ledger.retried)}, errors {dict(ledger.errors)}, "
          f"acked {out.acked}, stale {out.stale}, completed_total {c.completed_total}")  # fmt: skip


@pytest.mark.timeout_s(150)
async def test_without_replicas_the_same_kill_loses_jobs(tmp_path: Path) -> None:
    """The same run with the default durability (``InMemory``): the enqueues that returned
    while the killed primary's replication was held back are gone with it (the check of the
    test above can fail)."""
    out = await _chaos(tmp_path, InMemory())
    lost = _lost(out.ledger)
    assert out.ledger.returned_while_held >= 20
    assert lost, out.ledger.errors
    print(f"lost {len(lost)} ({out.ledger.returned_while_held} returned while held back)")
