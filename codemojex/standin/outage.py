"""``OutageSwitch``: Telegram failing every chat alike, while switched on. An ASGI app in front of a
stand-in's: while a ``mode`` is set it treats every request (``sendMessage``, ``getMe``,
anything) that way, and otherwise passes the request on. ``open_outage(stand_in)`` serves the
pair on loopback for the length of a block.

The modes, as they meet a bot in production:

* ``"bad_gateway"`` (``down = True``): Telegram's front proxy in an outage, 502 with an HTML page.
* ``"not_json"``: 200 with an HTML page (``NOT_JSON_PAGE``), as a captive portal or a filtering
  proxy answers; the request never reaches the Bot API.
* ``"truncated"``: the request reaches the Bot API (a message is delivered) but its answer is cut
  to half its length on the way back, as a proxy that gave up mid-body does (the
  ``content-length`` says the cut length, so the client reads a whole, short body).
* ``"hang"``: no answer at all while the mode lasts; when it is switched off, every held request
  gets the proxy's 504 page (the request never reached the Bot API). A client that gave up
  earlier gets nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import trio

from codemojex.standin.bot_api import TelegramStandIn, proxy_page
from servicekit.asgi import serve_app

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope

__all__ = ["BAD_GATEWAY_PAGE", "MODES", "NOT_JSON_PAGE", "Mode", "OutageSwitch", "open_outage"]

BAD_GATEWAY_PAGE = proxy_page(502)  # the page of the proxy in front of the Bot API
GATEWAY_TIMEOUT_PAGE = proxy_page(504)
NOT_JSON_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>Network notice</title></head>\n<body><h1>Network "
    b"notice</h1><p>Please accept the terms of use to continue.</p></body></html>\n"
)

Mode = Literal["bad_gateway", "not_json", "truncated", "hang"]
MODES: tuple[Mode, ...] = ("bad_gateway", "not_json", "truncated", "hang")


class OutageSwitch:
    """The switch in front of a stand-in (see the module): set ``mode`` (or ``down``) to fail
    every request alike, ``None`` to pass them on; it counts what it refused, cut and held."""

    def __init__(self, stand_in: TelegramStandIn) -> None:
        self.stand_in = stand_in
        self._mode: Mode | None = None
        self._switched = trio.Event()  # set (and replaced) at every switch: hung requests go
        self.refused = 0  # requests answered by the switch instead of the Bot API
        self.refused_sends = 0  # of them, sendMessage (the rest are probes, getMe, polls)
        self.cut = 0  # answers of the Bot API cut short ("truncated")
        self.cut_sends = 0  # of them, sendMessage: delivered, though the bot cannot know it
        self.hung = 0  # requests held without an answer ("hang")
        self.api_url = ""  # set while served by ``open_outage``

    @property
    def mode(self) -> Mode | None:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode | None) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} or None, got {mode!r}")
        self._mode = mode
        self._switched.set()
        self._switched = trio.Event()

    @property
    def down(self) -> bool:
        """Whether any mode is on; set ``True`` for ``"bad_gateway"``, ``False`` for none."""
        return self._mode is not None

    @down.setter
    def down(self, down: bool) -> None:
        self.mode = "bad_gateway" if down else None

    async def app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        mode = self._mode
        if scope["type"] != "http" or mode is None:
            await self.stand_in.app(scope, receive, send)
            return
        is_send = str(scope["path"]).lower().endswith("/sendmessage")
        if mode == "truncated":
            await self._truncated(scope, receive, send, is_send)
            return
        self.refused += 1
        self.refused_sends += is_send
        if mode == "hang":
            self.hung += 1
            while self._mode == "hang":
                await self._switched.wait()
            await _page(send, 504, GATEWAY_TIMEOUT_PAGE)
        elif mode == "not_json":
            await _page(send, 200, NOT_JSON_PAGE)
        else:
            await _page(send, 502, BAD_GATEWAY_PAGE)

    async def _truncated(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable, is_send: bool
    ) -> None:
        """The stand-in answers; its answer goes out cut to half its length."""
        start: dict[str, Any] = {}
        body = bytearray()

        async def keep(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))

        await self.stand_in.app(scope, receive, keep)
        self.cut += 1
        self.cut_sends += is_send
        cut = bytes(body[: len(body) // 2])
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(cut)).encode()))
        await send({"type": "http.response.start", "status": start.get("status", 200),
                    "headers": headers})  # fmt: skip
        await send({"type": "http.response.body", "body": cut, "more_body": False})


async def _page(send: ASGISendCallable, status: int, page: bytes) -> None:
    headers = [(b"content-type", b"text/html"), (b"content-length", str(len(page)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": page, "more_body": False})


@asynccontextmanager
async def open_outage(stand_in: TelegramStandIn) -> AsyncIterator[OutageSwitch]:
    """Serve ``stand_in`` behind an ``OutageSwitch`` (``outage.api_url``) for the block."""
    outage = OutageSwitch(stand_in)
    async with trio.open_nursery() as nursery:
        outage.api_url = await nursery.start(
            serve_app, outage.app, "127.0.0.1", 0, "codemojex.standin.outage"
        )
        try:
            yield outage
        finally:
            nursery.cancel_scope.cancel()
