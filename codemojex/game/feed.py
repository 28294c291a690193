"""The live leaderboard feed: a websocket endpoint per room (``/rooms/<RMM id>``, trio-websocket)
that sends the top N of the room's current round on connect, then every change.

The board shown is the room's open round's (``rounds.latest_round``), else the last round it
ended, as final standings, while that round is kept; a new round replaces it with its empty
board. Changes come through the server: ``board.record`` publishes on ``cm:board:<room>``, and
so do the scripts that open and close a round, so a score or a new round from any process
reaches every viewer. One subscriber task marks rooms dirty; one refresher reads each dirty
room's top N once and hands it to each viewer's ``Latest`` slot, so a slow viewer gets the
newest board, never a backlog, and never slows the others. A ping per viewer every
``ping_interval_s`` drops dead connections. Each viewer costs three tasks: one sends, one pings,
one reads (viewers send nothing, but reading notices a close); the feed's stop cancels them
all through ``_scopes``.

Pub/sub is fire-and-forget: a change published while the subscription's connection is down (the
server restarting) reaches nobody. So every ``resync_s`` the refresher also re-reads each watched
room, and pushes a board only when it differs from the last one pushed, so viewers heal within
``resync_s`` of any lost message at the cost of one small read per watched room.

Goodbyes: when ``serve`` is cancelled, each viewer is sent a close frame, 1001 (going away) with
a reason, and its connection ends when the viewer answers it, as the websocket protocol has it,
instead of being dropped (which a browser reports as 1006). The connections live in a cancel
scope of their own, shielded so that they outlast the cancellation long enough to say goodbye:
the moment ``serve`` stops, that scope gets a deadline ``goodbye_s`` away, and it ends earlier
as soon as the last viewer has gone.

Memory: ``_viewers`` holds one ``Latest`` per connected viewer (bounded by the open connections:
the process's file descriptors), under the room it watches, and ``_scopes`` each viewer's cancel
scope; ``_pushed`` and ``_dirty`` hold one entry per watched room. A viewer is dropped from
them as it leaves, a room when its last viewer leaves.

Messages are JSON: ``{"room", "title", "round", "open", "clue", "starts_at_ms", "ends_at_ms",
"guesses", "players", "secret", "top": [{"rank", "player", "name", "percentage"}]}``: ``round``
is the round whose board ``top`` is (``null`` when the room has none to show, with ``top``
empty), ``open`` whether it is still being played; ``clue`` the emojis to guess from,
``starts_at_ms``/``ends_at_ms`` the round's start and planned end (server ms; ``ends_at_ms``
``null`` when the round has no planned end), ``guesses`` how many guesses it had and
``players`` how many players are on its board, ``secret`` the six emojis once it has ended.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    serve_websocket,
)

from codemojex import ids
from codemojex.game import board
from codemojex.game.latest import Latest
from codemojex.game.rooms import get_room, player_names
from codemojex.game.rounds import latest_round, round_view
from codemojex.game.rules import GameError
from codemojex.game.scoring import ALPHABET
from codemojex.stats import added
from echomq_trio import Bus, BusError

__all__ = ["GOODBYE_CODE", "GOODBYE_REASON", "Feed", "FeedStats"]

log = logging.getLogger("codemojex.game.feed")

GOODBYE_CODE = 1001  # going away (RFC 6455, 7.4.1)
GOODBYE_REASON = "the leaderboard feed is stopping"


@attrs.frozen
class FeedStats:
    """A snapshot from ``Feed.statistics()``."""

    viewers: int = 0  # connected now
    rooms: int = 0  # rooms watched now
    updates_sent: int = 0  # boards sent to viewers, first ones included
    boards_skipped: int = 0  # boards a slow viewer never saw: a newer one replaced them


class Feed:
    """Serve with ``port = await nursery.start(feed.serve, host, port)``."""

    def __init__(
        self,
        bus: Bus,
        *,
        top_n: int = 10,
        ping_interval_s: float = 10.0,
        ping_timeout_s: float = 10.0,
        resync_s: float = 5.0,
        goodbye_s: float = 1.0,
    ) -> None:
        self.bus = bus
        self.top_n = top_n
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self.resync_s = resync_s
        self.goodbye_s = goodbye_s  # on stop, the longest the viewers get to answer the close
        # Bounded by the viewers connected now (see the module's docstring).
        self._viewers: dict[str, set[Latest[str]]] = {}  # watched room -> its viewers
        self._pushed: dict[str, str] = {}  # watched room -> the last board pushed
        self._dirty: set[str] = set()  # watched rooms to read again
        self._wake = trio.Event()
        self._stats = FeedStats()
        self._stopping = trio.Event()  # set as ``serve`` stops: viewers say goodbye
        self._connections = trio.CancelScope()  # the websocket server's, while it serves
        self._scopes: set[trio.CancelScope] = set()  # each connected viewer's, to stop it

    def statistics(self) -> FeedStats:
        viewers = sum(len(v) for v in self._viewers.values())
        return attrs.evolve(self._stats, viewers=viewers, rooms=len(self._viewers))

    async def snapshot(self, room_id: str) -> dict[str, Any]:
        room = await get_room(self.bus, room_id)
        shown = await latest_round(self.bus, room_id)
        standings = [] if shown is None else await board.top(
            self.bus, board.round_board(room_id, shown.id), self.top_n
        )  # fmt: skip
        names = await player_names(self.bus, [s.player for s in standings])
        view = None if shown is None else await round_view(self.bus, room_id, shown.id)
        players = 0 if shown is None else await board.size(
            self.bus, board.round_board(room_id, shown.id)
        )  # fmt: skip
        return {
            "room": room_id,
            "title": room.title,
            "round": None if shown is None else shown.id,
            "open": shown is not None and shown.open,
            "clue": "".join(ALPHABET),
            "starts_at_ms": None if view is None else view.starts_at_ms,
            "ends_at_ms": None if view is None else view.ends_at_ms,
            "guesses": 0 if view is None else view.guesses,
            "players": players,
            "secret": None if view is None else view.secret,
            "top": [
                {"rank": s.rank, "player": s.player, "name": names.get(s.player, s.player),
                 "percentage": s.percentage}
                for s in standings
            ],
        }  # fmt: skip

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self._stopping = trio.Event()
        # Shielded, so that the connections outlast a cancellation; the ``finally`` below, which
        # runs however ``serve`` ends, gives the shield its deadline.
        self._connections = trio.CancelScope(shield=True)
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(self._subscribe)
                nursery.start_soon(self._refresh)
                nursery.start_soon(self._resync)
                server = await nursery.start(self._serve_connections, host, port)
                task_status.started(server.port)
                await trio.sleep_forever()
            finally:
                self._connections.deadline = trio.current_time() + self.goodbye_s
                self._stopping.set()
                for scope in self._scopes:
                    scope.cancel()  # each viewer then says goodbye
                if not self._viewers:
                    self._connections.cancel()

    async def _serve_connections(
        self, host: str, port: int, *, task_status: trio.TaskStatus[WebSocketServer]
    ) -> None:
        with self._connections:
            await serve_websocket(
                self._handle,
                host,
                port,
                None,
                disconnect_timeout=2.0,
                connect_timeout=10.0,
                task_status=task_status,
            )

    async def _subscribe(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with self.bus.subscribe(patterns=[board.FEED_PATTERN]) as sub:
            task_status.started()
            async for message in sub:
                room = message.data.decode(errors="replace")
                if room in self._viewers:
                    self._dirty.add(room)
                    self._wake.set()

    async def _resync(self) -> None:
        while True:
            await trio.sleep(self.resync_s)
            if self._viewers:
                self._dirty.update(self._viewers)
                self._wake.set()

    async def _refresh(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            rooms, self._dirty = self._dirty, set()
            for room in rooms:
                if room not in self._viewers:
                    continue
                try:
                    text = json.dumps(await self.snapshot(room))
                except (BusError, GameError) as exc:
                    log.warning("feed refresh of %s failed: %s", room, exc)
                    continue
                viewers = self._viewers.get(room)  # as they are now, after the read
                if not viewers:
                    continue  # its last viewer left meanwhile: nothing to keep for it
                if self._pushed.get(room) == text:
                    continue  # a resync that found nothing new
                self._pushed[room] = text
                skipped = sum(latest.put(text) for latest in viewers)
                self._stats = added(self._stats, boards_skipped=skipped)

    async def _handle(self, request: WebSocketRequest) -> None:
        if self._stopping.is_set():
            await request.reject(503, body=b"the feed is stopping")
            return
        parts = request.path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "rooms" or not ids.is_valid(parts[1], ids.ROOM):
            await request.reject(404, body=b"use /rooms/<room id>")
            return
        room = parts[1]
        try:
            # The board its room's viewers have, else the room's read now.
            first = self._pushed.get(room) or json.dumps(await self.snapshot(room))
        except GameError:
            await request.reject(404, body=b"no such room")
            return
        except BusError as exc:
            log.warning("feed snapshot of %s failed: %s", room, exc)
            await request.reject(503, body=b"the server is unavailable")
            return
        ws = await request.accept()
        latest: Latest[str] = Latest()
        latest.put(first)
        self._viewers.setdefault(room, set()).add(latest)
        self._pushed.setdefault(room, first)  # what the room's viewers have
        scope = trio.CancelScope()  # cancelled when the viewer's connection is done
        self._scopes.add(scope)  # or when the feed stops
        if self._stopping.is_set():
            scope.cancel()
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._ping, ws, scope)
                    nursery.start_soon(self._drain_incoming, ws, scope)
                    nursery.start_soon(self._send_updates, ws, latest, scope)
            if self._stopping.is_set():
                # Returns when the viewer answers the close (or at once if it had gone); the
                # connections' deadline bounds the wait.
                await ws.aclose(GOODBYE_CODE, GOODBYE_REASON)
        finally:
            self._scopes.discard(scope)
            viewers = self._viewers.get(room)
            if viewers is not None:
                viewers.discard(latest)
                if not viewers:
                    del self._viewers[room]
                    self._pushed.pop(room, None)
                    self._dirty.discard(room)
            if self._stopping.is_set() and not self._viewers:
                self._connections.cancel()  # every viewer has said goodbye

    # Each of these ends the viewer's nursery when its connection is done; none lets a closed
    # connection's error out, so one viewer's trouble never reaches the server or the others.

    async def _send_updates(
        self, ws: WebSocketConnection, latest: Latest[str], scope: trio.CancelScope
    ) -> None:
        try:
            while True:
                await ws.send_message(await latest.get())
                self._stats = added(self._stats, updates_sent=1)
        except (ConnectionClosed, trio.BrokenResourceError):
            scope.cancel()

    async def _ping(self, ws: WebSocketConnection, scope: trio.CancelScope) -> None:
        try:
            while True:
                await trio.sleep(self.ping_interval_s)
                with trio.move_on_after(self.ping_timeout_s) as timeout:
                    await ws.ping()
                if timeout.cancelled_caught:
                    log.info("feed viewer did not answer a ping; dropping it")
                    break
        except (ConnectionClosed, trio.BrokenResourceError):
            pass
        scope.cancel()  # the connection is torn down as the handler returns

    async def _drain_incoming(self, ws: WebSocketConnection, scope: trio.CancelScope) -> None:
        # Viewers send nothing we need; reading notices a close.
        try:
            while True:
                await ws.get_message()
        except (ConnectionClosed, trio.BrokenResourceError):
            scope.cancel()
