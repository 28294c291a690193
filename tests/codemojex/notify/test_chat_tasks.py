"""The notification worker's per-chat lane tasks: a task per chat with work, ended when idle; a
held wait handed back on shutdown without spending an attempt; three worker processes and a
kill -9 deliver every notice once in order; an outage of Telegram four leases long loses nothing
and spends no attempt; a chat answering 429 for ever is capped."""

import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from itertools import groupby

import pytest
import trio

from codemojex.notify.notifier import notify
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.steps import StepPolicy
from codemojex.notify.worker import NotificationWorker
from codemojex.standin.bot_api import Scripted, open_stand_in
from codemojex.standin.outage import open_outage
from codemojex.telegram.bot import open_bot
from echomq_trio import Bus, Metronome, StopConsumer, events, jobs, lanes
from tests.codemojex.notify.test_pipeline import LIMITS, MARGIN_MS, TOKEN, worker_process
from tests.support import read_line, wait_for

pytestmark = pytest.mark.slow

# The outage's length is the scenario's parameter, in the worker's own units: a minute was four
# of the default 15 s leases; with 3 s leases, four are 12 s. The held notices outlive their
# lease as often, the prober (from 0.5 s, doubling) fails probe after probe, and the sends
# queued behind the outage wait it out, in a fifth of the time.
OUTAGE_LEASE_MS = 3_000
OUTAGE_S = 4 * OUTAGE_LEASE_MS / 1000


@asynccontextmanager
async def worker_at(
    bus: Bus,
    queue: str,
    api_url: str,
    policy: StepPolicy | None = None,
    idle_s: float = 1.0,
    lease_ms: int = 15_000,
) -> AsyncIterator[NotificationWorker]:
    async with open_bot(TOKEN, api_url) as bot, trio.open_nursery() as nursery:
        limiter = RateLimiter(bus, LIMITS, tag=queue, margin_ms=MARGIN_MS)
        worker = NotificationWorker(
            bus, bot, limiter, queue=queue, policy=policy, idle_s=idle_s, lease_ms=lease_ms
        )
        await nursery.start(worker.run)
        await nursery.start(Metronome(bus, queue, beat_ms=100).run)
        yield worker
        nursery.cancel_scope.cancel()


async def _claimed_attempts(bus: Bus, queue: str) -> list[int]:
    return [int(e.fields["attempt"]) for e in await events.read(bus, queue, count=10_000)
            if e.kind == "claimed"]  # fmt: skip


async def _settled(bus: Bus, queue: str) -> bool:
    c = await jobs.counts(bus, queue)
    return c.pending == c.active == c.scheduled == 0


def _collapsed(texts: Sequence[str]) -> list[str]:
    """A chat's deliveries with repeats in a row folded (a send on the wire at a kill)."""
    return [text for text, _ in groupby(texts)]


@pytest.mark.timeout_s(60)
async def test_a_send_that_got_no_answer_keeps_the_margin_it_was_taken_with(
    bus: Bus, queue: str
) -> None:
    # Nothing listens on the port: the send may or may not have reached Telegram, so its entry
    # in the logs is not stamped with an answer's time.
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    await notify(bus, 7, "into the void", queue=queue)
    async with worker_at(bus, queue, f"http://127.0.0.1:{port}") as worker:
        await wait_for(lambda: not worker.outage.is_open, timeout=30)
        taken = worker.limiter.statistics()
        assert (taken.taken, taken.confirmed) == (1, 0), taken


@pytest.mark.timeout_s(120)
async def test_an_outage_found_by_one_worker_holds_the_sends_of_every_worker(
    bus: Bus, queue: str
) -> None:
    chats = [5000 + c for c in range(12)]
    async with (
        open_stand_in(TOKEN, LIMITS) as tg,
        open_outage(tg) as outage,
        worker_at(bus, queue, outage.api_url) as one,
        worker_at(bus, queue, outage.api_url) as two,
    ):
        outage.down = True  # every request gets the proxy's 502 page
        await notify(bus, 4999, "finds the outage", queue=queue)
        await wait_for(lambda: not one.outage.is_open or not two.outage.is_open, timeout=30)
        finder, other = (one, two) if not one.outage.is_open else (two, one)
        hold = finder.limiter.prefix + "pause:outage"
        await wait_for(lambda: _exists(bus, hold), timeout=10)
        # The finder claims nothing while its gate is closed; the other claims the new notices
        # and its limiter holds every one of them: nothing more is sent into the outage.
        for chat in chats:
            await notify(bus, chat, f"{chat}:0", queue=queue)
        await wait_for(lambda: other.limiter.statistics().denied_paused >= len(chats), timeout=30)
        await wait_for(lambda: finder.outage.probes >= 2, timeout=60)
        assert outage.refused_sends == 1, "a worker sent into an outage another one had found"
        assert other.outage.is_open and other.statistics().outages == 0  # held, not found
        outage.down = False
        await tg.wait_deliveries(len(chats) + 1)
        await wait_for(lambda: _settled(bus, queue), timeout=30)
        assert not await _exists(bus, hold)  # the prober ended the hold
    assert set(await _claimed_attempts(bus, queue)) == {1}  # no attempt spent
    assert (await jobs.counts(bus, queue)).dead == 0


async def _exists(bus: Bus, key: str) -> bool:
    return bool(await bus.transport.command("EXISTS", key))


@pytest.mark.timeout_s(60)
async def test_a_chat_has_a_task_while_it_has_work_and_none_when_idle(bus: Bus, queue: str) -> None:
    async with open_stand_in(TOKEN, LIMITS) as tg:
        async with worker_at(bus, queue, tg.api_url, idle_s=0.3) as worker:
            for n in range(4):  # more than a private chat's burst: it waits for its window
                await notify(bus, 61, f"a{n}", queue=queue)
            await notify(bus, 62, "b0", queue=queue)
            await wait_for(lambda: "61" in worker.chats())
            await tg.wait_deliveries(4, 61)
            await wait_for(lambda: worker.chats() == [])  # idle: every chat task ended
            assert worker.statistics().chat_tasks >= 2
            await notify(bus, 61, "a4", queue=queue)  # new work: a new task for the chat
            await tg.wait_deliveries(5, 61)
        assert tg.by_chat() == {61: [f"a{n}" for n in range(5)], 62: ["b0"]}
        assert worker.statistics().held >= 1  # the chat's window was waited out in its task


@pytest.mark.timeout_s(60)
async def test_shutdown_hands_a_held_notice_back_without_spending_an_attempt(
    bus: Bus, queue: str
) -> None:
    async with open_stand_in(TOKEN, LIMITS) as tg:
        limiter = RateLimiter(bus, LIMITS, tag=queue, margin_ms=MARGIN_MS)
        await limiter.pause("chat", 71, 60_000)  # the chat must wait: longer than any test
        await notify(bus, 71, "held", queue=queue)
        long_hold = StepPolicy(hold_max_ms=120_000)
        async with worker_at(bus, queue, tg.api_url, long_hold) as worker:
            await wait_for(lambda: worker.statistics().held >= 1)  # waiting in its chat task
            assert worker.chats() == ["71"]
        # The worker stopped: the notice is back in its lane, its attempt not spent.
        (info,) = await lanes.jobs(bus, queue, "71")
        assert (info.state, info.attempts) == ("pending", 0)
        assert worker.bus_statistics().released == 1
        assert [e.kind for e in await events.read(bus, queue)][-1] == "released"
        await bus.transport.command("ZREM", limiter.prefix + "paused", "71")  # the pause ends
        async with worker_at(bus, queue, tg.api_url):
            await tg.wait_deliveries(1, 71)
        assert set(await _claimed_attempts(bus, queue)) == {1}


@pytest.mark.timeout_s(240)
async def test_kill_9_of_one_of_three_workers_delivers_every_notice_once_in_order(
    bus: Bus, queue: str, server_url: str
) -> None:
    chats, each = [3000 + c for c in range(30)], 10
    async with open_stand_in(TOKEN, LIMITS, keep=len(chats) * each * 2) as tg:
        for n in range(each):
            for chat in chats:
                await notify(bus, chat, f"{chat}:{n}", queue=queue)
        lease = ("--lease-ms", "1500")
        async with (
            worker_process(server_url, queue, tg, *lease) as w1,
            worker_process(server_url, queue, tg, *lease) as w2,
            worker_process(server_url, queue, tg, *lease) as w3,
        ):
            for w in (w1, w2, w3):
                assert await read_line(w) == "ready"
            with trio.fail_after(60):
                await tg.wait_deliveries(60)
            w2.send_signal(signal.SIGKILL)
            await w2.wait()
            await wait_for(lambda: _settled(bus, queue), timeout=150)
        by_chat = tg.by_chat()
        for chat in chats:  # once each, in order; a repeat only right after itself
            assert _collapsed(by_chat[chat]) == [f"{chat}:{n}" for n in range(each)], chat
        repeats = len(tg.deliveries) - len(chats) * each
        assert repeats <= 64, "only a send on the wire at the kill may arrive twice"
        assert tg.rate_limited == 0
        assert (await jobs.counts(bus, queue)).dead == 0


@pytest.mark.timeout_s(240)
async def test_an_outage_of_four_leases_loses_nothing_and_spends_no_attempt(
    bus: Bus, queue: str
) -> None:
    chats = [4000 + c for c in range(10)]
    async with open_stand_in(TOKEN, LIMITS) as tg, open_outage(tg) as outage:
        async with worker_at(bus, queue, outage.api_url, lease_ms=OUTAGE_LEASE_MS) as worker:
            for chat in chats:
                await notify(bus, chat, f"{chat}:0", queue=queue)
            await tg.wait_deliveries(len(chats))
            outage.down = True  # Telegram answers every request with the proxy's 502 page
            for n in (1, 2):
                for chat in chats:
                    await notify(bus, chat, f"{chat}:{n}", queue=queue)
            await wait_for(lambda: not worker.outage.is_open, timeout=30)
            await trio.sleep(OUTAGE_S)  # the outage lasts four leases (a scenario, not a wait)
            assert outage.refused >= 1 and len(tg.deliveries) == len(chats)
            outage.down = False
            await tg.wait_deliveries(3 * len(chats))
            await wait_for(lambda: _settled(bus, queue), timeout=30)
            # A failure of one chat alone still spends its attempts.
            tg.script(chats[0], Scripted.server_error(500), Scripted.server_error(502))
            await notify(bus, chats[0], "after", queue=queue)
            await tg.wait_deliveries(1 + 3 * len(chats))
        assert tg.by_chat() == {c: [f"{c}:{n}" for n in range(3)] + (["after"] if c == chats[0]
                                else []) for c in chats}  # fmt: skip
        stats = worker.statistics()
        assert stats.outages >= 1 and stats.retried == 2
        attempts = await _claimed_attempts(bus, queue)
        assert attempts.count(1) == len(attempts) - 2 and sorted(attempts)[-2:] == [2, 3]
        assert (await jobs.counts(bus, queue)).dead == 0


@pytest.mark.timeout_s(60)
async def test_a_chat_answering_429_for_ever_is_dead_after_the_cap_with_the_reason(
    bus: Bus, queue: str
) -> None:
    async with open_stand_in(TOKEN, LIMITS) as tg:
        tg.script(88, *[Scripted.flood_wait(1)] * 20)
        await notify(bus, 88, "never", queue=queue)
        await notify(bus, 89, "fine", queue=queue)
        capped = StepPolicy(stuck_after_ms=2_500)
        async with worker_at(bus, queue, tg.api_url, capped) as worker:
            await wait_for(lambda: worker.bus_statistics().dead == 1, timeout=30)
            # Settled dead, the chat's task cancelled its own scope: no idling task left for it.
            assert "88" not in worker.chats()
        (dead,) = await jobs.dead_jobs(bus, queue)
        assert "429" in dead.last_error and "stuck" in dead.last_error
        assert tg.by_chat() == {89: ["fine"]}
        assert worker.statistics().flood_waits >= 3


@pytest.mark.timeout_s(60)
async def test_a_refused_bot_stops_the_worker_and_its_notice_goes_back(
    bus: Bus, queue: str
) -> None:
    async with open_stand_in(TOKEN, LIMITS) as tg, open_bot(TOKEN, tg.api_url) as bot:
        tg.script(91, Scripted.unauthorized())
        await notify(bus, 91, "to a revoked token", queue=queue)
        limiter = RateLimiter(bus, LIMITS, tag=queue, margin_ms=MARGIN_MS)
        worker = NotificationWorker(bus, bot, limiter, queue=queue)
        with pytest.raises(StopConsumer, match="Telegram refused the bot"):
            await worker.run()
        assert worker.statistics().fatal is not None and "Unauthorized" in worker.statistics().fatal
        (info,) = await lanes.jobs(bus, queue, "91")  # back first in its lane, unspent
        assert (info.state, info.attempts) == ("pending", 0)
