"""An in-memory queue that answers a ``Consumer``'s and a ``Metronome``'s calls, for tests of
their loops in virtual time (``MockClock``), where the server is not the point: when they renew,
sweep and reap, how long a consumer gives handlers at shutdown, how they park and retry. It is
not a second bus: one flat queue (one order for every job, a lane's name only carried to the
consumer; no dead set: a retry only counts; no recurring schedules), the scripts a consumer runs
(``claim``, ``extend``, ``ack``, ``retry``, ``release``) and a metronome's (``promote`` of a
schedule of run-at times, ``fire`` of nothing, ``reap`` of lapsed leases), the wake and tick
lists they park on, and the two reads of the overdue check. Leases are fenced by token as the
scripts fence them, and their deadlines are virtual time, so a lease that lapsed is seen
(``lapsed``). What each script does on a real server is tested against real servers elsewhere;
replies are built by the field names of ``protocol.REPLY_FIELDS``, so a change of a reply's
shape fails here too.

Each call is recorded with the virtual time it was made (``calls``); ``fail`` makes the calls
of a script raise an error (``ConnectionLost``) until a virtual time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from echomq_trio import protocol
from echomq_trio.errors import ConnectionLost
from echomq_trio.results import Outcome
from echomq_trio.transport import ConnectionSpec, Transport

__all__ = ["InMemoryQueue", "Lease"]


@attrs.define
class Lease:
    token: int
    deadline_ms: int


def _reply(shape: str, **fields: Any) -> list[Any]:
    """A reply with ``fields`` in the order ``protocol.REPLY_FIELDS[shape]`` names them."""
    out: list[Any] = []
    for name in protocol.REPLY_FIELDS[shape]:
        if name.endswith("..."):
            out += fields.pop(name[:-3])
        else:
            out.append(fields.pop(name.rstrip("?")))
    assert not fields, f"{shape} has no fields {sorted(fields)}"
    return out


@attrs.define(eq=False)
class InMemoryQueue:
    """The transport, and the queue's state: ``pending`` ids in order, ``active`` leases by id,
    and what was ``acked``, ``retried`` and ``released``."""

    payloads: dict[str, bytes] = attrs.field(factory=dict)
    groups: dict[str, str] = attrs.field(factory=dict)
    pending: list[str] = attrs.field(factory=list)
    active: dict[str, Lease] = attrs.field(factory=dict)
    schedule: dict[str, int] = attrs.field(factory=dict)  # run-at ms by id
    promoted: list[tuple[str, int]] = attrs.field(factory=list)  # (id, lateness ms)
    reaped: list[str] = attrs.field(factory=list)
    attempts: dict[str, int] = attrs.field(factory=dict)
    acked: list[str] = attrs.field(factory=list)
    retried: list[tuple[str, str]] = attrs.field(factory=list)
    released: list[str] = attrs.field(factory=list)
    lapsed: list[str] = attrs.field(factory=list)
    calls: list[tuple[float, str]] = attrs.field(factory=list)
    spec: ConnectionSpec = attrs.field(factory=lambda: ConnectionSpec(hosts=(("in-memory", 0),)))
    latency_s: float = 0.0  # each script call's round trip (half there, half back)
    _tokens: int = 0
    _woken: trio.Event = attrs.field(factory=trio.Event)
    _ticked: trio.Event = attrs.field(factory=trio.Event)
    _refusing: dict[str, tuple[float, type[Exception]]] = attrs.field(factory=dict)

    def now_ms(self) -> int:
        return round(trio.current_time() * 1000)

    def enqueue(self, job_id: str, payload: bytes = b"x", group: str = "") -> None:
        """A job at the end of the queue (``group``: its lane's name, carried to the consumer
        as a claimed job's group; this queue keeps one order for every lane)."""
        self.payloads[job_id] = payload
        self.groups[job_id] = group
        self.pending.append(job_id)
        self._woken.set()

    def schedule_at(self, job_id: str, at_ms: int) -> None:
        """A job to run at ``at_ms`` (virtual ms); the tick wakes a parked metronome."""
        self.payloads[job_id], self.groups[job_id] = b"x", ""
        self.schedule[job_id] = at_ms
        self._ticked.set()

    def fail(self, script: str, until: float, error: type[Exception] = ConnectionLost) -> None:
        """Calls of ``script`` raise ``error`` (``ConnectionLost``) until virtual ``until``."""
        self._refusing[script] = (until, error)

    def times(self, script: str) -> list[float]:
        return [at for at, name in self.calls if name == script]

    def _lease_of(self, job_id: str, token: int) -> Lease | None:
        lease = self.active.get(job_id)
        if lease is not None and lease.deadline_ms < self.now_ms() and job_id not in self.lapsed:
            self.lapsed.append(job_id)
        return lease if lease is not None and lease.token == token else None

    # --- Transport -------------------------------------------------------------------------

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        self.calls.append((trio.current_time(), name))
        await trio.lowlevel.checkpoint()
        if self.latency_s:
            await trio.sleep(self.latency_s / 2)
        reply = self._script(name, args)
        if self.latency_s:
            await trio.sleep(self.latency_s / 2)
        return reply

    def _script(self, name: str, args: Sequence[str | bytes]) -> Any:
        until, error = self._refusing.get(name, (-1.0, ConnectionLost))
        if trio.current_time() < until:
            raise error(f"{name}: the in-memory queue fails it (a test's fault)")
        text = [a.decode() if isinstance(a, bytes) else a for a in args]
        return getattr(self, f"_{name}")(text[1:])

    def _claim(self, args: list[str]) -> list[Any]:
        batch, lease_ms = int(args[0]), int(args[1])
        deadline = self.now_ms() + lease_ms
        jobs: list[Any] = []
        for job_id in self.pending[:batch]:
            self._tokens += 1
            self.active[job_id] = Lease(self._tokens, deadline)
            self.attempts[job_id] = self.attempts.get(job_id, 0) + 1
            jobs += _reply(
                "claim/job",
                id=job_id,
                payload=self.payloads[job_id],
                attempts=self.attempts[job_id],
                token=self._tokens,
                group=self.groups[job_id],
                timeout_ms="",
            )
        del self.pending[:batch]
        return _reply("claim", lease_deadline=deadline, jobs=jobs)

    def _items(self, args: list[str], width: int) -> list[list[str]]:
        return [args[i : i + width] for i in range(0, len(args), width)]

    def _extend(self, args: list[str]) -> list[Any]:
        lease_ms, deadline = int(args[0]), self.now_ms() + int(args[0])
        lost = []
        for job_id, token in self._items(args[1:], 2):
            lease = self._lease_of(job_id, int(token))
            if lease is None:
                lost.append(job_id)
            else:
                lease.deadline_ms = self.now_ms() + lease_ms
        return _reply("extend", deadline=deadline, lost=lost)

    def _ack(self, args: list[str]) -> list[str]:
        words = []
        for job_id, token, _note in self._items(args, 3):
            if self._lease_of(job_id, int(token)) is None:
                words.append(Outcome.STALE.value)
                continue
            del self.active[job_id]
            self.acked.append(job_id)
            words.append(Outcome.ACKED.value)
        return words

    def _retry(self, args: list[str]) -> str:
        job_id, token, error = args[0], int(args[1]), args[4]
        if self._lease_of(job_id, token) is None:
            return Outcome.STALE.value
        del self.active[job_id]
        self.retried.append((job_id, error))
        return Outcome.SCHEDULED.value

    def _release(self, args: list[str]) -> int:
        back = []
        for job_id, token in self._items(args, 2):
            if self._lease_of(job_id, int(token)) is not None:
                del self.active[job_id]
                back.append(job_id)
        self.released += back
        self.pending[:0] = back
        return len(back)

    def _promote(self, args: list[str]) -> list[Any]:
        batch, now = int(args[0]), self.now_ms()
        due = sorted((at, job_id) for job_id, at in self.schedule.items() if at <= now)[:batch]
        for at, job_id in due:
            del self.schedule[job_id]
            self.pending.append(job_id)
            self.promoted.append((job_id, now - at))
        if due:
            self._woken.set()
        ahead = min(self.schedule.values(), default=-1)
        late = [now - at for at, _ in due] if args[1] == "1" else []
        return _reply("promote", moved=len(due), lanes_resumed=0, next_due=ahead, now=now,
                      carrying=0, now_us=0, lateness=late)  # fmt: skip

    def _fire(self, args: list[str]) -> list[Any]:
        return _reply("fire", fired=0, next_due=-1, now=self.now_ms(), wanted=[])

    def _reap(self, args: list[str]) -> list[Any]:
        batch, now = int(args[0]), self.now_ms()
        lapsed = sorted((lease.deadline_ms, job_id) for job_id, lease in self.active.items()
                        if lease.deadline_ms < now)[:batch]  # fmt: skip
        for _, job_id in lapsed:
            del self.active[job_id]
            self.reaped.append(job_id)
            self.pending.append(job_id)
        return _reply("reap", reaped=len(lapsed), now=now, carrying=0, next_from="")

    async def command(self, *args: str | bytes) -> Any:
        self.calls.append((trio.current_time(), str(args[0])))
        await trio.lowlevel.checkpoint()
        if args[0] == "ZCOUNT":  # the overdue check: this queue schedules nothing
            return 0
        if args[0] == "ZMSCORE":  # the consumer's look for cancel marks: none here
            return [None] * (len(args) - 2)
        raise NotImplementedError(f"the in-memory queue has no {args[0]!r}")

    async def scan(self, match: str, *, count: int = 1000) -> list[str]:
        raise NotImplementedError("the in-memory queue has no SCAN")

    async def blpop(self, key: str, timeout_s: float) -> bytes | None:
        """The wake list (a consumer's) or the tick list (a metronome's, its key ending
        ``tick``): back at once when a job came since the last park, else when one comes, or
        after ``timeout_s``."""
        tick = key.endswith("tick")
        self.calls.append((trio.current_time(), "BLPOP tick" if tick else "BLPOP"))
        event = self._ticked if tick else self._woken
        with trio.move_on_after(timeout_s):
            await event.wait()
        if tick:
            self._ticked = trio.Event()
        else:
            self._woken = trio.Event()
        return b"1" if event.is_set() else None

    @asynccontextmanager
    async def blocking(self) -> AsyncIterator[Transport]:
        yield self

    def subscribe(self, *, channels: Sequence[str] = (), patterns: Sequence[str] = ()) -> Any:
        raise NotImplementedError("the in-memory queue has no pub/sub")

    async def server_time_ms(self) -> int:
        self.calls.append((trio.current_time(), "TIME"))
        await trio.lowlevel.checkpoint()
        return self.now_ms()

    async def wait_aof(
        self, key: str, numlocal: int, numreplicas: int, timeout_ms: int
    ) -> tuple[int, int]:
        raise NotImplementedError("the in-memory queue has no append-only file")

    async def wait_replicas(self, key: str, numreplicas: int, timeout_ms: int) -> int:
        raise NotImplementedError("the in-memory queue has no replicas")
