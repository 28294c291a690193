"""``OutageGate`` in virtual time (``MockClock(autojump_threshold=0)`` through pytest-trio's
``autojump_clock``): its loops are logic in time, so a minute-long outage, its probes backing off
to their cap, the shared hold renewed ahead of each probe, and a hang noticed by the watch run in
no real time. The bot is the gate's own view of one (``outage.Bot``: whether ``getMe`` answers,
the request in flight, the last answer), the shared hold a record of what was asked of it; the
worker and the server around the gate are ``test_chat_tasks.py``'s and ``test_outage.py``'s."""

from __future__ import annotations

import logging
import random

import attrs
import pytest
import trio
import trio.testing

from codemojex.notify.outage import HOLD_SLACK_MS, PROBE_BACKOFF, OutageGate
from codemojex.telegram.bot import Answer, InFlight
from echomq_trio.backoff import Exponential
from echomq_trio.errors import BusError

OUTAGE_LOG = "codemojex.notify.outage"


@attrs.define
class Bot:
    """What the gate sees of a bot: ``getMe`` answers while ``up``; each probe's time kept."""

    timeout_s: float = 10.0
    up: bool = True
    probed_at: list[float] = attrs.Factory(list)
    in_flight: InFlight | None = None
    last_answer: Answer | None = None

    async def reachable(self) -> bool:
        self.probed_at.append(trio.current_time())
        await trio.sleep(0.05)  # the round trip
        return self.up

    def unanswered(self) -> InFlight | None:
        return self.in_flight


@attrs.define
class Shared:
    """The other processes' hold (``outage.SharedHold``): each hold asked (when, ms), each end."""

    holds: list[tuple[float, int]] = attrs.Factory(list)
    ends: list[float] = attrs.Factory(list)
    broken: bool = False

    async def hold_outage(self, ms: int) -> int:
        if self.broken:
            raise BusError("the server is unreachable")
        self.holds.append((trio.current_time(), ms))
        return ms

    async def end_outage(self) -> None:
        if self.broken:
            raise BusError("the server is unreachable")
        self.ends.append(trio.current_time())


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == OUTAGE_LOG]


@pytest.mark.timeout_s(600)  # virtual seconds: the mock clock's
async def test_a_minute_long_outage_probes_backing_off_to_the_cap_and_holds_ahead_of_each(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=OUTAGE_LOG)
    bot, shared = Bot(up=False), Shared()
    gate = OutageGate(bot, backoff=Exponential(500, 15_000), shared=shared)
    opened_at: list[float] = []

    async def a_chat_task() -> None:
        await gate.wait_open()
        opened_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.run)
        start = trio.current_time()
        assert gate.close("HTTP 502 Bad Gateway", "server_error") is True
        assert gate.close("HTTP 502 Bad Gateway", "server_error") is False  # one outage
        nursery.start_soon(a_chat_task)
        await trio.sleep(60)  # Telegram is away for a minute (virtual time)
        assert not gate.is_open and opened_at == [] and shared.ends == []
        bot.up = True
        await gate.wait_open()
        nursery.cancel_scope.cancel()
    # Each probe after a backoff doubling from 0.5 s to its 15 s cap; the first one answered
    # opens the gate, and the chat task waiting at it goes on then, not before.
    gaps = [b - a for a, b in zip([start, *bot.probed_at], bot.probed_at, strict=False)]
    waits = [0.5, 1, 2, 4, 8, 15, 15, 15]
    assert gaps == pytest.approx([w + (0.05 if n else 0) for n, w in enumerate(waits)])
    assert opened_at == pytest.approx([bot.probed_at[-1] + 0.05])
    # Before each probe, the other processes are held past its answer (or its timeout).
    assert len(shared.holds) == len(bot.probed_at)
    for (held_at, ms), probed in zip(shared.holds, bot.probed_at, strict=True):
        assert held_at + ms / 1000 >= probed + bot.timeout_s + HOLD_SLACK_MS / 1000 - 1e-9
    assert shared.ends == pytest.approx(opened_at)  # the hold ends with the outage
    stats = gate.statistics()
    assert (stats.outages, stats.server_error, stats.probes, stats.trouble) == (1, 1, 8, None)
    (warning, info) = _lines(caplog)  # one outage: its start, its end and how long it lasted
    assert warning[0] == logging.WARNING and "HTTP 502 Bad Gateway" in warning[1]
    assert info[0] == logging.INFO
    assert info[1].startswith("Telegram answers the bot again after 1 min (")


@pytest.mark.timeout_s(600)  # virtual seconds: the mock clock's
async def test_the_jittered_probes_stay_within_the_capped_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bot = Bot(up=False)
    gate = OutageGate(bot, backoff=PROBE_BACKOFF, rng=random.Random(7))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.run)
        start = trio.current_time()
        gate.close("no answer: ConnectTimeout", "no_answer")
        await trio.sleep(300)
        nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in zip([start, *bot.probed_at], bot.probed_at, strict=False)]
    bounds = [min(0.5 * 2**n, 15) + (0.05 if n else 0) for n in range(len(gaps))]
    assert all(0 <= gap <= bound + 1e-9 for gap, bound in zip(gaps, bounds, strict=True))
    assert len(gaps) >= 25  # 300 s of probes at 7.5 s apart on average once capped
    assert len(set(gaps)) > len(gaps) // 2  # jittered: not in step with other processes
    assert gate.statistics().no_answer == 1 and not gate.is_open


@pytest.mark.timeout_s(600)  # virtual seconds: the mock clock's
async def test_a_hang_is_an_outage_that_pauses_nothing_and_ends_with_a_prompt_answer(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=OUTAGE_LOG)
    bot = Bot()
    gate = OutageGate(bot, hang_after_s=5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.run)
        sent = trio.current_time()
        bot.in_flight = InFlight("sendMessage", 7, sent, 1_763_463_600_000)
        await trio.sleep(4.4)
        assert gate.statistics().trouble is None  # not yet: 5 s without an answer is a hang
        await trio.sleep(1.2)  # the watch looks at least every 0.5 s
        trouble = gate.statistics().trouble
        assert trouble is not None and (trouble.cause, trouble.paused) == ("unanswered", False)
        assert gate.is_open and bot.probed_at == []  # a hang alone holds nothing back
        await trio.sleep(30)
        assert gate.statistics().trouble is not None  # still hanging: still the one outage
        bot.in_flight, bot.last_answer = None, Answer(trio.current_time(), 0.2)
        await trio.sleep(0.6)
        assert gate.statistics().trouble is None
        nursery.cancel_scope.cancel()
    stats = gate.statistics()
    assert (stats.outages, stats.unanswered, stats.probes) == (1, 1, 0)
    (warning, info) = _lines(caplog)
    assert warning[0] == logging.WARNING and "sendMessage to chat 7" in warning[1]
    assert info[0] == logging.INFO and "again after 36 s" in info[1]  # since it was sent


async def test_a_shared_hold_the_server_refuses_is_one_line_each_and_the_gate_works_locally(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    bot, shared = Bot(up=False), Shared(broken=True)
    gate = OutageGate(bot, backoff=Exponential(500, 15_000), shared=shared)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.run)
        gate.close("HTTP 502 Bad Gateway", "server_error")
        await trio.sleep(2)  # probes at 0.5 and 1.55 s fail
        bot.up = True
        await gate.wait_open()
        nursery.cancel_scope.cancel()
    refused = [m for level, m in _lines(caplog) if level == logging.WARNING and "could not" in m]
    assert len(refused) == 3 + 1  # a hold before each of three probes, and its end
    assert all("the server is unreachable" in m for m in refused)
    assert gate.statistics().probes == 3 and gate.statistics().trouble is None
