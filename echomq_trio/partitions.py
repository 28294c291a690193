"""Partitioned queues: one queue spread over ``n`` hash slots, so over every primary of a cluster.

Every queue lives in one hash slot (all its keys share the tag of its name), so one queue can use
one primary's CPU and no more. A queue created with ``n`` partitions is ``n`` ordinary queues,
routed in Python: no script knows of partitions, and each partition is a complete queue of
today's layout.

Theory of operation:

* Names (``partition_names``, pure): partition 0 is the queue itself, so one partition is
  exactly a plain queue; partition i > 0 is the queue ``q~p<i>.<k>``, its name chosen so the
  partitions' slots fall in ``n`` different ranges of the slots (``echomq_trio._partitioning``).
* The count is recorded in partition 0's ``meta`` (field ``partitions``) by ``create``; each
  other partition's ``meta`` names its queue and index (``partition_of``, ``partition``). ``open``
  reads the count (1 for a queue never partitioned) and returns a ``PartitionedQueue``: a frozen
  handle with nothing cached anywhere else (not on the ``Bus``, not in a module global).
* Routing: a lane (group) belongs to partition ``crc32(group) % n``, so all of its jobs are in
  one ordinary queue and its order, limit, pause and wait stay exact. So do a debounce key's
  enqueues, an idempotency key's and a given job id's (a retried enqueue meets the first in
  the same partition, so it is idempotent as on a plain queue). Other flat jobs go round-robin
  (a counter on the handle); a batch goes by its ids (the bus mints them first), one call per
  partition, concurrently. A recurring schedule lives in partition 0, or in its lane's
  partition when it fires into a lane: one partition holds it, so each occurrence fires once.
* Consuming (``echomq_trio._partition_running``): ``PartitionedConsumer`` runs one ordinary
  ``Consumer`` per partition in a nursery.
  Each claims its own partition, so none starves and an empty one parks on its wake list (no
  server work). Each has the ``concurrency`` it is given: ``n`` partitions run up to ``n``
  times that many handlers. ``PartitionedMetronome`` runs a ``Metronome`` per partition;
  ``PartitionedQueue.serve`` gives a ``worker.Serve`` per partition, for ``open_worker``. Their
  metrics carry the queue's name (``metrics_queue``): one series per queue.
* Reading: ``counts`` sums the partitions' counts (read concurrently: each partition's is one
  consistent snapshot, their sum is not one instant); a lane's status and jobs are read in its
  partition; a job by id (``get_job``, ``cancel``, ``result``, ``replay``...) is looked for in
  every partition at once (a lane job's partition is its lane's, not its id's); listings of jobs
  by state (``list_jobs``, ``dead_jobs``) and recurring schedules merge every partition's first
  page; events (``read_events``, ``follow_events``) merge every partition's stream in time
  order (``_stream_merge``).
* Flows: ``add_flow`` puts a whole flow in one partition (the root id's, else the next in
  turn), its jobs of the queue renamed to that partition's: a flow is one script, so one slot;
  its reads (``flow_children``, ``children_results``, ``flow_tree``) go to the root's holder.
* The audit: ``read_audit``, ``autoclaim_audit`` and ``forget_idle_audit_readers`` work in
  every partition at once, records as ``(partition, record)`` pairs in time order;
  ``ack_and_trim_audit`` takes the pairs back.
* Controls: ``pause``/``resume``, ``keep_results``, ``configure_retention``, ``enable_audit``
  and ``set_expired`` set every partition at once; ``delete_all`` and ``replay_all`` repair
  every partition. The CLI and the dashboard see one queue through these
  (``echomq_trio._one_queue``). The cap on jobs in flight (``set_limit``) is the whole
  queue's: a total in partition 0, shared out as one ordinary cap per partition by rounds
  (``echomq_trio._partition_cap``, the shares' arithmetic in ``echomq_trio._cap_shares``) that
  ``set_limit`` runs once and every ``PartitionedMetronome`` runs every ``share_ms``; an epoch
  fences them, so the partitions never hold more than the total in flight, however rounds race
  or fail. Changing ``n``: drain the queue, ``dissolve`` it, ``create`` it anew.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs
import trio

from echomq_trio import _partition_cap as _cap
from echomq_trio import audit, events, flows, jobs, lanes, protocol, queues, repeat, retention
from echomq_trio._checks import check_name, check_stream_id
from echomq_trio._partition_cap import check_total
from echomq_trio._partition_meta import (
    COUNT_FIELD,
    INDEX_FIELD,
    OF_FIELD,
    Membership,
    Meta,
    each,
    membership,
    read_meta,
    sum_counts,
)
from echomq_trio._partition_running import CapRounds, PartitionedConsumer, PartitionedMetronome
from echomq_trio._partitioning import (
    MAX_PARTITIONED_NAME_BYTES,
    MAX_PARTITIONS,
    partition_names,
    route,
)
from echomq_trio._stream_merge import id_key, merge_page
from echomq_trio.bus import Bus
from echomq_trio.consumer import Handler
from echomq_trio.events import Event
from echomq_trio.flows import Flow, FlowAdded, FlowTree
from echomq_trio.protocol import Item
from echomq_trio.results import (
    Acknowledged,
    Admitted,
    AuditRecord,
    Cancelled,
    ChildEnd,
    Counts,
    JobInfo,
    LaneStatus,
    Outcome,
    QueueCap,
    Registered,
    Registration,
    Retention,
)
from echomq_trio.states import JobState
from echomq_trio.worker import Serve

FOLLOW_PAGE = 500  # events read per partition per round by follow_events, as events.follow
CHANGE_N = "drain it, partitions.dissolve it, then create it anew (docs/howto/partitions.md)"
__all__ = [
    "MAX_PARTITIONED_NAME_BYTES",
    "MAX_PARTITIONS",
    "CapRounds",
    "Membership",
    "PartitionedConsumer",
    "PartitionedMetronome",
    "PartitionedQueue",
    "QueueCap",
    "create",
    "dissolve",
    "membership",
    "open",
    "partition_names",
    "route",
    "sum_counts",
]


def _not_a_partition(queue: str, of: str | None, index: int | None) -> None:
    if of is not None and of != queue:
        raise ValueError(f"queue {queue!r} is partition {index} of queue {of!r}: use {of!r}")


@attrs.frozen(eq=False)
class PartitionedQueue:
    """A handle on a partitioned queue (``open``, ``create``): its ``bus``, its ``name`` and its
    partitions' ``names`` (``names[0] == name``). Each method routes to the partition that
    holds what it names and runs the function of ``jobs``, ``lanes`` or ``repeat`` of the same
    name there, with the same options and answers; cancellation is as there. The round-robin
    counter of flat jobs is the handle's own (share a handle, or not: either spreads evenly)."""

    bus: Bus
    name: str
    names: tuple[str, ...]
    _turn: Iterator[int] = attrs.field(factory=itertools.count, repr=False, alias="_turn")

    @property
    def n(self) -> int:
        """How many partitions."""
        return len(self.names)

    def partition_of(self, group: str) -> str:
        """The partition (its queue name) of lane ``group``, or of a debounce key, an
        idempotency key or a given job id."""
        return self.names[route(check_name("lane group or key", group), len(self.names))]

    def _next(self) -> str:
        return self.names[next(self._turn) % len(self.names)]

    # --- admission ----------------------------------------------------------------------------

    async def enqueue(
        self,
        payload: str | bytes,
        *,
        job_id: str | None = None,
        key: str | None = None,
        debounce: str | None = None,
        **options: Any,
    ) -> Admitted:
        """``jobs.enqueue`` (its ``options``) in the partition of ``debounce``, else of ``key``,
        else of ``job_id``, else the next partition in turn."""
        by = debounce if debounce is not None else key if key is not None else job_id
        queue = self._next() if by is None else self.partition_of(by)
        return await jobs.enqueue(
            self.bus, queue, payload, job_id=job_id, key=key, debounce=debounce, **options
        )

    async def enqueue_many(self, items: Iterable[Item], **options: Any) -> list[Admitted]:
        """``jobs.enqueue_many``: each job to the partition of its id (minted here when not
        given), one call per partition, concurrently; answers in input order. A cancelled call
        may have admitted some: call again with the same ids (they answer ``DUPLICATE``)."""
        # every id and payload checked before any I/O: a bad one admits nothing anywhere
        pairs = protocol.checked_pairs(protocol.with_ids(items), self.bus.max_payload_bytes)
        if len(self.names) == 1:
            return await jobs.enqueue_many(self.bus, self.name, pairs, **options)
        where: dict[str, list[int]] = {}
        for i, (job_id, _) in enumerate(pairs):
            where.setdefault(self.partition_of(job_id), []).append(i)
        parts = list(where.items())

        def call(queue: str, idx: list[int]) -> Callable[[], Awaitable[list[Admitted]]]:
            return lambda: jobs.enqueue_many(self.bus, queue, [pairs[i] for i in idx], **options)

        answers = await each([call(queue, idx) for queue, idx in parts])
        out: list[Admitted | None] = [None] * len(pairs)
        for (_, idx), admitted in zip(parts, answers, strict=True):
            for i, a in zip(idx, admitted, strict=True):
                out[i] = a
        return out  # type: ignore[return-value]  # every item has its answer

    def _scheduled(self, job_id: str | None, group: str | None) -> str:
        by = group if group is not None else job_id
        return self._next() if by is None else self.partition_of(by)

    async def enqueue_at(
        self,
        payload: str | bytes,
        run_at_ms: Any,
        *,
        job_id: str | None = None,
        group: str | None = None,
        **options: Any,
    ) -> Admitted:
        """``jobs.enqueue_at`` in the partition of ``group`` (its lane), else of ``job_id``, else
        the next in turn."""
        queue = self._scheduled(job_id, group)
        return await jobs.enqueue_at(
            self.bus, queue, payload, run_at_ms, job_id=job_id, group=group, **options
        )

    async def enqueue_in(
        self,
        payload: str | bytes,
        delay_ms: Any,
        *,
        job_id: str | None = None,
        group: str | None = None,
        **options: Any,
    ) -> Admitted:
        """``jobs.enqueue_in``, routed as ``enqueue_at``."""
        queue = self._scheduled(job_id, group)
        return await jobs.enqueue_in(
            self.bus, queue, payload, delay_ms, job_id=job_id, group=group, **options
        )

    async def lane_enqueue(self, group: str, payload: str | bytes, **options: Any) -> Admitted:
        """``lanes.enqueue`` in the lane's partition (a ``debounce`` key too: it meets the key's
        other enqueues of this lane)."""
        return await lanes.enqueue(self.bus, self.partition_of(group), group, payload, **options)

    async def lane_enqueue_many(
        self, group: str, items: Iterable[Item], **options: Any
    ) -> list[Admitted]:
        """``lanes.enqueue_many`` in the lane's partition."""
        return await lanes.enqueue_many(self.bus, self.partition_of(group), group, items, **options)

    # --- lanes --------------------------------------------------------------------------------

    async def pause_lane(self, group: str) -> None:
        """``lanes.pause`` in the lane's partition."""
        await lanes.pause(self.bus, self.partition_of(group), group)

    async def pause_lane_until(self, group: str, at_ms: int) -> int:
        """``lanes.pause_until`` in the lane's partition."""
        return await lanes.pause_until(self.bus, self.partition_of(group), group, at_ms)

    async def resume_lane(self, group: str) -> bool:
        """``lanes.resume`` in the lane's partition."""
        return await lanes.resume(self.bus, self.partition_of(group), group)

    async def configure_lane(
        self, group: str, *, limit: int | None = None, weight: int | None = None
    ) -> tuple[int | None, int]:
        """``lanes.configure`` in the lane's partition."""
        queue = self.partition_of(group)
        return await lanes.configure(self.bus, queue, group, limit=limit, weight=weight)

    async def lane_status(self, groups: Sequence[str] = ()) -> list[LaneStatus]:
        """``lanes.status``: of the ``groups`` named, each read in its partition, in the order
        named; or when none are named, of every listed lane of every partition, in name order
        (each partition paged as ``lanes.status`` pages it). One call per partition,
        concurrently. Read only."""
        if not groups:
            parts = await each([self._status_in(q, ()) for q in self.names])
            return sorted((s for part in parts for s in part), key=lambda s: s.group)
        where: dict[str, list[str]] = {}
        for group in dict.fromkeys(groups):
            where.setdefault(self.partition_of(group), []).append(group)
        parts = await each([self._status_in(q, g) for q, g in where.items()])
        found = {s.group: s for part in parts for s in part}
        return [found[group] for group in groups]

    def _status_in(
        self, queue: str, groups: Sequence[str]
    ) -> Callable[[], Awaitable[list[LaneStatus]]]:
        return lambda: lanes.status(self.bus, queue, groups)

    async def lane_jobs(self, group: str, offset: int = 0, limit: int = 100) -> list[JobInfo]:
        """``lanes.jobs``: the jobs waiting in a lane, in its partition."""
        return await lanes.jobs(self.bus, self.partition_of(group), group, offset, limit)

    # --- the whole queue ----------------------------------------------------------------------

    async def counts(self) -> Counts:
        """``jobs.counts`` of every partition, read concurrently and added up (``exists``: any
        partition was used). Each partition's counts are one snapshot; their sum is not one
        instant (a job settled in one partition while another is read is counted as it was)."""
        return sum_counts(await each([_counter(self.bus, q) for q in self.names]))

    async def pause(self) -> bool:
        """``queues.pause`` of every partition at once: no consumer claims from the queue until
        ``resume``. ``True`` if this call paused any partition. A cancelled call may have paused
        some: call again."""
        return any(await each([self._control_in(queues.pause, q) for q in self.names]))

    async def resume(self) -> bool:
        """``queues.resume`` of every partition at once; ``True`` if any was paused. A cancelled
        call may have resumed some: call again."""
        return any(await each([self._control_in(queues.resume, q) for q in self.names]))

    def _control_in(
        self, fn: Callable[[Bus, str], Awaitable[bool]], queue: str
    ) -> Callable[[], Awaitable[bool]]:
        return lambda: fn(self.bus, queue)

    async def keep_results(self, ttl_ms: int) -> int:
        """``jobs.keep_results`` on every partition at once (``result`` needs it on the one
        that holds the job); the TTL in effect. A cancelled call may have set some: call
        again."""
        (ttl, *_) = await each([self._keep_in(q, ttl_ms) for q in self.names])
        return ttl

    def _keep_in(self, queue: str, ttl_ms: int) -> Callable[[], Awaitable[int]]:
        return lambda: jobs.keep_results(self.bus, queue, ttl_ms)

    async def set_limit(self, total: int | None) -> QueueCap:
        """Cap the jobs in flight of the whole queue, across every partition, consumer and
        process, at ``total`` (>= 1), or clear the cap (``None``). The total is shared out as one
        ordinary cap per partition (``queues.set_limit``'s), moved by rounds so that the
        partitions together never hold more than ``total`` in flight: this call records the
        total and runs a round at once, and every ``PartitionedMetronome`` (or ``CapRounds``)
        runs one every ``share_ms`` after. A total lowered below what runs takes nothing back
        (jobs leased finish, claims wait); clearing removes every partition's cap.
        ``ValueError`` (one line) for anything but an int >= 1 or ``None``, before any I/O.
        Returns ``limit()``'s reading after.

        Idempotent: a cancelled call may have recorded the total and moved some caps (the
        invariant holds either way: see ``docs/howto/partitions.md``); call again."""
        checked = check_total(total)
        if checked is None:
            await _cap.clear(self.bus, self.names)
        else:
            await _cap.start(self.bus, self.names, checked)
        return await self.limit()

    async def limit(self) -> QueueCap:
        """The queue-wide cap on jobs in flight (``total``, ``None`` for none), the jobs in
        flight in every partition (their sum: not one instant) and each partition's share
        in effect. Read only: one command per partition and one more, concurrently."""
        return await _cap.read(self.bus, self.names)

    async def share_cap(self, *, holder: str = "", lease_ms: int = 0) -> list[int] | None:
        """One round of the queue-wide cap (``PartitionedMetronome`` runs them): stamp every
        partition with a new epoch, lower the caps above their share and raise those below it
        within the room the total leaves. The shares aimed at, or ``None`` when no round ran
        (no total; another ``holder``'s lease of ``lease_ms`` on the rounds runs; a newer round
        fenced this one off). Rounds may race: each keeps the partitions' jobs in flight within
        the total."""
        return await _cap.share_round(self.bus, self.names, holder=holder, lease_ms=lease_ms)

    def serve(self, handler: Handler, **settings: Any) -> list[Serve]:
        """One ``worker.Serve`` per partition, each with ``handler`` and the ``settings`` given
        (``concurrency`` and the rest, per partition), for ``open_worker``: a ``Worker`` then
        runs a consumer and a metronome on every partition, with its grace period, and beside
        them the rounds of the queue-wide cap on jobs in flight (``CapRounds``, partition 0's
        ``Serve.beside``; not with ``metronome=False``, which leaves them to elsewhere)."""
        settings.setdefault("metrics_queue", self.name)  # one series per queue (metrics)
        serves = [Serve(name, handler, **settings) for name in self.names]
        if self.n > 1 and serves[0].metronome:
            rounds = CapRounds(self, beat_ms=serves[0].beat_ms)
            serves[0] = attrs.evolve(serves[0], beside=(*serves[0].beside, rounds.run))
        return serves

    # --- a job by id --------------------------------------------------------------------------

    async def find(self, job_id: str) -> tuple[str, JobInfo] | None:
        """The partition that holds job ``job_id`` and its row (every partition asked at once),
        or ``None``. Read only."""
        rows = await each([self._get_in(q, job_id) for q in self.names])
        for queue, row in zip(self.names, rows, strict=True):
            if row is not None:
                return queue, row
        return None

    def _get_in(self, queue: str, job_id: str) -> Callable[[], Awaitable[JobInfo | None]]:
        return lambda: jobs.get_job(self.bus, queue, job_id)

    async def get_job(self, job_id: str) -> JobInfo | None:
        """``jobs.get_job``, looked for in every partition at once."""
        found = await self.find(job_id)
        return None if found is None else found[1]

    async def cancel(self, job_id: str, reason: str = "", by: str = "") -> Cancelled:
        """``jobs.cancel`` in every partition at once (only the one that holds the job has it):
        its answer, or ``NOT_FOUND`` from all."""
        answers = await each([self._cancel_in(q, job_id, reason, by) for q in self.names])
        for answer in (Cancelled.CANCELLED, Cancelled.ALREADY_DONE):
            if answer in answers:
                return answer
        return Cancelled.NOT_FOUND

    def _cancel_in(
        self, queue: str, job_id: str, reason: str, by: str
    ) -> Callable[[], Awaitable[Cancelled]]:
        return lambda: jobs.cancel(self.bus, queue, job_id, reason, by)

    async def holder(self, job_id: str) -> str:
        """The partition whose queue holds job ``job_id``'s row (one ``EXISTS`` per partition,
        at once), or partition 0 (``name``) when none does: a job never moves between
        partitions, so a call made there answers for the whole queue. Read only."""
        keys = [self.bus.keys(q).job(job_id) for q in self.names]  # checks the id, before I/O
        held = await each([self._exists(key) for key in keys])
        return next((q for q, h in zip(self.names, held, strict=True) if h), self.name)

    def _exists(self, key: str) -> Callable[[], Awaitable[bool]]:
        async def exists() -> bool:
            return bool(await self.bus.command("EXISTS", key))

        return exists

    async def result(self, job_id: str, *, timeout_s: float) -> bytes | None:
        """``jobs.result`` in the partition that holds the job (``holder``; a job in no
        partition is asked of partition 0, which raises as ``jobs.result`` does). Every
        partition must keep results (``keep_results``)."""
        queue = await self.holder(job_id)
        return await jobs.result(self.bus, queue, job_id, timeout_s=timeout_s)

    async def replay(self, job_id: str) -> Outcome:
        """``jobs.replay`` in the partition that holds the job (``holder``)."""
        return await jobs.replay(self.bus, await self.holder(job_id), job_id)

    async def discard(self, job_id: str) -> Outcome:
        """``jobs.discard`` in the partition that holds the job (``holder``)."""
        return await jobs.discard(self.bus, await self.holder(job_id), job_id)

    async def delete(self, job_id: str) -> Outcome:
        """``jobs.delete`` in the partition that holds the job (``holder``)."""
        return await jobs.delete(self.bus, await self.holder(job_id), job_id)

    # --- listings -----------------------------------------------------------------------------

    async def list_jobs(
        self, state: JobState | str, offset: int = 0, limit: int = 100
    ) -> list[JobInfo]:
        """``jobs.list_jobs`` of the whole queue: the first ``offset + limit`` of each partition
        (at once), merged in the order of one queue's set, ``[offset:offset + limit]`` of that:
        ``pending`` highest priority first, then by id (mint order); the other states by score
        (run-at, lease deadline, time of death or of the cancel), then id. So a page costs
        ``n`` times ``offset + limit`` rows: page with a small ``offset``. Read only."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        pending = JobState(state) is JobState.PENDING  # a bad state raises, before any I/O
        parts = await each([self._list_in(q, state, offset + limit) for q in self.names])
        rows = [row for part in parts for row in part]
        if pending:
            rows.sort(key=lambda r: (-r.priority, r.id))
        else:
            rows.sort(key=lambda r: (r.score_ms or 0, r.id))
        return rows[offset : offset + limit]

    def _list_in(
        self, queue: str, state: JobState | str, limit: int
    ) -> Callable[[], Awaitable[list[JobInfo]]]:
        return lambda: jobs.list_jobs(self.bus, queue, state, 0, limit)

    async def dead_jobs(self, offset: int = 0, limit: int = 100) -> list[JobInfo]:
        """``jobs.dead_jobs`` of the whole queue: oldest death first (``list_jobs``)."""
        return await self.list_jobs(JobState.DEAD, offset, limit)

    # --- recurring schedules ------------------------------------------------------------------

    async def register(
        self, name: str, *, group: str | None = None, **options: Any
    ) -> tuple[Registered, int]:
        """``repeat.register`` in partition 0, or, with ``group``, in the lane's partition (its
        jobs join their lane in order with the lane's other jobs). One partition holds each
        registration, so each occurrence fires once whatever ``n`` is; a name registered
        again with a lane of another partition is a second registration (``cancel_repeat``
        it first)."""
        queue = self.name if group is None else self.partition_of(group)
        return await repeat.register(self.bus, queue, name, group=group, **options)

    async def cancel_repeat(self, name: str) -> bool:
        """``repeat.cancel`` in every partition at once; ``True`` if any held ``name``."""
        return any(await each([self._cancel_repeat_in(q, name) for q in self.names]))

    def _cancel_repeat_in(self, queue: str, name: str) -> Callable[[], Awaitable[bool]]:
        return lambda: repeat.cancel(self.bus, queue, name)

    # --- one queue for readers and operators: events, audit, settings, bulk repairs ----------
    # (the CLI and the dashboard see a partitioned queue through these; each runs the function
    # of ``events``, ``audit``, ``retention``, ``queues`` or ``jobs`` it names on every
    # partition)

    async def list_repeats(self, limit: int = 1000, offset: int = 0) -> list[Registration]:
        """``repeat.list_repeats`` of the whole queue: each partition's first ``offset + limit``
        (at once), merged soonest next run first (then by name), ``[offset:offset + limit]`` of
        that. Read only."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        if self.n == 1:
            return await repeat.list_repeats(self.bus, self.name, limit, offset)
        parts = await each([self._repeats_in(q, offset + limit) for q in self.names])
        rows = sorted((r for part in parts for r in part), key=lambda r: (r.next_run_ms, r.name))
        return rows[offset : offset + limit]

    def _repeats_in(self, queue: str, limit: int) -> Callable[[], Awaitable[list[Registration]]]:
        return lambda: repeat.list_repeats(self.bus, queue, limit)

    async def read_events(
        self, after: str = "-", count: int = 100, *, stream: str = "events"
    ) -> list[tuple[str, Event]]:
        """``events.read`` of every partition at once, merged in time order (stream ids
        ``(ms, seq)``, ``_stream_merge``): ``(partition, event)`` pairs after stream id
        ``after``, ``count`` of them (a few more when events of several partitions share the
        last one's id), so that the next page is the one after the last pair's id: no event is
        skipped or read twice. Read only."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be an int >= 1, got {count!r}")
        check_stream_id("after", after, ("-",))
        pages = await each([self._events_in(q, after, count, stream) for q in self.names])
        return [(self.names[i], e) for i, e in merge_page(pages, count)]

    def _events_in(
        self, queue: str, after: str, count: int, stream: str
    ) -> Callable[[], Awaitable[list[Event]]]:
        return lambda: events.read(self.bus, queue, after, count, stream=stream)

    async def follow_events(
        self, after: str | None = None, *, poll_s: float = 0.2, stream: str = "events"
    ) -> AsyncIterator[tuple[str, Event]]:
        """``events.follow`` of every partition: ``(partition, event)`` pairs as they arrive,
        from after ``after`` (default: from now on, each partition from its newest event), in
        time order (stream ids, ``read_events``). Each round takes the server's time, then reads
        every partition after its own cursor at once, and yields the events older than that
        time: every partition had written those before it was read, so a later round never
        yields an older one (on a cluster, as far as its primaries' clocks agree). A round that
        yields nothing sleeps ``poll_s`` (cancellable). A malformed ``after`` raises
        ``ValueError`` on the first iteration, before any I/O."""
        if after is not None:
            check_stream_id("after", after, ("-",))
            cursors = [after] * self.n
        else:
            cursors = await each([self._last_in(q, stream) for q in self.names])
        while True:
            now = await self.bus.transport.server_time_ms() if self.n > 1 else None
            reads = zip(self.names, cursors, strict=True)
            pages = await each([self._events_in(q, c, FOLLOW_PAGE, stream) for q, c in reads])
            batch = [(i, e) for i, e in merge_page(pages, FOLLOW_PAGE)
                     if now is None or e.time_ms < now]  # fmt: skip
            for i, event in batch:
                cursors[i] = event.stream_id
                yield self.names[i], event
            if not batch:
                await trio.sleep(poll_s)

    def _last_in(self, queue: str, stream: str) -> Callable[[], Awaitable[str]]:
        return lambda: events.last_id(self.bus, queue, stream=stream)

    async def enable_audit(self, on: bool = True) -> None:
        """``audit.enable`` on every partition at once (``on=False``: stop). A cancelled call
        may have set some: call again."""
        await each([self._audit_in(q, on) for q in self.names])

    def _audit_in(self, queue: str, on: bool) -> Callable[[], Awaitable[None]]:
        return lambda: audit.enable(self.bus, queue, on)

    async def create_audit_group(self, group: str, start: str = "0") -> bool:
        """``audit.create_group`` on every partition's audit stream at once; ``True`` if any
        partition's group was new."""
        return any(await each([self._group_in(q, group, start) for q in self.names]))

    def _group_in(self, queue: str, group: str, start: str) -> Callable[[], Awaitable[bool]]:
        return lambda: audit.create_group(self.bus, queue, group, start)

    async def read_audit(
        self, group: str, consumer: str, count: int = 100, *, pending: bool = False
    ) -> list[tuple[str, AuditRecord]]:
        """``audit.read`` of every partition at once: ``(partition, record)`` pairs, up to
        ``count`` per partition, in time order. Acknowledge each in its partition
        (``ack_and_trim_audit`` takes the pairs' partitions and stream ids). A cancelled call
        leaves records pending as ``audit.read`` does (read them with ``pending=True``)."""
        parts = await each([self._read_audit_in(q, group, consumer, count, pending)
                            for q in self.names])  # fmt: skip
        return self._in_time_order(parts)

    def _read_audit_in(
        self, queue: str, group: str, consumer: str, count: int, pending: bool
    ) -> Callable[[], Awaitable[list[AuditRecord]]]:
        return lambda: audit.read(self.bus, queue, group, consumer, count, pending=pending)

    async def autoclaim_audit(
        self, group: str, consumer: str, min_idle_ms: int, count: int = 100
    ) -> list[tuple[str, AuditRecord]]:
        """``audit.autoclaim`` in every partition at once: the records another reader of
        ``group`` was handed and has not acknowledged for ``min_idle_ms`` (it crashed), up to
        ``count`` per partition, now ``consumer``'s, as ``(partition, record)`` pairs in time
        order, as ``read_audit`` gives them. A cancelled call may have moved records the caller
        never saw: read them with ``read_audit(..., pending=True)``."""
        parts = await each([self._autoclaim_in(q, group, consumer, min_idle_ms, count)
                            for q in self.names])  # fmt: skip
        return self._in_time_order(parts)

    def _autoclaim_in(
        self, queue: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> Callable[[], Awaitable[list[AuditRecord]]]:
        return lambda: audit.autoclaim(self.bus, queue, group, consumer, min_idle_ms, count)

    def _in_time_order(self, parts: list[list[AuditRecord]]) -> list[tuple[str, AuditRecord]]:
        rows = [(i, r) for i, part in enumerate(parts) for r in part]
        rows.sort(key=lambda t: (id_key(t[1].stream_id), t[0]))
        return [(self.names[i], r) for i, r in rows]

    async def forget_idle_audit_readers(
        self, group: str, idle_ms: int, *, keep: str | None = None
    ) -> list[tuple[str, str]]:
        """``audit.forget_idle_readers`` in every partition at once: ``(partition, reader)``
        pairs removed, by partition. A reader is removed where it holds nothing and has been
        idle long enough; where it still holds records (in another partition, say) it stays
        until ``autoclaim_audit`` takes them. A cancelled call may or may not have run in each
        partition (each is atomic); call again."""
        parts = await each([self._forget_in(q, group, idle_ms, keep) for q in self.names])
        return [(q, name) for q, names in zip(self.names, parts, strict=True) for name in names]

    def _forget_in(
        self, queue: str, group: str, idle_ms: int, keep: str | None
    ) -> Callable[[], Awaitable[list[str]]]:
        return lambda: audit.forget_idle_readers(self.bus, queue, group, idle_ms, keep=keep)

    async def ack_and_trim_audit(
        self, group: str, records: Iterable[tuple[str, str]]
    ) -> Acknowledged:
        """``audit.ack_and_trim`` of ``(partition, stream id)`` pairs, in each partition (every
        partition trims, with or without ids), at once; the answers added up. ``ValueError`` for
        a partition not of this queue, before any I/O."""
        ids: dict[str, list[str]] = {q: [] for q in self.names}
        for queue, stream_id in records:
            if queue not in ids:
                raise ValueError(f"{queue!r} is not a partition of queue {self.name!r}")
            ids[queue].append(stream_id)
        got = await each([self._ack_in(q, group, s) for q, s in ids.items()])
        return Acknowledged(sum(a.acked for a in got), sum(a.trimmed for a in got))

    def _ack_in(
        self, queue: str, group: str, stream_ids: list[str]
    ) -> Callable[[], Awaitable[Acknowledged]]:
        return lambda: audit.ack_and_trim(self.bus, queue, group, stream_ids)

    async def configure_retention(self, **settings: Any) -> Retention:
        """``retention.configure`` (its ``settings``) on every partition at once: each keeps
        what one queue would (a ``dead_max`` bounds each partition's dead set: up to ``n`` times
        that in all). A cancelled call may have set some: call again."""
        (kept, *_) = await each([self._retention_in(q, settings) for q in self.names])
        return kept

    def _retention_in(
        self, queue: str, settings: dict[str, Any]
    ) -> Callable[[], Awaitable[Retention]]:
        return lambda: retention.configure(self.bus, queue, **settings)

    async def retention(self) -> Retention:
        """``retention.get`` of partition 0 (``configure_retention`` sets every partition
        alike). Read only."""
        return await retention.get(self.bus, self.name)

    async def set_expired(self, action: str) -> str:
        """``queues.set_expired`` on every partition at once; the setting in effect.
        ``ValueError`` for a bad word, before any I/O. A cancelled call may have set some: call
        again."""
        (now, *_) = await each([self._expired_in(q, action) for q in self.names])
        return now

    def _expired_in(self, queue: str, action: str) -> Callable[[], Awaitable[str]]:
        return lambda: queues.set_expired(self.bus, queue, action)

    async def delete_all(
        self,
        state: JobState | str,
        *,
        group: str | None = None,
        older_than_ms: int | None = None,
        limit: int | None = None,
        page: int = 1000,
    ) -> int:
        """``jobs.delete_page`` until done (at most ``limit`` deleted; ``None``: every match)
        in the lane's partition with ``group``, else in each partition in turn (so ``limit`` is
        exact); ``page`` jobs looked at per call. How many it deleted. A cancelled call may have
        deleted some: call again (the deleted are gone)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):  # fmt: skip
            raise ValueError(f"limit must be an int >= 1 or None, got {limit!r}")
        where = self.names if group is None else (self.partition_of(group),)
        deleted = 0
        for queue in where:
            cursor: str | None = None
            while limit is None or deleted < limit:
                size = page if limit is None else min(page, limit - deleted)
                got = await jobs.delete_page(
                    self.bus, queue, state, group=group, older_than_ms=older_than_ms,
                    limit=size, cursor=cursor,
                )  # fmt: skip
                deleted, cursor = deleted + got.deleted, got.next
                if cursor is None:
                    break
        return deleted

    async def replay_all(self, reason: str | None = None, *, page: int = 100) -> int:
        """Replay every dead job (whose last error contains ``reason``) of every partition, at
        once, a page of ``page`` at a time: one script per job, in each partition at most as
        many as were dead there at the start (a job that dies again meanwhile is not replayed
        twice). How many it replayed. A cancelled call may have replayed some: call again."""
        return sum(await each([self._replay_in(q, reason, page) for q in self.names]))

    def _replay_in(self, queue: str, reason: str | None, page: int) -> Callable[[], Awaitable[int]]:
        async def replay_all() -> int:
            dead = (await jobs.counts(self.bus, queue)).dead
            replayed, offset = 0, 0
            while replayed < dead:
                rows = await jobs.dead_jobs(self.bus, queue, offset, page)
                if not rows:
                    break
                for info in rows:
                    if reason is not None and reason not in (info.last_error or ""):
                        offset += 1
                    elif replayed < dead and await jobs.replay(self.bus, queue, info.id) is (
                        Outcome.REPLAYED
                    ):
                        replayed += 1
            return replayed

        return replay_all

    # --- flows --------------------------------------------------------------------------------

    async def add_flow(self, flow: Flow) -> FlowAdded:
        """``flows.add`` of the whole ``flow`` in one partition: the partition of the root's
        ``job_id`` when it has one (a retried ``add`` meets the first: ``DUPLICATE``), else the
        next in turn. Every job of the flow whose queue is this queue's ``name`` (or, as in
        ``flows.add``, none: its parent's) goes to that partition's queue; a job of another
        queue stays in its queue, which on a cluster must share the partition's slot (a
        ``ValueError`` before any I/O, as ``flows.add`` refuses it). The answer names the
        partition's queue (``FlowAdded.root``); a handler reads its children where its job
        is (``flows.children_results(bus, job.queue, job.id)``), a caller by the root's id
        (``children_results``, ``flow_children``, ``flow_tree``). Cancellation is as
        ``flows.add``'s: all of the flow or none of it."""
        if not isinstance(flow, Flow):
            raise TypeError(f"a flow must be a Flow, got {type(flow).__name__}")
        if flow.queue not in (None, self.name):
            raise ValueError(f"flow: its root's queue is {flow.queue!r}, not {self.name!r}: "
                             f"use flows.add for another queue")  # fmt: skip
        queue = self.partition_of(flow.job_id) if flow.job_id else self._next()  # '': minted
        return await flows.add(self.bus, queue, _flow_in_partition(flow, self.name, queue))

    async def flow_children(self, job_id: str) -> list[ChildEnd]:
        """``flows.children`` of job ``job_id`` in the partition that holds it (``holder``)."""
        return await flows.children(self.bus, await self.holder(job_id), job_id)

    async def children_results(self, job_id: str) -> dict[str, bytes | None]:
        """``flows.children_results`` of job ``job_id`` in the partition that holds it
        (``holder``)."""
        return await flows.children_results(self.bus, await self.holder(job_id), job_id)

    async def flow_tree(self, job_id: str, *, max_jobs: int = 200) -> FlowTree | None:
        """``flows.tree`` of job ``job_id`` in the partition that holds it (``holder``):
        ``None`` when no partition does."""
        return await flows.tree(self.bus, await self.holder(job_id), job_id, max_jobs=max_jobs)


def _flow_in_partition(flow: Flow, queue: str, partition: str) -> Flow:
    """``flow`` with every job whose queue is ``queue`` given ``partition`` instead, the root
    included (pure). A job of no queue keeps none: as in ``flows.add`` it inherits its
    parent's, so under a job moved to ``partition`` it lands there too. Anything that is not a
    ``Flow`` is left for ``flows.plan`` to refuse."""

    def moved(node: Flow) -> Flow:
        if not isinstance(node, Flow):
            return node
        kids = tuple(moved(c) for c in node.children)
        return attrs.evolve(node, queue=partition if node.queue == queue else node.queue,
                            children=kids)  # fmt: skip

    return moved(flow)


async def open(bus: Bus, queue: str) -> PartitionedQueue:  # partitions.open
    """A handle on ``queue`` with as many partitions as ``create`` recorded (one, a plain queue,
    when it never did). One ``HMGET``; ``ValueError`` if ``queue`` is another queue's partition."""
    count, of, index = await read_meta(bus, queue)
    _not_a_partition(queue, of, index)
    return PartitionedQueue(bus, queue, partition_names(queue, count or 1))


def _has_jobs(c: Counts) -> bool:
    return any((c.pending, c.scheduled, c.active, c.dead, c.cancelled, c.repeats,
                c.waiting_children))  # fmt: skip


async def create(bus: Bus, queue: str, n: int) -> PartitionedQueue:
    """Make ``queue`` a queue of ``n`` partitions (1 to ``MAX_PARTITIONS``) and return its
    handle. Idempotent for the same ``n`` (a call again completes one that was cancelled).
    ``ValueError`` (one line, saying what to do) when the queue has another count already, when
    ``n > 1`` and the queue holds jobs or recurring schedules (its lanes' jobs would be left in
    partition 0), when a partition's name holds another queue's data, or when ``queue`` is a
    partition itself; checked before anything is written. ``n = 1`` writes nothing: a plain
    queue. Create a queue before its first job: a job admitted to the plain queue while this
    runs stays in partition 0 (served, but a lane's later jobs may go elsewhere)."""
    names = partition_names(queue, n)  # a bad name or count raises here, before any I/O
    count, of, index = await read_meta(bus, queue)
    _not_a_partition(queue, of, index)
    if count is not None and count != n:
        raise ValueError(f"queue {queue!r} has {count} partitions, not {n}: to change that, "
                         f"{CHANGE_N}")  # fmt: skip
    if n == 1 and count is None:
        return PartitionedQueue(bus, queue, names)
    if count is None and _has_jobs(await jobs.counts(bus, queue)):
        raise ValueError(f"queue {queue!r} holds jobs: to partition it, {CHANGE_N}")
    others = await each([_reader(bus, name) for name in names[1:]])
    contents = await each([_counter(bus, name) for name in names[1:]])
    for i, name in enumerate(names[1:], 1):
        other_count, other_of, other_index = others[i - 1]
        if (other_of, other_index) == (queue, i):
            continue  # marked as this partition already (a create run before)
        if other_of is not None or other_count is not None or _has_jobs(contents[i - 1]):
            raise ValueError(f"queue {name!r}, partition {i} of {queue!r}, holds another "
                             f"queue's data: move or delete it first")  # fmt: skip
    await each([_marker(bus, name, queue, i) for i, name in enumerate(names[1:], 1)])
    if await bus.command("HSETNX", bus.keys(queue).meta, COUNT_FIELD, n) == 0:
        now = (await read_meta(bus, queue))[0]
        if now != n:  # another create won, with another count
            raise ValueError(f"queue {queue!r} has {now} partitions, not {n}: to change that, "
                             f"{CHANGE_N}")  # fmt: skip
    return PartitionedQueue(bus, queue, names)


def _reader(bus: Bus, queue: str) -> Callable[[], Awaitable[Meta]]:
    return lambda: read_meta(bus, queue)


def _marker(bus: Bus, queue: str, of: str, i: int) -> Callable[[], Awaitable[object]]:
    return lambda: bus.command("HSET", bus.keys(queue).meta, OF_FIELD, of, INDEX_FIELD, i)


def _counter(bus: Bus, queue: str) -> Callable[[], Awaitable[Counts]]:
    return lambda: jobs.counts(bus, queue)


async def dissolve(bus: Bus, queue: str) -> int:
    """Undo ``create`` on a drained queue: forget its partition count, its partitions' marks and
    its queue-wide cap on jobs in flight (``PartitionedQueue.set_limit``: set it again after
    ``create``), so ``create`` can make it anew with another count (the procedure to change it).
    Refused (``ValueError``) while any partition holds jobs or recurring schedules. Returns how
    many partitions it had. Idempotent: a cancelled call may have forgotten some marks but not
    the count; call again (a queue never partitioned, or dissolved, answers 1)."""
    pq = await open(bus, queue)
    parts = await each([_counter(bus, q) for q in pq.names])
    busy = [name for name, c in zip(pq.names, parts, strict=True) if _has_jobs(c)]
    if busy:
        raise ValueError(f"queue {queue!r} still holds jobs in {len(busy)} of its {pq.n} "
                         f"partitions ({busy[0]!r}...): drain them first")  # fmt: skip
    if pq.n > 1:  # the cap and marks first, the count last: a call again after a cancel finishes
        await _cap.clear(bus, pq.names)  # a plain queue keeps no share of an old total
        await each([_unmarker(bus, name) for name in pq.names[1:]])
    await bus.command("HDEL", bus.keys(queue).meta, COUNT_FIELD)
    return pq.n


def _unmarker(bus: Bus, queue: str) -> Callable[[], Awaitable[object]]:
    return lambda: bus.command("HDEL", bus.keys(queue).meta, OF_FIELD, INDEX_FIELD)
