"""Serve a small ASGI app on trio with hypercorn, quietly (no access log, warnings only), for
the bus dashboard, codemojex's page server and its Bot API stand-in; ``answer`` is the plumbing
these apps share: lifespan events answered, other non-HTTP scopes ignored, and an HTTP request
answered with the ``Response`` a handler returns."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

__all__ = ["BodyTooLarge", "Response", "answer", "answer_lifespan", "read_body", "serve_app"]


@attrs.frozen
class Response:
    status: int
    content_type: bytes
    body: bytes
    headers: Sequence[tuple[bytes, bytes]] = ()  # more than the content type


async def answer(
    scope: Scope,
    receive: ASGIReceiveCallable,
    send: ASGISendCallable,
    handle: Callable[[HTTPScope, ASGIReceiveCallable], Awaitable[Response]],
) -> None:
    """Answer one ASGI call: an HTTP request with what ``handle`` returns for it."""
    if scope["type"] == "lifespan":
        await answer_lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    response = await handle(scope, receive)
    headers = [(b"content-type", response.content_type), *response.headers]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body, "more_body": False})


class BodyTooLarge(Exception):
    """A request body over the limit ``read_body`` was given (answer it 413)."""


async def read_body(receive: ASGIReceiveCallable, limit: int) -> bytes | None:
    """A request's body, read only up to ``limit`` bytes (``BodyTooLarge`` past them), or
    ``None`` when the client went away."""
    body = bytearray()
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            return None
        if event["type"] != "http.request":
            continue
        body += event.get("body", b"")
        if len(body) > limit:
            raise BodyTooLarge(f"request body over {limit} bytes")
        if not event.get("more_body", False):
            return bytes(body)


async def answer_lifespan(receive: Any, send: Any) -> None:
    """Answer the server's lifespan events (these apps need no start-up or shut-down work)."""
    while True:
        event = await receive()
        if event["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif event["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def serve_app(
    app: Any,
    host: str,
    port: int,
    logger_name: str,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` (0: a free port) until cancelled; ``task_status.started``
    gets the base URL with the real port."""
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    quiet = logging.getLogger(logger_name)
    quiet.setLevel(logging.WARNING)
    config.errorlog = quiet
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, app, config)
        if not binds:
            raise RuntimeError("hypercorn bound no address")
        task_status.started(binds[0])
