"""``Metronome``: one task per queue that promotes due jobs, fires due recurring schedules,
brings waiting lanes back, sweeps waiting jobs past their expiry (in the same promote: a batch
per beat), and reaps expired leases.

It sleeps until the next beat or the earliest scheduled job, whichever is sooner, so a scheduled
job runs close to its time rather than up to a beat late. A long wait is spent parked on the
queue's tick list (a newly scheduled job that becomes the earliest pushes a tick and wakes it);
the server's blocking timeout is coarse (about 100 ms), so the last stretch before a due job is
slept locally in short steps, the last of them to the instant (``_timer.sleep_until``: a trio
sleep ends up to a ms late). Promote tells the server's clock to the microsecond, and the wake is
timed by the least upper bound of the server clock's lead over the recent promotes
(``_server_clock``: the last one alone, after an idle spell, is early now and then). Promote
and reap are atomic scripts on the server clock, so any number of metronomes on one queue move
each job exactly once. A beat that fails (the server unreachable) is tried again after
``backoff.reconnect_delay_s``; ``statistics()`` counts beats, what they moved and the failures.

Each beat's promote carries the metronome's witness of the server clock (``clock.Witness``: the
server time its last beat read, and how much time its own monotonic clock says has passed), so a
step of the server clock is noticed at the first beat after it, by whichever metronome (or rate
limiter) sees it first, and recorded on the queue. While a step's waits are being carried
(``jobs.carry_clock``) promote and reap leave the queue alone; the metronome carries them, a
page per call, before it promotes or reaps again, and logs the step once per bus (WARNING, with
its size).

While the server refuses writes (``WritesRefused``: a full disk, the memory ceiling) no holder
can renew a lease, so a lease may run out under a handler that is still at work. Reaping waits
``reap_grace_ms`` after the last refusal the metronome met, so the holders renew (and settle)
first: a handler that succeeded is settled, never run a second time.
"""

from __future__ import annotations

import logging

import attrs
import trio

from echomq_trio import jobs, repeat
from echomq_trio._server_clock import ServerClock
from echomq_trio._timer import sleep_until
from echomq_trio.backoff import reconnect_delay_s
from echomq_trio.bus import Bus
from echomq_trio.clock import REAP_GRACE_MS, Witness, describe_step
from echomq_trio.errors import BusError, WritesRefused, level_of
from echomq_trio.metrics import BusMetrics

__all__ = ["Metronome", "MetronomeStats"]

log = logging.getLogger("echomq_trio.metronome")

PARK_MARGIN_S = 0.15  # the server may wake a blocked pop this late; park only this far ahead
SHORT_STEP_S = 0.02  # re-check step in the last stretch, to notice an even earlier job
DUE_MARGIN_S = 0.0002  # a promote is timed to run this long after its due ms has begun
FIRE_BATCH = 16  # occurrences per fire call (ids are minted ahead for them)


@attrs.frozen
class MetronomeStats:
    """Counters since the metronome was made: a frozen snapshot from ``Metronome.statistics``."""

    beats: int = 0  # sweeps that went through
    promoted: int = 0  # scheduled jobs moved to pending (or their lanes)
    lanes_resumed: int = 0  # lanes whose wait ended
    fired: int = 0  # occurrences of recurring schedules
    reaped: int = 0  # expired leases returned to pending
    errors: int = 0  # sweeps that failed (each is tried again)
    clock_steps: int = 0  # steps of the server clock whose waits this metronome carried
    carried: int = 0  # waits it carried across steps of the server clock


class Metronome:
    """Run with ``nursery.start(metronome.run)``; cancel its nursery to stop it. With ``metrics``
    (``echomq_trio.metrics.BusMetrics``) it observes how late each job it promotes was (the
    server answers it with the move); without, nothing. ``cron_clock`` (``repeat.Clock``) is
    what cron schedules count as now, for tests and simulations; by default the server's now.
    ``metrics_queue`` is the ``queue`` label of its metrics (default: ``queue``; a partitioned
    queue's metronomes, ``partitions.PartitionedMetronome``, observe under the queue's name)."""

    def __init__(
        self,
        bus: Bus,
        queue: str,
        *,
        beat_ms: int = 1_000,
        batch: int = 1_000,
        metrics: BusMetrics | None = None,
        reap_grace_ms: int = REAP_GRACE_MS,
        cron_clock: repeat.Clock | None = None,
        metrics_queue: str | None = None,
    ) -> None:
        bus.keys(queue)
        if not isinstance(beat_ms, int) or beat_ms <= 0:
            raise ValueError(f"beat_ms must be a positive int, got {beat_ms!r}")
        if not isinstance(batch, int) or batch <= 0:
            raise ValueError(f"batch must be a positive int, got {batch!r}")
        if not isinstance(reap_grace_ms, int) or reap_grace_ms < 0:
            raise ValueError(f"reap_grace_ms must be an int >= 0, got {reap_grace_ms!r}")
        self.reap_grace_s = reap_grace_ms / 1000
        self.bus = bus
        self.queue = queue
        self.beat_s = beat_ms / 1000
        self.batch = batch
        self._stats = MetronomeStats()
        label = queue if metrics_queue is None else metrics_queue
        self._lateness = None if metrics is None else metrics.lateness.labels(label)
        self._witness = Witness()
        self._cron_clock = cron_clock
        self._server_clock = ServerClock()  # the server clock's lead, from promotes' answers

    def statistics(self) -> MetronomeStats:
        """A snapshot of the counters."""
        return self._stats

    def _count(self, **more: int) -> None:
        s = self._stats
        self._stats = attrs.evolve(s, **{name: getattr(s, name) + n for name, n in more.items()})

    async def beat(self, *, reap: bool = True) -> float:
        """One sweep: promote, fire repeats (and reap); returns the wait before the next (s).

        Each step is one atomic script, counted as soon as it answers; cancelled (or failing)
        between steps, the steps done stay done and the next sweep does the rest."""
        p = await self._promote()
        if p.carrying:
            await self.carry()
            p = await self._promote()
        self._count(promoted=p.moved, lanes_resumed=p.lanes_resumed)
        if self._lateness is not None:
            for ms in p.lateness_ms:
                self._lateness.observe(ms / 1000)
        fire_sent = trio.current_time()
        f = await repeat.fire(self.bus, self.queue, FIRE_BATCH, clock=self._cron_clock)
        self._count(fired=f.fired)
        more = (
            p.moved >= self.batch
            or p.lanes_resumed >= self.batch
            or f.fired >= FIRE_BATCH
            or p.carrying
        )
        if reap:
            r = await jobs.reap(self.bus, self.queue, self.batch)
            self._count(reaped=r.reaped)
            more = more or r.reaped >= self.batch or r.carrying
        self._count(beats=1)
        if more:
            return 0.0
        # Each due time is counted from when the call that read the server clock was sent
        # (its clock was read after that), not from now: the later calls of this beat would
        # otherwise add their round trips to every scheduled job's lateness. Promote tells the
        # server's clock to the microsecond: the wait ends DUE_MARGIN_S past the due ms by the
        # least upper bound of the server's lead over the recent promotes (_server_clock:
        # waking early costs one more promote, which moves nothing before its time). Fire
        # tells whole ms: up to one ms late.
        now = trio.current_time()
        wait = self.beat_s
        if p.next_due_ms is not None:
            at = self._server_clock.local_time_of(p.next_due_ms, now)
            if at is not None:
                wait = min(wait, max(0.0, at + DUE_MARGIN_S - now))
        # A cron registration fire could not move (``f.wanted``: its zone unknown here; logged)
        # stays due: wait the beat rather than its run.
        if f.next_due_ms is not None and not f.wanted:
            wait = min(wait, max(0.0, fire_sent + (f.next_due_ms - f.server_now_ms) / 1000 - now))
        return wait

    async def _promote(self) -> jobs.Promoted:
        sent = trio.current_time()
        p = await jobs.promote(
            self.bus, self.queue, self.batch, lateness=self._lateness is not None,
            witness=self._witness.args(sent),
        )  # fmt: skip
        answered = trio.current_time()
        self._witness.observe(p.server_now_ms, sent, answered)
        self._server_clock.observe(sent, answered, p.server_now_ms + p.server_now_us / 1000)
        return p

    async def carry(self) -> None:
        """Carry the queue's waits across the server clock's last step, a page per call, until
        none is left; log the step (once per bus)."""
        self._count(clock_steps=1)
        while True:
            c = await jobs.carry_clock(self.bus, self.queue, batch=self.batch,
                                       reap_grace_ms=round(self.reap_grace_s * 1000))  # fmt: skip
            self._count(carried=c.carried)
            if c.step_ms and self.bus.steps.news(c.step_ms, trio.current_time()):
                log.warning(
                    "the server clock stepped %s (noticed on %s): waits of a length keep their "
                    "length, times given as times keep their wall-clock meaning",
                    describe_step(c.step_ms), self.queue,
                )  # fmt: skip
            if not c.more:
                return

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        tick = self.bus.keys(self.queue).tick
        async with self.bus.transport.blocking() as parker:
            task_status.started()
            next_reap = trio.current_time()
            failures = 0
            while True:
                now = trio.current_time()
                reap = now >= next_reap
                try:
                    wait = await self.beat(reap=reap)
                except BusError as exc:
                    failures += 1
                    self._count(errors=1)
                    log.log(level_of(exc), "metronome on %s: %s", self.queue, exc)
                    if isinstance(exc, WritesRefused):
                        # No lease could be renewed meanwhile: once writes are taken again,
                        # give the holders time to renew before any lease counts as expired.
                        next_reap = max(next_reap, trio.current_time() + self.reap_grace_s)
                    await trio.sleep(reconnect_delay_s(failures))
                    continue
                failures = 0
                if reap:
                    next_reap = now + self.beat_s
                wait = min(wait, max(0.0, next_reap - trio.current_time()))
                if wait <= 0:
                    continue
                if wait > PARK_MARGIN_S + 0.1:
                    try:
                        await parker.blpop(tick, wait - PARK_MARGIN_S)
                    except BusError:
                        await trio.sleep(min(wait, 0.5))
                elif wait > SHORT_STEP_S:
                    await trio.sleep(SHORT_STEP_S)
                else:  # the last stretch: to the instant, not to the next whole ms
                    await sleep_until(trio.current_time() + wait)
