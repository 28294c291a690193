"""The page server: the live leaderboard page (one static file in the package), plus the two
small JSON documents it reads (``config.json``: where the feed is, and the server's clock, so
the page counts a round's time down on it; ``rooms.json``). A tiny ASGI
app on hypercorn, on trio. Given a bus dashboard (``echomq_trio.dashboard.Dashboard``), it
serves it under ``/bus/`` (``/bus`` redirects there).

``rooms.json`` is one page of rooms (``rooms.room_page``), so its cost does not grow with the
number of rooms: ``?count=<n>`` rooms (1-``MAX_ROOM_PAGE``, default ``DEFAULT_ROOM_PAGE``) after
the cursor ``?after=<room id>`` (none: from the first), answered as ``{"rooms": [{"id",
"title"}], "next": <cursor or null>}``; the next page is ``?after=<next>``. A parameter that is
malformed, repeated or unknown is answered 400 with ``{"error": "<what is wrong>"}``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

import trio

from codemojex.game.rooms import DEFAULT_ROOM_PAGE, MAX_ROOM_PAGE, room_page
from codemojex.game.rules import GameError
from codemojex.store import server_time_ms
from echomq_trio import Bus, BusError
from servicekit.asgi import Response, answer, serve_app

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

    from codemojex.metrics import ServiceMetrics
    from echomq_trio.dashboard import Dashboard

__all__ = ["DASHBOARD_PATH", "PageServer", "Route", "page_parameters"]

Route = Callable[["HTTPScope", "ASGIReceiveCallable"], Awaitable[Response]]
"""An extra path's handler: the request's scope and body stream in, the response out."""

DASHBOARD_PATH = "/bus"  # where the bus dashboard is mounted
PAGE = (resources.files("codemojex.game") / "web" / "index.html").read_bytes()
# The game's emoji for browsers without an emoji font (a Noto Color Emoji subset, OFL 1.1:
# web/OFL.txt; tools/emoji_font.py makes it).
EMOJI_FONT = (resources.files("codemojex.game") / "web" / "emoji.ttf").read_bytes()


_JSON = b"application/json"
_PAGE_PARAMETERS = ("after", "count")


def _fresh(status: int, content_type: bytes, body: bytes) -> Response:
    """An answer the browser must not cache (the rooms change; the page is the service's)."""
    return Response(status, content_type, body, [(b"cache-control", b"no-store")])


def _error(status: int, message: str) -> Response:
    return _fresh(status, _JSON, json.dumps({"error": message}).encode())


def page_parameters(query: bytes) -> tuple[str | None, int]:
    """The cursor and count a ``rooms.json`` query asks for; ``GameError`` saying what is wrong
    with it otherwise (the cursor itself is checked by ``room_page``)."""
    try:
        pairs = parse_qsl(query.decode("ascii"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise GameError("the query must be ASCII") from None
    given: dict[str, str] = {}
    for name, value in pairs:
        if name not in _PAGE_PARAMETERS:
            raise GameError(f"unknown parameter {name!r}: use after and count")
        if name in given:
            raise GameError(f"parameter {name} given twice")
        given[name] = value
    count_text = given.get("count", str(DEFAULT_ROOM_PAGE))
    if not count_text.isascii() or not count_text.isdigit() or len(count_text) > 6:
        raise GameError(f"count must be an integer 1-{MAX_ROOM_PAGE}")
    return given.get("after"), int(count_text)


class PageServer:
    """Serve with ``url = await nursery.start(pages.serve, host, port)``."""

    def __init__(
        self,
        bus: Bus,
        feed_port: int,
        metrics: ServiceMetrics | None = None,
        dashboard: Dashboard | None = None,
        routes: Mapping[str, Route] | None = None,
    ) -> None:
        self.bus = bus
        self.feed_port = feed_port
        self.metrics = metrics  # answers /metrics (codemojex.metrics)
        self.dashboard = dashboard  # answers /bus/ (its sampler runs elsewhere: Dashboard.run)
        self.routes = dict(routes or {})  # more paths: the Telegram webhook (codemojex.chat)

    async def app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if self.dashboard is not None and scope["type"] == "http":
            path = scope["path"]
            if path == DASHBOARD_PATH or path.startswith(DASHBOARD_PATH + "/"):
                root = scope.get("root_path", "") + DASHBOARD_PATH
                mounted = {**scope, "path": path[len(DASHBOARD_PATH) :], "root_path": root}
                await self.dashboard.app(mounted, receive, send)  # type: ignore[arg-type]
                return
        await answer(scope, receive, send, self._answer)

    async def _answer(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> Response:
        path = scope["path"]
        if path in self.routes:
            return await self.routes[path](scope, receive)
        if path in ("/", "/index.html"):
            return _fresh(200, b"text/html; charset=utf-8", PAGE)
        if path == "/emoji.ttf":
            cache = [(b"cache-control", b"public, max-age=86400")]
            return Response(200, b"font/ttf", EMOJI_FONT, cache)
        if path == "/config.json":
            try:
                now = await server_time_ms(self.bus)
            except BusError:
                now = None  # the page falls back to its own clock
            config = {"ws_port": self.feed_port, "server_now_ms": now}
            return _fresh(200, _JSON, json.dumps(config).encode())
        if path == "/rooms.json":
            return await self._rooms(scope["query_string"])
        if path == "/metrics" and self.metrics is not None:
            return await self.metrics.response()
        return _fresh(404, b"text/plain", b"not found")

    async def _rooms(self, query: bytes) -> Response:
        try:
            after, count = page_parameters(query)
            page = await room_page(self.bus, after, count)
        except GameError as exc:
            return _error(400, str(exc))
        except BusError:  # the server is restarting: the page retries
            return _error(503, "the server is unavailable")
        rooms = [{"id": r.id, "title": r.title} for r in page.rooms]
        return _fresh(200, _JSON, json.dumps({"rooms": rooms, "next": page.next}).encode())

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await serve_app(
            self.app, host, port, "codemojex.game.page.hypercorn", task_status=task_status
        )
