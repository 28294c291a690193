"""The page server: the live leaderboard page (one static file in the package), plus the two
small JSON documents it reads (``config.json``: where the feed is; ``rooms.json``). A tiny ASGI
app on hypercorn, on trio."""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING

import trio

from codemojex.asgi import Response, answer, serve_app
from codemojex.game.rooms import list_rooms
from echomq_trio import Bus, BusError

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

    from codemojex.metrics import ServiceMetrics

__all__ = ["PageServer"]

PAGE = (resources.files("codemojex.game") / "web" / "index.html").read_bytes()


def _fresh(status: int, content_type: bytes, body: bytes) -> Response:
    """An answer the browser must not cache (the rooms change; the page is the service's)."""
    return Response(status, content_type, body, [(b"cache-control", b"no-store")])


class PageServer:
    """Serve with ``url = await nursery.start(pages.serve, host, port)``."""

    def __init__(self, bus: Bus, feed_port: int, metrics: ServiceMetrics | None = None) -> None:
        self.bus = bus
        self.feed_port = feed_port
        self.metrics = metrics  # answers /metrics (codemojex.metrics)

    async def app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        await answer(scope, receive, send, self._answer)

    async def _answer(self, scope: HTTPScope, _receive: ASGIReceiveCallable) -> Response:
        json_type = b"application/json"
        path = scope["path"]
        if path in ("/", "/index.html"):
            return _fresh(200, b"text/html; charset=utf-8", PAGE)
        if path == "/config.json":
            return _fresh(200, json_type, json.dumps({"ws_port": self.feed_port}).encode())
        if path == "/rooms.json":
            try:
                rooms = await list_rooms(self.bus)
            except BusError:  # the server is restarting: the page retries
                return _fresh(503, json_type, b'{"error": "the server is unavailable"}')
            body = json.dumps([{"id": r.id, "title": r.title} for r in rooms]).encode()
            return _fresh(200, json_type, body)
        if path == "/metrics" and self.metrics is not None:
            return await self.metrics.response()
        return _fresh(404, b"text/plain", b"not found")

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
