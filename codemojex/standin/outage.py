"""``Outage``: Telegram down for every chat, on a switch. An ASGI app in front of a stand-in's:
while ``down`` it answers every request (``sendMessage``, ``getMe``, anything) as Telegram's
front proxy does in an outage, 502 with an HTML page, and otherwise passes the request on.
``open_outage(stand_in)`` serves the pair on loopback for the length of a block."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from codemojex.asgi import serve_app
from codemojex.standin.bot_api import TelegramStandIn, proxy_page

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope

__all__ = ["BAD_GATEWAY_PAGE", "Outage", "open_outage"]

BAD_GATEWAY_PAGE = proxy_page(502)  # the page of the proxy in front of the Bot API


class Outage:
    def __init__(self, stand_in: TelegramStandIn) -> None:
        self.stand_in = stand_in
        self.down = False
        self.refused = 0  # requests answered with the 502 page
        self.refused_sends = 0  # of them, sendMessage (the rest are probes, getMe)
        self.api_url = ""  # set while served by ``open_outage``

    async def app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] != "http" or not self.down:
            await self.stand_in.app(scope, receive, send)
            return
        self.refused += 1
        if str(scope["path"]).endswith("/sendMessage"):
            self.refused_sends += 1
        headers = [(b"content-type", b"text/html"),
                   (b"content-length", str(len(BAD_GATEWAY_PAGE)).encode())]  # fmt: skip
        await send({"type": "http.response.start", "status": 502, "headers": headers})
        await send({"type": "http.response.body", "body": BAD_GATEWAY_PAGE, "more_body": False})


@asynccontextmanager
async def open_outage(stand_in: TelegramStandIn) -> AsyncIterator[Outage]:
    """Serve ``stand_in`` behind an ``Outage`` switch (``outage.api_url``) for the block."""
    outage = Outage(stand_in)
    async with trio.open_nursery() as nursery:
        outage.api_url = await nursery.start(
            serve_app, outage.app, "127.0.0.1", 0, "codemojex.standin.outage"
        )
        try:
            yield outage
        finally:
            nursery.cancel_scope.cancel()
