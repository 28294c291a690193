"""The live feed over real websockets: the current round's board on connect, every change after,
a fresh board when a round starts, the final one when it ends; a slow viewer never holds up a
fast one, pings drop dead viewers, and a stop says goodbye (1001)."""

import json
import struct

import pytest
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    connect_websocket_url,
    open_websocket_url,
)
from wsproto.utilities import LocalProtocolError

from codemojex import game
from codemojex.game import board
from codemojex.game.feed import GOODBYE_CODE, GOODBYE_REASON, Feed
from codemojex.game.scoring import ALPHABET
from echomq_trio import Bus
from tests.support import traced_blocks, tracing, wait_for


@pytest.fixture
async def room(bus: Bus) -> game.Room:
    return await game.create_room(bus, -4242, "Feed Room")


@pytest.fixture
async def rnd(bus: Bus, room: game.Room) -> game.Round:
    """A round open now in ``room``: the board the feed shows."""
    return await game.start_round(bus, room.id, starts_in_ms=0)


async def start_feed(nursery: trio.Nursery, bus: Bus, **kw: float) -> tuple[Feed, str]:
    feed = Feed(bus, **kw)  # type: ignore[arg-type]
    port = await nursery.start(feed.serve, "127.0.0.1", 0)
    return feed, f"ws://127.0.0.1:{port}"


async def test_snapshot_then_updates(bus: Bus, room: game.Room, rnd: game.Round) -> None:
    alice = await game.create_player(bus, "Alice", 1)
    bob = await game.create_player(bus, "Bob", 2)
    await board.record(bus, room.id, rnd.id, alice.id, 50)
    async with trio.open_nursery() as nursery:
        _, base = await start_feed(nursery, bus)
        async with open_websocket_url(f"{base}/rooms/{room.id}") as ws:
            first = json.loads(await ws.get_message())
            assert first["title"] == "Feed Room"
            assert (first["round"], first["open"]) == (rnd.id, True)
            assert first["top"] == [{"rank": 1, "player": alice.id, "name": "Alice",
                                     "percentage": 50}]  # fmt: skip
            await board.record(bus, room.id, rnd.id, bob.id, 80)  # as any process would
            with trio.fail_after(10):
                update = json.loads(await ws.get_message())
            top = [(s["name"], s["percentage"]) for s in update["top"]]
            assert top == [("Bob", 80), ("Alice", 50)]
        nursery.cancel_scope.cancel()


async def test_unknown_rooms_are_refused(bus: Bus) -> None:
    async with trio.open_nursery() as nursery:
        _, base = await start_feed(nursery, bus)
        for path in ("/rooms/RMM0000000000A", "/nope", "/rooms/bad"):
            with pytest.raises(ConnectionRejected):
                async with open_websocket_url(base + path):
                    pass
        nursery.cancel_scope.cancel()


async def _viewer(url: str, ready: list[int], leave: trio.Event) -> None:
    """A viewer that reads its first board and stays until ``leave``."""
    try:
        async with open_websocket_url(url) as ws:
            await ws.get_message()
            ready[0] += 1
            await leave.wait()
    except* LocalProtocolError:  # trio-websocket answering a ping while it closes: its race
        pass


@pytest.mark.timeout_s(120)
async def test_viewers_leave_nothing_behind(bus: Bus, room: game.Room) -> None:
    """100 viewers of two rooms come and go: the feed's books of viewers and rooms are empty
    after, and of the Python memory blocks its code allocated for them none is left (what its
    containers keep of their size aside: a few blocks, whatever the crowd). What trio keeps of
    the viewers' ended timeouts until they would have expired (at most ``ping_timeout_s``) is
    waited out."""
    other = await game.create_room(bus, -4243, "Other Room")
    feed_code = "codemojex/game/feed.py"

    async def crowd(feed: Feed, base: str, n: int) -> int:
        ready, leave = [0], trio.Event()
        async with trio.open_nursery() as viewers:
            for i in range(n):
                viewers.start_soon(_viewer, f"{base}/rooms/{(room.id, other.id)[i % 2]}", ready,
                                   leave)  # fmt: skip
            # Tracing makes every allocation slow: 100 viewers take about 7 s to connect here.
            await wait_for(lambda: ready[0] == n, timeout=60)
            assert (feed.statistics().viewers, feed.statistics().rooms) == (n, 2)
            assert len(feed._scopes) == n
            held = traced_blocks(feed_code)
            leave.set()
        await wait_for(lambda: feed.statistics().viewers == 0)
        return held

    async with trio.open_nursery() as nursery:
        feed, base = await start_feed(nursery, bus, ping_interval_s=1, ping_timeout_s=5)
        with tracing():
            await crowd(feed, base, 20)  # what a first crowd makes once (containers grown)
            before = traced_blocks(feed_code)
            held = await crowd(feed, base, 100)
            await wait_for(lambda: traced_blocks(feed_code) <= before + 20, timeout=60, step=0.5)
        assert held >= before + 5 * 100  # what 100 viewers hold while connected
        assert (feed._viewers, feed._pushed, feed._dirty, feed._scopes) == ({}, {}, set(), set())
        nursery.cancel_scope.cancel()


async def test_a_slow_viewer_gets_the_latest_not_a_backlog_and_never_slows_a_fast_one(
    bus: Bus, room: game.Room, rnd: game.Round
) -> None:
    players = [await game.create_player(bus, f"P{n:03d}" + "x" * 40, n + 1) for n in range(150)]
    async with trio.open_nursery() as nursery:
        feed, base = await start_feed(nursery, bus, top_n=150, ping_interval_s=60)
        url = f"{base}/rooms/{room.id}"
        async with open_websocket_url(url) as slow, open_websocket_url(url) as fast:
            await slow.get_message()  # the snapshot; then the slow viewer stops reading
            await fast.get_message()
            updates = 300
            for n in range(updates):
                await board.record(bus, room.id, rnd.id, players[n % 150].id,
                                   1 + n * 99 // updates)  # fmt: skip
            final = 1 + (updates - 1) * 99 // updates
            with trio.fail_after(30):  # the fast viewer keeps up while the slow one reads nothing
                while True:
                    msg = json.loads(await fast.get_message())
                    if msg["top"][0]["percentage"] == final:
                        break
            # Now the slow viewer reads: it catches up to the newest board quickly, skipping
            # most of what it missed instead of replaying a backlog.
            received = 0
            with trio.fail_after(30):
                while True:
                    msg = json.loads(await slow.get_message())
                    received += 1
                    if msg["top"][0]["percentage"] == final:
                        break
            assert received < updates / 2, f"slow viewer replayed {received} boards"
            stats = feed.statistics()
            assert (stats.viewers, stats.rooms) == (2, 1)
            assert stats.boards_skipped > 0, "the boards the slow viewer never saw are counted"
        nursery.cancel_scope.cancel()


async def test_pings_drop_a_viewer_that_stopped_answering(bus: Bus, room: game.Room) -> None:
    async with trio.open_nursery() as nursery:
        feed, base = await start_feed(nursery, bus, ping_interval_s=0.2, ping_timeout_s=0.5)
        stream = await trio.open_tcp_stream("127.0.0.1", int(base.rsplit(":", 1)[1]))
        # A viewer that completes the handshake and then never reads again (no pongs).
        await stream.send_all(
            f"GET /rooms/{room.id} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        await wait_for(lambda: feed.statistics().viewers == 1)
        await wait_for(lambda: feed.statistics().viewers == 0, timeout=10)
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def _raw_viewer(port: int, room: str, *, rcvbuf: int | None = None) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    if rcvbuf is not None:
        stream.socket.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, rcvbuf)
    await stream.send_all(
        f"GET /rooms/{room} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    return stream


async def test_viewers_vanishing_mid_update_never_take_the_feed_down(
    bus: Bus, room: game.Room, rnd: game.Round
) -> None:
    players = [await game.create_player(bus, f"P{n}", n + 1) for n in range(20)]
    async with trio.open_nursery() as nursery:
        feed, base = await start_feed(nursery, bus, ping_interval_s=60)
        port = int(base.rsplit(":", 1)[1])

        async def churn_the_board() -> None:
            for n in range(10**6):
                await board.record(bus, room.id, rnd.id, players[n % 20].id,
                                   min(100, 1 + n // 10))  # fmt: skip

        nursery.start_soon(churn_the_board)
        for _ in range(40):
            stream = await _raw_viewer(port, room.id)
            await wait_for(lambda: feed.statistics().viewers >= 1)
            # Reset the connection (RST) while updates are being sent to it.
            stream.socket.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))  # fmt: skip
            stream.socket.close()
        await wait_for(lambda: feed.statistics().viewers == 0)
        async with open_websocket_url(f"{base}/rooms/{room.id}") as ws:  # still serving
            assert json.loads(await ws.get_message())["room"] == room.id
        nursery.cancel_scope.cancel()


async def test_pings_drop_a_viewer_whose_window_is_full(
    bus: Bus, room: game.Room, rnd: game.Round
) -> None:
    players = [await game.create_player(bus, f"P{n:03d}" + "x" * 55, n + 1) for n in range(150)]
    async with trio.open_nursery() as nursery:
        feed, base = await start_feed(nursery, bus, top_n=150, ping_interval_s=0.2,
                                      ping_timeout_s=0.5)  # fmt: skip
        stream = await _raw_viewer(int(base.rsplit(":", 1)[1]), room.id, rcvbuf=4096)
        await wait_for(lambda: feed.statistics().viewers == 1)
        for n in range(1500):  # far more than its socket buffers hold; it never reads
            await board.record(bus, room.id, rnd.id, players[n % 150].id, 1 + n * 99 // 1500)
        await wait_for(lambda: feed.statistics().viewers == 0, timeout=30)
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_a_change_whose_message_was_lost_reaches_viewers_by_resync(
    bus: Bus, room: game.Room, rnd: game.Round
) -> None:
    # Pub/sub loses what is published while the subscriber's connection is down (a server
    # restart). Here the change is written with no message at all: the resync finds it.
    alice = await game.create_player(bus, "Alice", 1)
    async with trio.open_nursery() as nursery:
        feed, base = await start_feed(nursery, bus, resync_s=0.2)
        async with open_websocket_url(f"{base}/rooms/{room.id}") as ws:
            assert json.loads(await ws.get_message())["top"] == []
            key = board.round_board(room.id, rnd.id).key
            await bus.transport.command("ZADD", key, str(70 * 10**13), alice.id)  # no PUBLISH
            with trio.fail_after(10):
                update = json.loads(await ws.get_message())
            assert [(s["name"], s["percentage"]) for s in update["top"]] == [("Alice", 70)]
            sent = feed.statistics().updates_sent
            await trio.sleep(1.0)  # five resyncs with nothing new
            assert feed.statistics().updates_sent == sent, "a resync pushed an unchanged board"
        nursery.cancel_scope.cancel()


async def test_a_stop_sends_every_viewer_a_going_away_close(bus: Bus, room: game.Room) -> None:
    # The viewers' connections live outside the feed's nursery, so they see what the feed does
    # as its nursery is cancelled. The deadline is far off: the feed is done as soon as the
    # viewers have answered the close, not when the deadline passes.
    feed = Feed(bus, goodbye_s=60)
    async with trio.open_nursery() as viewers_nursery:
        with trio.fail_after(10):
            async with trio.open_nursery() as feed_nursery:
                port = await feed_nursery.start(feed.serve, "127.0.0.1", 0)
                url = f"ws://127.0.0.1:{port}/rooms/{room.id}"
                viewers = [await connect_websocket_url(viewers_nursery, url) for _ in range(3)]
                for ws in viewers:
                    assert json.loads(await ws.get_message())["room"] == room.id
                feed_nursery.cancel_scope.cancel()
        for ws in viewers:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            reason = closed.value.reason
            assert reason is not None
            assert (reason.code, reason.reason) == (GOODBYE_CODE, GOODBYE_REASON)
            assert GOODBYE_CODE == 1001  # going away
        assert feed.statistics().viewers == 0
        viewers_nursery.cancel_scope.cancel()


async def test_a_viewer_that_never_answers_the_close_is_cut_at_the_deadline(
    bus: Bus, room: game.Room
) -> None:
    feed = Feed(bus, goodbye_s=0.5)
    with trio.fail_after(10):
        async with trio.open_nursery() as feed_nursery:
            port = await feed_nursery.start(feed.serve, "127.0.0.1", 0)
            stream = await _raw_viewer(port, room.id)  # completes the handshake, never answers
            await wait_for(lambda: feed.statistics().viewers == 1)
            feed_nursery.cancel_scope.cancel()
    received = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some():  # until the feed closes the connection
            received += chunk
    await stream.aclose()
    reason = GOODBYE_REASON.encode()
    close_frame = bytes([0x88, 2 + len(reason)]) + GOODBYE_CODE.to_bytes(2, "big") + reason
    assert received.endswith(close_frame), received[-80:]


async def test_a_new_round_pushes_a_fresh_board_and_an_ended_one_shows_final(
    bus: Bus, room: game.Room
) -> None:
    alice = await game.create_player(bus, "Alice", 1)
    async with trio.open_nursery() as nursery:
        _, base = await start_feed(nursery, bus, resync_s=60)  # only what is published arrives
        async with open_websocket_url(f"{base}/rooms/{room.id}") as ws:
            first = json.loads(await ws.get_message())
            assert (first["round"], first["open"], first["top"]) == (None, False, [])

            async def next_board() -> dict[str, object]:
                with trio.fail_after(10):
                    return dict(json.loads(await ws.get_message()))

            one = await game.start_round(bus, room.id, starts_in_ms=0)
            assert (await next_board())["round"] == one.id
            await game.guess(bus, room.id, alice.id, one.secret)
            played = await next_board()
            assert [(s["name"], s["percentage"]) for s in played["top"]] == [("Alice", 100)]
            await game.end_round(bus, room.id)
            final = await next_board()
            assert (final["round"], final["open"], final["top"]) == (one.id, False, played["top"])
            two = await game.start_round(bus, room.id, starts_in_ms=0)
            fresh = await next_board()
            assert (fresh["round"], fresh["open"], fresh["top"]) == (two.id, True, [])
        nursery.cancel_scope.cancel()


async def test_a_snapshot_shows_the_round_in_play_and_its_secret_once_over(
    bus: Bus, room: game.Room
) -> None:
    alice = await game.create_player(bus, "Alice", 31)
    bob = await game.create_player(bus, "Bob", 32)
    played = await game.start_round(bus, room.id, starts_in_ms=0, lasts_ms=30_000)
    for player, pct in ((alice, 40), (alice, 30), (bob, 50)):
        await board.record(bus, room.id, played.id, player.id, pct)
    feed = Feed(bus)
    shown = await feed.snapshot(room.id)
    assert shown["clue"] == "".join(ALPHABET)
    assert shown["ends_at_ms"] - shown["starts_at_ms"] == 30_000
    assert (shown["guesses"], shown["players"], shown["secret"]) == (3, 2, None)
    await game.end_round(bus, room.id)
    over = await feed.snapshot(room.id)
    assert over["secret"] == "".join(played.secret) and over["guesses"] == 3
    unplanned = await game.start_round(bus, room.id, starts_in_ms=0)
    fresh = await feed.snapshot(room.id)
    assert (fresh["round"], fresh["ends_at_ms"], fresh["guesses"]) == (unplanned.id, None, 0)
    with pytest.raises(game.GameError, match="lasts_ms"):
        await game.start_round(bus, room.id, lasts_ms=0)
