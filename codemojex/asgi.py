"""Serve a small ASGI app on trio with hypercorn, quietly (no access log, warnings only), for
the page server and the Bot API stand-in."""

from __future__ import annotations

import logging
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

__all__ = ["answer_lifespan", "serve_app"]


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
