"""Webhook mode: Telegram POSTs each update to the service, which admits it to the bus and
answers 200 only after that (an answer that is not 2xx, or none, makes Telegram send it again;
the update id as idempotency key makes the second admission a ``DUPLICATE``).

The endpoint (``WEBHOOK_PATH`` on the page server) refuses, before it reads or admits
anything: a method other than POST (405), a request without the secret ``setWebhook`` was given
in ``X-Telegram-Bot-Api-Secret-Token`` (401; compared in constant time), and a body over
``MAX_UPDATE_BYTES`` (413, by its declared length or as it is read). A body that is not an
update is 400; a bus that is away is 503 (Telegram tries again later).

``register_webhook`` calls ``setWebhook`` with the public URL, a fresh secret and the kinds of
update the game reads. The secret is made anew at each start (``new_secret``) and never
printed or logged.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

from codemojex.chat.intake import ALLOWED_UPDATES, UPDATES_QUEUE, admit
from codemojex.chat.poller import TelegramRefused
from codemojex.telegram.bot import TelegramBot
from echomq_trio import Bus, BusError
from servicekit.asgi import BodyTooLarge, Response, read_body

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, HTTPScope

__all__ = [
    "MAX_UPDATE_BYTES",
    "SECRET_HEADER",
    "WEBHOOK_PATH",
    "Webhook",
    "new_secret",
    "register_webhook",
]

WEBHOOK_PATH = "/telegram/webhook"
SECRET_HEADER = b"x-telegram-bot-api-secret-token"
MAX_UPDATE_BYTES = 256 * 1024  # a Telegram update is a few KB; a message's text at most 4096 chars


def new_secret() -> str:
    """A ``secret_token`` as Telegram allows it: 1-256 of ``A-Z a-z 0-9 _ -`` (here 43)."""
    return secrets.token_urlsafe(32)


def _json(status: int, body: object) -> Response:
    return Response(status, b"application/json", json.dumps(body).encode())


def _refuse(status: int, error: str) -> Response:
    """An answer given before the body was read: the connection closes with it, so no client
    sends its next request after a body the server never read."""
    body = json.dumps({"error": error}).encode()
    return Response(status, b"application/json", body, [(b"connection", b"close")])


class Webhook:
    """The endpoint: ``await webhook.answer(scope, receive)`` for a request to its path."""

    def __init__(
        self,
        bus: Bus,
        bot_id: int,
        secret: str,
        *,
        queue: str = UPDATES_QUEUE,
        max_bytes: int = MAX_UPDATE_BYTES,
    ) -> None:
        self.bus = bus
        self.bot_id = bot_id
        self._secret = secret.encode()
        self.queue = queue
        self.max_bytes = max_bytes
        self.admitted = 0
        self.refused = 0

    async def answer(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> Response:
        response = await self._answer(scope, receive)
        if response.status != 200:
            self.refused += 1
        return response

    async def _answer(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> Response:
        if scope["method"] != "POST":
            return _refuse(405, "POST only")
        headers = dict(scope["headers"])
        if not hmac.compare_digest(headers.get(SECRET_HEADER, b""), self._secret):
            return _refuse(401, "wrong or missing secret token")
        declared = headers.get(b"content-length", b"0")
        too_large = f"an update is at most {self.max_bytes} bytes"
        if not declared.isdigit() or int(declared) > self.max_bytes:
            return _refuse(413, too_large)
        try:
            body = await read_body(receive, self.max_bytes)
        except BodyTooLarge:
            return _refuse(413, too_large)
        if body is None:
            return _json(400, {"error": "the client went away"})
        try:
            update = json.loads(body)
            if not isinstance(update, Mapping):
                raise ValueError("not a JSON object")
            await admit(self.bus, update, self.bot_id, queue=self.queue)
        except (UnicodeDecodeError, ValueError) as exc:
            return _json(400, {"error": f"not an update: {exc}"})
        except BusError:
            return _json(503, {"error": "the server is unavailable; send it again"})
        self.admitted += 1
        return _json(200, {"ok": True})


async def register_webhook(bot: TelegramBot, url: str, secret: str) -> None:
    """``setWebhook`` with ``url``, ``secret`` and the kinds of update the game reads;
    ``TelegramRefused`` (one line, token redacted) when Telegram refuses."""
    status, body = await bot.call(
        "setWebhook",
        {"url": url, "secret_token": secret, "allowed_updates": list(ALLOWED_UPDATES)},
    )
    if status != 200 or not isinstance(body, Mapping) or not body.get("ok"):
        description = body.get("description") if isinstance(body, Mapping) else body
        raise TelegramRefused(bot.redact(f"Telegram refused setWebhook ({status}): {description}"))
