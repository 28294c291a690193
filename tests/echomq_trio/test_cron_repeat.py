"""Cron schedules on real servers: registered idempotently by name, each occurrence fired once by
three metronomes (per second, live; and across the 2026 spring-forward and fall-back in
Europe/Berlin and America/New_York, walked through occurrence by occurrence), missed runs
collapsed into one, anchored to the schedule, left at their times by a step of the server
clock, shown by ``echomq ls``, and bad input refused before any I/O."""

import datetime as dt
import json
import os
import sys
from collections.abc import Callable

import pytest
import trio

from echomq_trio import (
    Bus,
    ConnectionLost,
    Metronome,
    cron,
    events,
    ids,
    jobs,
    open_bus,
    protocol,
    repeat,
)
from echomq_trio.clock import Witness
from echomq_trio.repeat import Registered
from tests.support import ROOT, SteppingServer, wait_for

pytestmark = pytest.mark.cluster


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


async def fired_at(bus: Bus, queue: str, name: str) -> list[int]:
    """The runs of ``name`` fired so far (the ``fired`` events' ``at``), in order."""
    return [
        int(e.fields["at"])
        for e in await events.read(bus, queue, count=10_000)
        if e.kind == "fired" and e.fields["repeat"] == name
    ]


async def test_register_is_idempotent_and_replace_replaces(bus: Bus, queue: str) -> None:
    answer, first = await repeat.register(
        bus, queue, "standup", template="go", cron="0 9 * * MON-FRI", tz="Europe/Berlin"
    )
    now = await bus.transport.server_time_ms()
    c = cron.parse("0 9 * * MON-FRI", "Europe/Berlin")
    assert answer is Registered.REGISTERED
    assert first == cron.next_after(c, now) or first == cron.next_after(c, now - 5_000)
    reg = await repeat.get(bus, queue, "standup")
    assert reg is not None
    assert (reg.cron, reg.tz, reg.every_ms, reg.template, reg.next_run_ms) == (
        "0 9 * * MON-FRI", "Europe/Berlin", None, b"go", first,
    )  # fmt: skip
    same = ("0 9 * * MON-FRI", "Europe/Berlin")
    again = await repeat.register(bus, queue, "standup", template="go", cron=same[0], tz=same[1])
    assert again == (Registered.EXISTS, first)
    # Another schedule under a live name changes nothing, unless replace is asked for.
    other = await repeat.register(bus, queue, "standup", template="go", cron="0 10 * * *")
    assert other == (Registered.EXISTS, first)
    assert await repeat.get(bus, queue, "standup") == reg
    kept = await repeat.register(
        bus, queue, "standup", template="go", cron=same[0], tz=same[1], replace=True
    )
    assert kept == (Registered.EXISTS, first)
    answer, at = await repeat.register(
        bus, queue, "standup", template="go", cron="0 10 * * *", tz="UTC", replace=True
    )
    assert answer is Registered.REPLACED and dt.datetime.fromtimestamp(at / 1000, dt.UTC).hour == 10
    new = await repeat.get(bus, queue, "standup")
    assert new is not None and (new.cron, new.tz, new.next_run_ms) == ("0 10 * * *", "UTC", at)
    # every_ms and cron replace each other the same way.
    answer, _ = await repeat.register(bus, queue, "standup", 60_000, "go", replace=True)
    assert answer is Registered.REPLACED
    back = await repeat.get(bus, queue, "standup")
    assert back is not None and (back.every_ms, back.cron, back.tz) == (60_000, None, None)
    assert [r.name for r in await repeat.list_repeats(bus, queue)] == ["standup"]


async def test_three_metronomes_fire_each_second_once(
    bus: Bus, queue: str, server_url: str
) -> None:
    _, first = await repeat.register(bus, queue, "tick", template="t", cron="* * * * * *")
    async with (
        open_bus(server_url) as b2,
        open_bus(server_url) as b3,
        trio.open_nursery() as nursery,
    ):
        for b in (bus, b2, b3):
            await nursery.start(Metronome(b, queue, beat_ms=200).run)

        async def four_fired() -> bool:
            return len(await fired_at(bus, queue, "tick")) >= 4

        await wait_for(four_fired)
        nursery.cancel_scope.cancel()
    runs = await fired_at(bus, queue, "tick")
    assert len(runs) == len(set(runs)), "a run fired twice"
    assert runs[0] == first and all(r % 1000 == 0 for r in runs) and runs == sorted(runs)
    assert (await jobs.counts(bus, queue)).pending == len(runs)


# The runs of two schedules through the 2026 DST changes of their zones, each fired once by
# three metronomes that walk them one occurrence at a time (their cron clock is the epoch, so
# each next run is the occurrence after the last: every run between the first and the server's
# now is due at once and none collapses). Only in March and October/November, to keep it short.
WALKS = {
    "berlin": ("30 2 * 3,10 *", "Europe/Berlin", "2026-03-27T00:00Z"),
    "new-york": ("30 1,2 * 3,11 *", "America/New_York", "2026-03-06T00:00Z"),
}


@pytest.mark.timeout_s(120)
async def test_dst_runs_fire_once_each_with_three_metronomes(
    bus: Bus, queue: str, server_url: str
) -> None:
    for name, (expr, tz, start) in WALKS.items():
        await repeat.register(
            bus, queue, name, template=name, cron=expr, tz=tz, clock=lambda _, s=start: ms(s)
        )

    def epoch(_now: int) -> int:
        return 0

    async with (
        open_bus(server_url) as b2,
        open_bus(server_url) as b3,
        trio.open_nursery() as nursery,
    ):
        for b in (bus, b2, b3):
            await nursery.start(Metronome(b, queue, beat_ms=200, cron_clock=epoch).run)

        async def walked() -> bool:
            now = await bus.transport.server_time_ms()
            return all(r.next_run_ms > now for r in await repeat.list_repeats(bus, queue))

        await wait_for(walked, timeout=100)
        nursery.cancel_scope.cancel()
    now = await bus.transport.server_time_ms()
    for name, (expr, tz, start) in WALKS.items():
        runs = await fired_at(bus, queue, name)
        c = cron.parse(expr, tz)
        expected = [t for t in cron.upcoming(c, ms(start), 2_000) if t <= now]
        assert runs == expected, name  # each once, in order, none missing
    berlin = await fired_at(bus, queue, "berlin")
    # 02:30 on 29 March did not exist in Berlin: it ran once at 03:00 CEST (01:00 UTC).
    assert ms("2026-03-29T01:00Z") in berlin and ms("2026-03-29T00:30Z") not in berlin
    # 02:30 on 25 October happened twice: it ran once, the first time (00:30 UTC).
    assert ms("2026-10-25T00:30Z") in berlin and ms("2026-10-25T01:30Z") not in berlin
    new_york = await fired_at(bus, queue, "new-york")
    assert ms("2026-03-08T06:30Z") in new_york  # 01:30 EST
    assert ms("2026-03-08T07:00Z") in new_york  # 02:30 skipped: 03:00 EDT
    assert ms("2026-11-01T05:30Z") in new_york and ms("2026-11-01T06:30Z") not in new_york
    assert (await jobs.counts(bus, queue)).pending == len(berlin) + len(new_york)


async def test_missed_runs_collapse_into_one_anchored_to_the_schedule(bus: Bus, queue: str) -> None:
    expr, tz = "0 9 * * *", "America/New_York"
    three_days_ago: Callable[[int], int] = lambda now: now - 3 * 86_400_000  # noqa: E731
    _, first = await repeat.register(
        bus, queue, "daily", template="d", cron=expr, tz=tz, clock=three_days_ago
    )
    fired = await repeat.fire(bus, queue)
    assert fired.fired == 1 and fired.wanted == ()
    c = cron.parse(expr, tz)
    reg = await repeat.get(bus, queue, "daily")
    assert reg is not None and reg.next_run_ms == cron.next_after(c, fired.server_now_ms)
    assert await fired_at(bus, queue, "daily") == [first]
    assert (await repeat.fire(bus, queue)).fired == 0  # the next is tomorrow's (or today's) 9:00


async def test_advance_moves_a_cron_run_once(bus: Bus, queue: str) -> None:
    c = cron.parse("*/5 * * * *", "Asia/Kolkata")
    _, first = await repeat.register(
        bus, queue, "five", template="f", cron=c.expr, tz=c.tz, clock=lambda now: now - 3_600_000
    )
    nxt = await repeat.advance(bus, queue, "five")
    now = await bus.transport.server_time_ms()
    assert nxt is not None and now < nxt <= now + 300_000 and nxt == cron.next_after(c, nxt - 1)
    # A move from a run that is no longer the registration's (another caller moved it) does
    # nothing.

    stale = protocol.advance_call(bus.keys(queue), "five", (first, nxt + 300_000))
    assert await bus.run(stale) == nxt
    stale_fire = protocol.fire_call(bus.keys(queue), [ids.generate("JOB")], [("five", first, nxt)])
    assert (await bus.run(stale_fire)).fired == 0
    assert (await repeat.get(bus, queue, "five")).next_run_ms == nxt  # type: ignore[union-attr]
    assert await repeat.advance(bus, queue, "absent") is None


@pytest.fixture
async def closed_bus(standalone_url: str) -> Bus:
    async with open_bus(standalone_url) as bus:
        pass
    return bus


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cron": "0 9 * *"}, ValueError, "has 4 fields"),
        ({"cron": "0 25 * * *"}, ValueError, "Bad hour"),
        ({"cron": "0 9 * * *", "tz": "Europe/Berlinn"}, ValueError, "unknown time zone"),
        ({"cron": "0 9 * * *", "every_ms": 1000}, ValueError, "exactly one of every_ms and cron"),
        ({}, ValueError, "exactly one of every_ms and cron"),
        ({"cron": "0 9 * * *", "first_in_ms": 5}, ValueError, "first_in_ms is for every_ms"),
        ({"cron": "0 9 * * *", "template": None}, TypeError, "needs a template"),
        ({"cron": "0 9 * * *", "group": ""}, ValueError, "group"),
    ],
)
async def test_bad_input_is_refused_before_any_io(
    closed_bus: Bus, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    args: dict[str, object] = {"template": "t", **kwargs}
    with pytest.raises(error, match=message):
        await repeat.register(closed_bus, "q", "n", **args)  # type: ignore[arg-type]
    with pytest.raises(ConnectionLost):  # the same call with good input reaches for the server
        await repeat.register(closed_bus, "q", "n", template="t", cron="0 9 * * *")


async def test_echomq_ls_repeat_shows_the_expression_zone_and_next_runs(
    bus: Bus, queue: str, server_url: str
) -> None:
    c = cron.parse("0 9 * * MON-FRI", "Europe/Berlin")
    _, first = await repeat.register(bus, queue, "standup", template="s", cron=c.expr, tz=c.tz)
    await repeat.register(bus, queue, "hourly", 3_600_000, "h", first_in_ms=86_400_000 * 30)
    runs = [first, *cron.upcoming(c, first, 2)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), ECHOMQ_URL=server_url)
    command = [sys.executable, "-m", "echomq_trio", "ls", queue, "repeat"]
    out = await trio.run_process(command, capture_stdout=True, env=env, cwd=ROOT)
    header, standup, hourly = out.stdout.decode().splitlines()
    assert header.split()[:4] == ["name", "schedule", "zone", "next_run"]
    assert "0 9 * * MON-FRI" in standup and "Europe/Berlin" in standup
    for t in runs:  # in Berlin's time (09:00 CET or CEST) and in UTC
        assert cron.local_text(t, "Europe/Berlin") in standup
        assert dt.datetime.fromtimestamp(t / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") in standup
    assert standup.count(" 09:00:00 CE") == 3
    assert hourly.startswith("hourly") and "every 1 h" in hourly
    out = await trio.run_process([*command[:3], "--json", *command[3:]], capture_stdout=True,
                                 env=env, cwd=ROOT)  # fmt: skip
    listed = {r["name"]: r for r in json.loads(out.stdout)}
    assert listed["standup"]["next_runs"] == runs
    assert (listed["standup"]["cron"], listed["standup"]["tz"]) == (c.expr, c.tz)
    assert listed["hourly"]["every_ms"] == 3_600_000 and listed["hourly"]["cron"] is None


@pytest.mark.timeout_s(60)
async def test_a_step_of_the_server_clock_leaves_cron_runs_at_their_times(
    stepping_server: SteppingServer, queue: str
) -> None:
    """Cron runs are times of day: after the server clock steps back an hour, a cron schedule's
    next run is the same instant, while an every-ms one is brought within a period."""
    async with open_bus(stepping_server.url) as bus:
        _, at = await repeat.register(bus, queue, "nine", template="n", cron="0 9 * * *")
        await repeat.register(bus, queue, "hourly", 3_600_000, "h", first_in_ms=3_000_000)
        sent = trio.current_time()
        witness = Witness()
        witness.observe(await bus.transport.server_time_ms(), sent, trio.current_time())
        await stepping_server.step(-3600)
        c = await jobs.carry_clock(bus, queue, witness.args(trio.current_time()))
        assert c.recorded_ms < 0
        while c.more:
            c = await jobs.carry_clock(bus, queue)
        now = await bus.transport.server_time_ms()
        regs = {r.name: r.next_run_ms for r in await repeat.list_repeats(bus, queue)}
        assert regs["nine"] == at
        assert 0 < regs["hourly"] - now <= 3_600_000


async def test_a_zone_unknown_here_is_logged_and_waits_a_beat(
    bus: Bus, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A registration whose zone this machine's database lacks (made by a machine with a newer
    one) cannot be computed here: fire leaves it due for the metronomes that can, logs it, and
    the metronome waits its beat rather than spinning on it."""
    await repeat.register(bus, queue, "far", template="f", cron="0 9 * * *", tz="Asia/Tokyo")
    k = bus.keys(queue)
    await bus.transport.command("HSET", k.registration("far"), "tz", "Mars/Olympus")
    await bus.transport.command("ZADD", k.repeats, "1000", "far")  # due long ago
    fired = await repeat.fire(bus, queue)
    assert fired.fired == 0 and [w.name for w in fired.wanted] == ["far"]
    assert "repeat 'far' cannot be fired here: unknown time zone 'Mars/Olympus'" in caplog.text
    wait = await Metronome(bus, queue, beat_ms=700).beat()
    assert wait == 0.7
    reg = await repeat.get(bus, queue, "far")
    assert reg is not None and reg.next_run_ms == 1000  # left for another metronome
