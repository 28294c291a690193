"""The leaderboard on a real server: atomic best under concurrent writers, rank, around, ties."""

import pytest
import trio

from codemojex import ids
from codemojex.game import board
from echomq_trio import Bus

pytestmark = pytest.mark.cluster


async def test_keeps_the_best_atomically_under_concurrent_writers(bus: Bus) -> None:
    room, player = ids.new(ids.ROOM), ids.new(ids.USER)
    offered = list(range(0, 101, 3))

    async def writer(values: list[int]) -> None:
        for v in values:
            await board.record(bus, room, player, v)

    async with trio.open_nursery() as nursery:
        for k in range(6):
            nursery.start_soon(writer, offered[k::6][::-1])
    (standing,) = await board.top(bus, room)
    assert standing.percentage == max(offered) == 99
    r = await board.record(bus, room, player, 50)
    assert (r.improved, r.best) == (False, 99)
    r = await board.record(bus, room, player, 100)
    assert (r.improved, r.best) == (True, 100)


async def test_top_rank_and_around(bus: Bus) -> None:
    room = ids.new(ids.ROOM)
    players = [ids.new(ids.USER) for _ in range(10)]
    for n, p in enumerate(players):
        await board.record(bus, room, p, 10 * n)  # players[9] is best
    top3 = await board.top(bus, room, 3)
    assert [(s.rank, s.player, s.percentage) for s in top3] == [
        (1, players[9], 90), (2, players[8], 80), (3, players[7], 70),
    ]  # fmt: skip
    assert await board.rank(bus, room, players[0]) == 10
    assert await board.rank(bus, room, ids.new(ids.USER)) is None
    near = await board.around(bus, room, players[5], 2)
    assert [s.player for s in near] == [players[7], players[6], players[5], players[4], players[3]]
    assert [s.rank for s in near] == [3, 4, 5, 6, 7]
    edge = await board.around(bus, room, players[9], 2)
    assert [s.rank for s in edge] == [1, 2, 3]
    assert await board.around(bus, room, ids.new(ids.USER), 2) == []


async def test_ties_rank_the_earlier_best_first(bus: Bus) -> None:
    room = ids.new(ids.ROOM)
    first, second, third = (ids.new(ids.USER) for _ in range(3))
    await board.record(bus, room, first, 70)
    await trio.sleep(0.005)  # distinct server milliseconds
    await board.record(bus, room, second, 70)
    await trio.sleep(0.005)
    await board.record(bus, room, third, 70)
    await board.record(bus, room, first, 70)  # reaching it again later changes nothing
    assert [s.player for s in await board.top(bus, room)] == [first, second, third]


async def test_improvements_are_published_for_the_feed(bus: Bus) -> None:
    room, player = ids.new(ids.ROOM), ids.new(ids.USER)
    async with bus.wire.subscribe(channels=[board.feed_channel(room)]) as sub:
        await board.record(bus, room, player, 40)
        with trio.fail_after(5):
            message = await sub.receive()
        assert message.data.decode() == room


async def test_bad_input(bus: Bus) -> None:
    import pytest

    with pytest.raises(ValueError):
        await board.record(bus, "room1", ids.new(ids.USER), 5)
    with pytest.raises(ValueError):
        await board.record(bus, ids.new(ids.ROOM), ids.new(ids.USER), 101)
    with pytest.raises(ValueError):
        await board.record(bus, ids.new(ids.ROOM), "bob", 5)
