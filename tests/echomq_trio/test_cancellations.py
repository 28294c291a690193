"""Cancellation and failure at every await of the consumer's calls to the server (after
httpcore's ``tests/test_cancellations.py``).

A consumer drains a small queue through a ``FaultyTransport`` around the real server. At the n-th
call of one kind (claim, ack, retry, bury, defer, extend, release) the transport either cancels
the consumer's nursery, before the call is sent or after the server ran it, or fails the call
with ``ConnectionLost`` or ``RequestTimedOut``, before it is sent or after it ran (the answer
lost). Then:

* after the faulty run, every job is acked exactly once (one audit record, written by the ack
  script, and one handler completion in the ledger, a list on the server) and gone, or is still
  a job in exactly one of pending, scheduled, dead (only the buried one) or active with a lease
  deadline for the reaper; never acked twice, never both acked and waiting, never missing;
* a fresh consumer with a metronome drains everything: every job acked exactly once, the buried
  one dead once, one retry each for the two that failed once, one deferral.

The consumer runs one job at a time (concurrency 1, no prefetch), so its calls come in a fixed
order and the n-th call of a kind is the same point every run:

    claim 1: ack      -> ack 1         claim 5: bury  -> retry (buried)
    claim 2: retry-in -> retry 1       claim 6: note  -> extends while it finishes, ack 2
    claim 3: raises   -> retry 2       claim 7: slow  -> held (more extends) until the stop,
    claim 4: defer-in -> defer 1                         then release 1

The note job's handler spends a lease on its last, shielded step, so a stop at an extend comes
while a handler is finishing (its result must still be settled); the slow job waits for the
second phase, so the faulty run always ends with a job in hand: the stop cancels its handler
(grace 0) and releases it. For one point the six fault kinds run side by side, each on its own
queue.
"""

from collections import Counter
from collections.abc import Callable

import pytest
import trio

from echomq_trio import (
    Ack,
    Bury,
    Bus,
    ConnectionLost,
    Consumer,
    DeferIn,
    Fixed,
    Job,
    Metronome,
    RequestTimedOut,
    RetryIn,
    events,
    ids,
    jobs,
)
from echomq_trio.settlement import HandlerResult
from echomq_trio.testing import Fault, FaultyTransport, SeenCall, scripts
from tests.support import wait_for

pytestmark = pytest.mark.cluster

KINDS = ["ack", "retry", "raise", "defer", "bury", "note", "slow"]  # claimed in this order
ACKED = [k for k in KINDS if k != "bury"]
LEASE_MS = 240  # renewed every 80 ms while the slow job is held
FAULTS = {
    "cancel": None,
    "cancel-after": None,
    "lost": ConnectionLost("injected: connection lost"),
    "lost-after": ConnectionLost("injected: connection lost mid-reply"),
    "timeout": RequestTimedOut("injected: timed out"),
    "timeout-after": RequestTimedOut("injected: timed out after it ran"),
}
PER_LANE = {"cancel-after", "lost", "timeout-after"}  # met by a consumer with a task per lane
POINTS = [
    *(("claim", n) for n in range(1, 8)),
    ("ack", 1),
    ("ack", 2),
    ("retry", 1),
    ("retry", 2),
    ("bury", 1),
    ("defer", 1),
    *(("extend", n) for n in range(1, 4)),
    ("release", 1),
]


def _matcher(target: str, bury_id: str) -> Callable[[SeenCall], bool]:
    def is_bury(call: SeenCall) -> bool:
        return call.op == "script" and call.name == "retry" and bury_id in call.args

    if target == "bury":
        return is_bury
    if target == "retry":
        return lambda call: scripts("retry")(call) and not is_bury(call)
    return scripts(target)


class Case:
    """One queue, its jobs, and the handler both phases share."""

    def __init__(self, bus: Bus, queue: str, *, per_lane: bool = False) -> None:
        self.bus = bus
        self.queue = queue
        self.per_lane = per_lane  # the consumer under faults dispatches to a task per lane
        self.ledger = f"test:{{{queue}}}:completed"
        self.ids = {kind: ids.generate("JOB") for kind in KINDS}
        self.visits: Counter[str] = Counter()
        self.second_phase = trio.Event()

    async def handler(self, job: Job) -> HandlerResult:
        kind = job.text
        self.visits[kind] += 1
        first = self.visits[kind] == 1
        if kind == "retry" and first:
            return RetryIn(10, "not yet")
        if kind == "raise" and first:
            raise RuntimeError("flaky")
        if kind == "defer" and first:
            return DeferIn(10, "no token")
        if kind == "bury":
            return Bury("chat not found")
        if kind == "slow":
            await self.second_phase.wait()
        # The handler's work is done: record it with nothing that can cut between the record
        # and the return, so every completion must end in exactly one ack. The note job takes
        # a lease over its last step, so renewals (and stops at them) come while it finishes.
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 5):
            await self.bus.transport.command("RPUSH", self.ledger, job.id)
            if kind == "note":
                await trio.sleep(LEASE_MS / 1000)
        return Ack("noted") if kind == "note" else None

    async def settled(self) -> tuple[Counter[str], Counter[str], Counter[str]]:
        """(acks, burials and other settlements from the audit stream, handler completions)."""
        audit = await events.read(self.bus, self.queue, count=1000, stream="audit")
        acks = Counter(e.subject for e in audit if e.fields["outcome"] == "acked")
        others = Counter(f"{e.subject}:{e.fields['outcome']}" for e in audit)
        others -= Counter(f"{i}:acked" for i in acks.elements())
        done = Counter(
            x.decode() for x in await self.bus.transport.command("LRANGE", self.ledger, "0", "-1")
        )
        return acks, others, done

    async def run(self, target: str, n: int, kind: str) -> None:
        bus, queue = self.bus, self.queue
        await jobs.set_audit(bus, queue)
        await jobs.enqueue_many(bus, queue, [(self.ids[k], k) for k in KINDS])
        await self._faulty_run(target, n, kind)
        await self._check_nothing_lost_or_settled_twice(f"{target} {n} {kind}")
        await self._drain()
        await self._check_drained(f"{target} {n} {kind}")

    async def _faulty_run(self, target: str, n: int, kind: str) -> None:
        faulty = FaultyTransport(self.bus.transport)
        consumer = Consumer(
            Bus(faulty),
            self.queue,
            self.handler,
            concurrency=1,
            prefetch=0,
            lease_ms=LEASE_MS,
            max_attempts=10,
            backoff=Fixed(10),
            grace_s=0,
            per_lane=self.per_lane,
        )
        matches = _matcher(target, self.ids["bury"])
        after = kind.endswith("-after")
        fault: Fault
        async with trio.open_nursery() as nursery:
            error = FAULTS[kind]
            if error is None:
                fault = faulty.cancel(matches, nursery.cancel_scope, nth=n, after=after)
            else:
                fault = faulty.fail(matches, error, nth=n, after=after)
            await nursery.start(consumer.run)

            async def quiet() -> bool:
                # A release comes only with the stop; every other fault comes before it.
                if not (fault.fired or target == "release"):
                    return False
                held = consumer.statistics().held
                c = await jobs.counts(self.bus, self.queue)
                return c.pending == 0 and held <= (1 if self.visits["slow"] else 0)

            await wait_for(quiet, timeout=10)
            nursery.cancel_scope.cancel()
        assert fault.fired, f"{target} {n} {kind}: the fault never came"

    async def _check_nothing_lost_or_settled_twice(self, case: str) -> None:
        acks, others, done = await self.settled()
        assert max(acks.values(), default=0) <= 1, f"{case}: acked twice: {acks}"
        assert acks == done, f"{case}: acks {acks} differ from completions {done}"
        waiting: dict[str, str] = {}
        for state in ("pending", "scheduled", "active", "dead"):
            for info in await jobs.list_jobs(self.bus, self.queue, state, limit=100):
                assert info.id not in waiting, (
                    f"{case}: {info.id} is {waiting[info.id]} and {state}"
                )
                waiting[info.id] = state
                if state == "active":
                    assert info.score_ms is not None, f"{case}: {info.id} active with no lease"
        for kind, job_id in self.ids.items():
            if acks[job_id]:
                assert job_id not in waiting, f"{case}: {kind} acked and still {waiting[job_id]}"
                assert await jobs.get_job(self.bus, self.queue, job_id) is None
            else:
                assert job_id in waiting, f"{case}: {kind} lost"
            if waiting.get(job_id) == "dead":
                assert kind == "bury", f"{case}: {kind} is dead"
        assert set(others) <= {f"{self.ids['bury']}:dropped"}, f"{case}: {others}"

    async def _drain(self) -> None:
        self.second_phase.set()
        consumer = Consumer(
            self.bus, self.queue, self.handler, concurrency=4, max_attempts=10, backoff=Fixed(10)
        )

        async def drained() -> bool:
            c = await jobs.counts(self.bus, self.queue)
            return c.pending == c.scheduled == c.active == 0 and c.dead == 1

        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            await nursery.start(Metronome(self.bus, self.queue, beat_ms=50).run)
            await wait_for(drained, timeout=10)
            nursery.cancel_scope.cancel()

    async def _check_drained(self, case: str) -> None:
        acks, others, done = await self.settled()
        every_ok_job_once = Counter(self.ids[k] for k in ACKED)
        assert acks == every_ok_job_once, f"{case}: acks {acks}"
        assert done == every_ok_job_once, f"{case}: completions {done}"
        assert others == Counter([f"{self.ids['bury']}:dropped"]), f"{case}: {others}"
        c = await jobs.counts(self.bus, self.queue)
        totals = (c.completed_total, c.dead_total, c.retried_total, c.deferred_total)
        assert totals == (len(ACKED), 1, 2, 1), f"{case}: totals {totals}"


@pytest.mark.timeout_s(40)
@pytest.mark.parametrize(("target", "n"), POINTS, ids=[f"{t}-{n}" for t, n in POINTS])
async def test_cancel_or_fail_at_every_call_loses_no_job_and_settles_none_twice(
    bus: Bus, queue: str, target: str, n: int
) -> None:
    async with trio.open_nursery() as nursery:
        # Each point under every fault: half of the faults against the pool of handlers, the
        # other half against per-lane dispatch (each mode meets faults before and after a call).
        for i, kind in enumerate(FAULTS):
            case = Case(bus, f"{queue}.{i}", per_lane=kind in PER_LANE)
            nursery.start_soon(case.run, target, n, kind)
