"""The shared limiter on a real server: windows, both-or-neither, pauses, one budget across
limiter instances (as across processes)."""

import itertools

import attrs
import pytest
import trio

from codemojex.notify.rate_limiter import RateLimiter
from codemojex.telegram.limits import Limits, Window
from echomq_trio import Bus, Metronome, open_bus
from tests.support import SteppingServer, wait_for


def limiter(bus: Bus, tag: str, margin_ms: int = 0) -> RateLimiter:
    limits = Limits(global_=Window(5, 400), private=Window(2, 400), group=Window(3, 1000))
    return RateLimiter(bus, limits, tag=tag, margin_ms=margin_ms)


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_chat_window_then_global_window(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    assert [(await rl.take(1)).ok for _ in range(3)] == [True, True, False]
    blocked = await rl.take(1)
    assert blocked.blocked_by == "chat" and 0 < blocked.wait_ms <= 401
    assert (await rl.take(2)).ok and (await rl.take(3)).ok and (await rl.take(4)).ok
    g = await rl.take(5)  # 5 sends in the global window already
    assert not g.ok and g.blocked_by == "global" and 0 < g.wait_ms <= 401


async def test_both_or_neither(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    assert (await rl.take(1)).ok and (await rl.take(1)).ok
    assert (await rl.take(1)).blocked_by == "chat"  # the global window is not charged for it
    for chat in (2, 3, 4):
        assert (await rl.take(chat)).ok  # 5 sends in the global window: all five slots used
    assert (await rl.take(5)).blocked_by == "global"


async def test_global_waiters_queue_in_order_for_the_next_free_slots(bus: Bus, queue: str) -> None:
    # Windows of 2 s + a 200 ms margin, so a loaded machine's slow round trips and late wake-ups
    # (bracketed below by the server's clock) stay well inside them.
    limits = Limits(global_=Window(5, 2000), private=Window(2, 2000), group=Window(3, 5000))
    rl = RateLimiter(bus, limits, tag=queue, margin_ms=200)
    window = 2200
    began = await server_ms(bus)
    for chat in range(1, 6):
        assert (await rl.take(chat)).ok
    waits = [(await rl.take(10 + i)).wait_ms for i in range(7)]
    elapsed = await server_ms(bus) - began  # every take above happened within this
    # Served in the order they asked: each waits for a slot no earlier than the one before.
    assert all(b >= a - elapsed for a, b in itertools.pairwise(waits)), waits
    # The next window's five slots, then the one after; a waiter comes back half a window
    # (2000 / 2) before its slot, to have it refined once the sends before it have answers.
    lead = 1000
    assert all(window - lead - elapsed - 1 <= w <= window - lead + 1 for w in waits[:5]), (
        waits, elapsed)  # fmt: skip
    assert all(2 * window - lead - elapsed - 1 <= w <= 2 * window - lead + 1
               for w in waits[5:]), (waits, elapsed)  # fmt: skip
    # Back early, it learns the rest of its wait (nothing was answered, so the slot stays);
    # back at its slot, it sends in it without taking again...
    await trio.sleep(waits[0] / 1000)
    rest = await rl.take(10)
    assert rest.blocked_by == "global" and 0 < rest.wait_ms <= lead + 1, rest
    await trio.sleep(rest.wait_ms / 1000)
    assert (await rl.take(10)).ok
    # ...and the slots are spoken for: a newcomer's slot is no earlier than the seventh's, which
    # is at least `waits[-1]` after `began`; the newcomer asked before `asked_by` (the server's
    # clock brackets it, so a slow wake-up or round trip cannot push the bound; 2 ms rounding).
    newcomer = await rl.take(99)
    asked_by = await server_ms(bus)
    assert newcomer.wait_ms >= began + waits[-1] - asked_by - 2, (newcomer, waits, began, asked_by)


async def server_ms(bus: Bus) -> int:
    seconds, micros = await bus.transport.command("TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def test_a_late_reservation_sends_when_the_window_holds_it(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    for chat in range(1, 6):
        await rl.take(chat)
    first = await rl.take(50)
    assert not first.ok
    await trio.sleep(first.wait_ms / 1000)  # back half a window early: told the rest
    rest = await rl.take(50)
    assert not rest.ok and rest.blocked_by == "global", rest
    await trio.sleep(rest.wait_ms / 1000 + 0.05)  # back late: nobody else wanted the slot
    assert (await rl.take(50)).ok  # sent at its real time, not lost


async def test_a_late_reservation_in_a_full_window_gives_its_slot_back(
    bus: Bus, queue: str
) -> None:
    rl = limiter(bus, queue)  # 5 per 400 ms
    for chat in range(1, 6):
        await rl.take(chat)
    late = await rl.take(50)  # a slot in the next window
    for chat in range(60, 64):
        await rl.take(chat)  # the rest of that window
    following = [await rl.take(70 + i) for i in range(5)]  # the whole window after it
    await trio.sleep(following[0].wait_ms / 1000 + 0.05)
    # Chat 50 comes back a whole window late, into a window its successors have filled.
    first_asked = await server_ms(bus)
    again = await rl.take(50)
    assert not again.ok and again.blocked_by == "global", again  # queued again
    assert late.wait_ms < following[0].wait_ms < following[0].wait_ms + again.wait_ms
    # A newcomer queues behind it: its wait ends no earlier, less the time between the two
    # takes on the server's clock (a loaded machine's round trips; 2 ms rounding).
    newcomer = await rl.take(80)
    apart = await server_ms(bus) - first_asked
    assert newcomer.wait_ms >= again.wait_ms - apart - 2, (newcomer, again, apart)


async def test_group_chats_have_their_own_window(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    assert [(await rl.take(-100)).ok for _ in range(4)] == [True, True, True, False]


async def test_window_frees_over_time(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    await rl.take(1)
    await rl.take(1)
    denied = await rl.take(1)
    await trio.sleep(denied.wait_ms / 1000)
    assert (await rl.take(1)).ok


async def test_one_budget_for_every_instance(bus: Bus, queue: str) -> None:
    a, b = limiter(bus, queue), limiter(bus, queue)
    assert (await a.take(1)).ok and (await b.take(1)).ok
    assert not (await a.take(1)).ok and not (await b.take(1)).ok


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_pause_blocks_its_scope_and_only_extends(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    scope, until = await rl.pause("chat", 7, 5_000)
    assert scope == "chat"
    t = await rl.take(7)
    assert not t.ok and t.blocked_by == "paused" and t.wait_ms > 4_000
    assert (await rl.take(8)).ok  # other chats go on
    assert (await rl.pause("chat", 7, 10))[1] == until  # a pause only extends
    await rl.pause("global", 0, 3_000)
    assert (await rl.take(9)).blocked_by == "paused"


async def test_auto_pause_picks_global_when_the_bot_window_is_full(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    assert (await rl.pause("auto", 1, 1000))[0] == "chat"
    for chat in range(10, 15):
        await rl.take(chat)
    assert (await rl.pause("auto", 2, 1000))[0] == "global"


async def test_statistics_count_what_this_limiter_answered(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    for chat in (1, 1, 1, 2, 3, 4, 5):  # 5 sends, then the chat's window, then the bot's
        await rl.take(chat)
    await rl.pause("chat", 7, 5_000)
    denied = await rl.take(7)
    snapshot = rl.statistics()
    assert attrs.asdict(snapshot) == {
        "taken": 5, "refined": 0, "confirmed": 0,
        "denied_global": 1, "denied_chat": 1, "denied_paused": 1,
        "denied_wait_ms": snapshot.denied_wait_ms, "paused_global": 0, "paused_chat": 1,
    }  # fmt: skip
    assert snapshot.denied_wait_ms >= denied.wait_ms > 4_000
    assert not (await rl.take(8)).ok  # the bot's window is still full
    assert rl.statistics().denied_global == 2 and snapshot.denied_global == 1  # it stays put
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        snapshot.taken = 0  # type: ignore[misc]


async def test_bad_input(bus: Bus) -> None:
    rl = limiter(bus, "q")
    with pytest.raises(ValueError):
        await rl.take("123")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await rl.pause("room", 1, 10)
    with pytest.raises(ValueError):
        RateLimiter(bus, tag="bad tag")


async def test_a_booking_is_a_send_at_its_slot_and_a_late_one_is_checked_again(
    bus: Bus, queue: str
) -> None:
    rl = limiter(bus, queue)  # 5 per 400 ms
    for chat in range(1, 6):
        assert (await rl.take(chat, book_ms=1000)).ok  # room now: sent now, nothing booked
    first_asked = await server_ms(bus)
    booked = await rl.take(50, book_ms=1000)
    assert (booked.blocked_by, booked.entry != "") == ("booked", True)
    assert 0 < booked.wait_ms <= 401
    # Booked is taken: the next chat's slot is no earlier, and without book_ms it is reserved
    # (its wait ends half a window, 200 ms, before the slot, to come back and have it refined).
    # The two takes are apart by at most `apart` ms on the server's clock (2 ms rounding).
    after = await rl.take(51)
    apart = await server_ms(bus) - first_asked
    assert after.blocked_by == "global" and after.wait_ms + 200 >= booked.wait_ms - apart - 2, (
        after, booked, apart)  # fmt: skip
    assert rl.statistics().taken == 6
    # Woken a window late into a window others filled: the booking is given back and queued.
    for chat in range(60, 64):
        await rl.take(chat, book_ms=1000)
    following = [await rl.take(70 + i, book_ms=1000) for i in range(5)]
    await trio.sleep(following[0].wait_ms / 1000 + 0.05)
    again = await rl.take(50, booking=booked.entry)
    assert not again.ok and again.blocked_by == "global", again


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_a_window_counts_from_the_answer_once_a_send_has_one(bus: Bus, queue: str) -> None:
    # 5 per 400 ms with a 200 ms margin: unanswered, a send is assumed to reach Telegram up to
    # the margin after its slot; answered, it is known to have arrived before the answer.
    limits = Limits(global_=Window(5, 400), private=Window(2, 400), group=Window(3, 1000))
    answered = RateLimiter(bus, limits, tag=queue, margin_ms=200)
    assumed = RateLimiter(bus, limits, tag=queue + "-b", margin_ms=200)
    for rl in (answered, assumed):
        began = await server_ms(bus)
        takes = [await rl.take(chat) for chat in range(1, 6)]
        assert all(t.ok and t.entry for t in takes), takes
        if rl is answered:
            stamped_from = await server_ms(bus)
            assert all([await rl.sent(chat, t.entry) for chat, t in enumerate(takes, 1)])
            stamped_by = await server_ms(bus)
        asked = await server_ms(bus)
        nxt = await rl.take(9, book_ms=1000)
        answered_by = await server_ms(bus)
        assert nxt.blocked_by == "booked", nxt
        # The slot is at least `asked + wait` and at most `answered_by + wait` (server clock).
        if rl is answered:
            # A window after the answers: after the first one's, by the last one's.
            assert answered_by + nxt.wait_ms >= stamped_from + 400 - 1, (nxt, stamped_from)
            assert asked + nxt.wait_ms <= stamped_by + 400 + 1, (nxt, stamped_by)
        else:
            # Unanswered: the window plus the margin after the first send was taken.
            assert answered_by + nxt.wait_ms >= began + 600 - 1, (nxt, began)
            assert asked + nxt.wait_ms <= asked + 600 + 1, nxt
    assert answered.statistics().confirmed == 5 and assumed.statistics().confirmed == 0


async def test_a_booking_comes_forward_when_the_sends_before_it_are_answered(
    bus: Bus, queue: str
) -> None:
    limits = Limits(global_=Window(5, 400), private=Window(2, 400), group=Window(3, 1000))
    rl = RateLimiter(bus, limits, tag=queue, margin_ms=200)
    takes = [await rl.take(chat) for chat in range(1, 6)]
    asked = await server_ms(bus)
    booked = await rl.take(50, book_ms=2000)
    assert booked.blocked_by == "booked" and booked.ask_ms > 0, booked
    slot_no_earlier_than = asked + booked.wait_ms  # the slot, on the server's clock
    # The five sends before it get their answers; the holder asks again when told to.
    stamped_from = await server_ms(bus)
    for chat, take in enumerate(takes, 1):
        await rl.sent(chat, take.entry)
    stamped_by = await server_ms(bus)
    await trio.sleep(booked.ask_ms / 1000)
    asked_again = await server_ms(bus)
    refined = await rl.take(50, book_ms=2000, booking=booked.entry)
    answered_by = await server_ms(bus)
    assert refined.ok or refined.blocked_by == "booked", refined
    assert refined.entry and refined.entry != booked.entry and refined.ask_ms == 0, refined
    new_slot_by = answered_by + refined.wait_ms
    new_slot_from = asked_again + refined.wait_ms
    # Forward by about the margin it no longer needs, yet never within a window of an answer
    # (the last of the five answers came at or after `stamped_from`).
    assert new_slot_by < slot_no_earlier_than, (refined, booked)
    assert new_slot_by >= stamped_from + 400 - 1, (refined, stamped_from)
    assert new_slot_from <= max(stamped_by + 400, asked_again) + 1, (refined, stamped_by)
    assert rl.statistics().refined == 1 and rl.statistics().taken == 6


async def test_sent_needs_an_entry_the_logs_hold(bus: Bus, queue: str) -> None:
    rl = limiter(bus, queue)
    assert not await rl.sent(1, "123:9")  # never taken: nothing to stamp
    with pytest.raises(ValueError):
        await rl.sent(1, "")


async def test_a_quiet_chat_s_log_is_forgotten_a_window_after_its_last_send(
    bus: Bus, queue: str
) -> None:
    """The logs carry no lifetime of their own (a step forward of the server clock would expire
    them); each take forgets a few chats whose window has passed, so the keys are bounded by the
    chats that sent within a window."""
    rl = limiter(bus, queue)
    for chat in range(1, 6):
        assert (await rl.take(chat)).ok

    async def chat_logs() -> int:
        return len(await bus.transport.scan(rl.prefix + "chat:*"))

    assert await chat_logs() == 5
    await trio.sleep(0.45)  # every window (400 ms) has passed
    for _ in range(3):  # each take forgets up to two quiet chats
        await rl.take(100)
    assert await chat_logs() == 1  # chat 100's own


ERR = 200


@pytest.mark.timeout_s(60)
@pytest.mark.parametrize("step_s", [-3600, 3600])
async def test_the_limiter_s_windows_and_pauses_ride_out_a_step_of_the_server_clock(
    stepping_server: SteppingServer, step_s: int
) -> None:
    """An hour back does not hold a chat (or everyone) for the hour; an hour forward does not
    empty the bot's window or end a pause: every distance is kept."""
    async with open_bus(stepping_server.url) as bus:
        rl = limiter(bus, "cm.x")
        assert [(await rl.take(chat)).ok for chat in (1, 1, 2, 3, 4)] == [True] * 5
        await rl.pause("chat", 9, 20_000)
        await stepping_server.step(step_s)
        # A step's size is known to within the calls' round trips (ms): ERR on top.
        g = await rl.take(5)  # the bot's window is still full: a wait of at most a window
        assert g.blocked_by == "global" and 0 < g.wait_ms <= 400 + ERR
        c = await rl.take(1)  # chat 1's window too
        assert c.blocked_by == "chat" and 0 < c.wait_ms <= 400 + ERR
        p = await rl.take(9)  # the pause keeps what was left of it
        assert p.blocked_by == "paused" and 15_000 < p.wait_ms <= 20_000 + ERR
        await trio.sleep(0.45)
        assert (await rl.take(1)).ok  # and a window later, sends go on
        step, _ = await _step(bus, "cm.x")
        assert abs(step - step_s * 1000) < 2_000  # the first take after it recorded the step


async def _step(bus: Bus, queue: str) -> tuple[int, int]:
    got = await bus.command("HMGET", bus.keys(queue).meta, "clock_step_ms", "clock_step_at")
    assert isinstance(got, list)
    step, at = got
    assert isinstance(step, bytes) and isinstance(at, bytes)
    return int(step), int(at)


@pytest.mark.timeout_s(60)
async def test_a_limiter_idle_across_two_steps_takes_both_in(
    stepping_server: SteppingServer,
) -> None:
    """The clock is set an hour back and then right again while this limiter sends nothing (a
    metronome records both): its pause keeps what was left of it, not an hour more or less."""
    async with open_bus(stepping_server.url) as bus:
        rl = limiter(bus, "cm.y")
        await rl.pause("chat", 9, 20_000)
        metronome = Metronome(bus, "cm.y", beat_ms=100)
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            for step_s in (-3600, 3600):
                beats = metronome.statistics().beats
                await wait_for(lambda b=beats: metronome.statistics().beats >= b + 2)
                stepped = metronome.statistics().clock_steps
                await stepping_server.step(step_s)
                await wait_for(lambda s=stepped: metronome.statistics().clock_steps == s + 1)
            nursery.cancel_scope.cancel()
        p = await rl.take(9)
        assert p.blocked_by == "paused" and 15_000 < p.wait_ms <= 20_000 + ERR
