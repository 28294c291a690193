"""The page server: the live leaderboard page (one static file in the package), plus the two
small JSON documents it reads (``config.json``: where the feed is; ``rooms.json``). A tiny ASGI
app on hypercorn, on trio."""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING

import trio

from codemojex.asgi import answer_lifespan, serve_app
from codemojex.game.rooms import list_rooms
from echomq_trio import Bus, BusError

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope

__all__ = ["PageServer"]

PAGE = (resources.files("codemojex.game") / "web" / "index.html").read_bytes()


class PageServer:
    """Serve with ``url = await nursery.start(pages.serve, host, port)``."""

    def __init__(self, bus: Bus, feed_port: int) -> None:
        self.bus = bus
        self.feed_port = feed_port

    async def app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path in ("/", "/index.html"):
            status, kind, body = 200, b"text/html; charset=utf-8", PAGE
        elif path == "/config.json":
            status, kind = 200, b"application/json"
            body = json.dumps({"ws_port": self.feed_port}).encode()
        elif path == "/rooms.json":
            status, kind = 200, b"application/json"
            try:
                rooms = await list_rooms(self.bus)
            except BusError:  # the server is restarting: the page retries
                status, body = 503, json.dumps({"error": "the server is unavailable"}).encode()
            else:
                body = json.dumps([{"id": r.id, "title": r.title} for r in rooms]).encode()
        else:
            status, kind, body = 404, b"text/plain", b"not found"
        headers = [(b"content-type", kind), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

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
