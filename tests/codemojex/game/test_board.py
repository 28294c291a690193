"""The leaderboards on a real server: a board per round and a board per day, each best kept
atomically under concurrent writers, rank, around, ties, lifetimes, and no writes to a round that
is not open."""

import random

import pytest
import trio

from codemojex import game, ids
from codemojex.game import board, days
from echomq_trio import Bus


async def open_round(bus: Bus) -> tuple[str, str]:
    """A new room with a round open now: (room id, round id)."""
    room = await game.create_room(bus, -5_000_000 - random.randrange(10**6), "Board Room")
    rnd = await game.start_round(bus, room.id, starts_in_ms=0)
    return room.id, rnd.id


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_keeps_the_best_atomically_under_concurrent_writers(bus: Bus) -> None:
    (room, rnd), player = await open_round(bus), ids.new(ids.USER)
    offered = list(range(0, 101, 3))

    async def writer(values: list[int]) -> None:
        for v in values:
            await board.record(bus, room, rnd, player, v)

    async with trio.open_nursery() as nursery:
        for k in range(6):
            nursery.start_soon(writer, offered[k::6][::-1])
    (standing,) = await board.top(bus, board.round_board(room, rnd))
    assert standing.percentage == max(offered) == 99
    r = await board.record(bus, room, rnd, player, 50)
    assert (r.improved, r.best) == (False, 99)
    r = await board.record(bus, room, rnd, player, 100)
    assert (r.improved, r.best) == (True, 100)
    (today,) = await board.top(bus, board.day_board(room, r.day))
    assert today.percentage == 100


async def test_top_rank_and_around(bus: Bus) -> None:
    room, rnd = await open_round(bus)
    players = [ids.new(ids.USER) for _ in range(10)]
    for n, p in enumerate(players):
        await board.record(bus, room, rnd, p, 10 * n)  # players[9] is best
    this_round = board.round_board(room, rnd)
    top3 = await board.top(bus, this_round, 3)
    assert [(s.rank, s.player, s.percentage) for s in top3] == [
        (1, players[9], 90), (2, players[8], 80), (3, players[7], 70),
    ]  # fmt: skip
    assert await board.rank(bus, this_round, players[0]) == 10
    assert await board.rank(bus, this_round, ids.new(ids.USER)) is None
    near = await board.around(bus, this_round, players[5], 2)
    assert [s.player for s in near] == [players[7], players[6], players[5], players[4], players[3]]
    assert [s.rank for s in near] == [3, 4, 5, 6, 7]
    edge = await board.around(bus, this_round, players[9], 2)
    assert [s.rank for s in edge] == [1, 2, 3]
    assert await board.around(bus, this_round, ids.new(ids.USER), 2) == []


async def test_ties_rank_the_earlier_best_first(bus: Bus) -> None:
    room, rnd = await open_round(bus)
    first, second, third = (ids.new(ids.USER) for _ in range(3))
    await board.record(bus, room, rnd, first, 70)
    await trio.sleep(0.005)  # distinct server milliseconds
    await board.record(bus, room, rnd, second, 70)
    await trio.sleep(0.005)
    await board.record(bus, room, rnd, third, 70)
    r = await board.record(bus, room, rnd, first, 70)  # reaching it again later changes nothing
    for shown in (board.round_board(room, rnd), board.day_board(room, r.day)):
        assert [s.player for s in await board.top(bus, shown)] == [first, second, third]


async def test_each_round_starts_an_empty_board_and_the_day_keeps_the_day_s_best(
    bus: Bus,
) -> None:
    room, first = await open_round(bus)
    alice, bob = ids.new(ids.USER), ids.new(ids.USER)
    await board.record(bus, room, first, alice, 90)
    await game.end_round(bus, room)
    second = (await game.start_round(bus, room, starts_in_ms=0)).id
    assert await board.top(bus, board.round_board(room, second)) == []
    r = await board.record(bus, room, second, alice, 40)
    assert (r.improved, r.best) == (True, 40)  # the round's best, not the day's
    await board.record(bus, room, second, bob, 60)
    in_round = [
        (s.player, s.percentage) for s in await board.top(bus, board.round_board(room, second))
    ]
    assert in_round == [(bob, 60), (alice, 40)]
    today = [(s.player, s.percentage) for s in await board.top(bus, board.day_board(room, r.day))]
    assert today == [(alice, 90), (bob, 60)]


async def test_today_is_the_server_s_utc_day_and_its_board_expires_after_the_keep(
    bus: Bus,
) -> None:
    room, rnd = await open_round(bus)
    before = await bus.transport.server_time_ms()
    r = await board.record(bus, room, rnd, ids.new(ids.USER), 30, day_keep_ms=3_600_000)
    after = await bus.transport.server_time_ms()
    assert days.day_of(before) <= r.day <= days.day_of(after)
    # The day's board lives until an hour after its day ends; the open round's has no lifetime.
    ttl = await bus.transport.command("PTTL", board.day_board(room, r.day).key)
    expires = (r.day + 1) * game.DAY_MS + 3_600_000
    assert expires - after - 5_000 <= ttl <= expires - before
    assert await bus.transport.command("PTTL", board.round_board(room, rnd).key) == -1


async def test_a_round_that_is_not_open_is_refused_and_nothing_is_written(bus: Bus) -> None:
    room, rnd = await open_round(bus)
    await game.end_round(bus, room)
    with pytest.raises(game.GameError, match=f"round {rnd} is not open"):
        await board.record(bus, room, rnd, ids.new(ids.USER), 80)
    assert await bus.transport.command("EXISTS", board.round_board(room, rnd).key) == 0
    never = ids.new(ids.ROUND)
    with pytest.raises(game.GameError, match="is not open"):
        await board.record(bus, room, never, ids.new(ids.USER), 80)
    assert await bus.transport.command("EXISTS", board.round_board(room, never).key) == 0


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_improvements_are_published_for_the_feed(bus: Bus) -> None:
    (room, rnd), player = await open_round(bus), ids.new(ids.USER)
    async with bus.transport.subscribe(channels=[board.feed_channel(room)]) as sub:
        await board.record(bus, room, rnd, player, 40)
        with trio.fail_after(5):
            message = await sub.receive()
        assert message.data.decode() == room


async def test_bad_input(bus: Bus) -> None:
    room, rnd = await open_round(bus)
    with pytest.raises(ValueError):
        await board.record(bus, "room1", rnd, ids.new(ids.USER), 5)
    with pytest.raises(ValueError):
        await board.record(bus, room, "round1", ids.new(ids.USER), 5)
    with pytest.raises(ValueError):
        await board.record(bus, room, rnd, ids.new(ids.USER), 101)
    with pytest.raises(ValueError):
        await board.record(bus, room, rnd, "bob", 5)
    with pytest.raises(ValueError):
        board.day_board(room, -1)
