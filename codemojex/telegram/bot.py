"""``TelegramBot``: ``sendMessage`` over one pooled ``httpx`` client on trio, with timeouts,
answers classified by ``codemojex.telegram.classify``. The bot token is never logged: it is
redacted from httpx's request log lines and from every error text this module produces.

Not every answer is the Bot API's JSON: a 502 or 504 from the proxy in front of it is an HTML
page, a captive portal answers 200 with its own page, a proxy may cut a body short, and a 429
may carry only a ``Retry-After`` header. Such an answer is read as ``Garbled`` (``garbled``): its
status, what it was (``not JSON (text/html, "502 Bad Gateway")``) and the header's seconds, which
``classify`` retries as a 5xx (see ``codemojex.telegram.classify``).

The bot keeps the requests it has in flight (``unanswered()``: the oldest, with its method, chat
and start) and the last answer that was the Bot API's (``last_answer``: when, and how long it
took), so that the worker's watch (``codemojex.notify.outage``) can tell a Telegram that hangs.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import trio

from codemojex.telegram.classify import (
    Garbled,
    Verdict,
    classify,
    classify_error,
    is_bot_api,
    not_bot_api,
)

__all__ = ["DEFAULT_API_URL", "Answer", "InFlight", "TelegramBot", "garbled", "open_bot"]

DEFAULT_API_URL = "https://api.telegram.org"


class _Redact(logging.Filter):
    """Replaces a token in log records of the ``httpx`` logger."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        if self.token in record.getMessage():
            record.msg = record.getMessage().replace(self.token, "<token>")
            record.args = ()
        return True


@attrs.frozen
class InFlight:
    """A request the bot has sent and has no answer to yet: since ``started`` (trio's clock, s)
    and ``started_ms`` (Unix ms, for people)."""

    method: str
    chat: int | None
    started: float
    started_ms: int

    def describe(self) -> str:
        return self.method if self.chat is None else f"{self.method} to chat {self.chat}"


@attrs.frozen
class Answer:
    """An answer of the Bot API's: when it came (trio's clock, s), and how long it ``waited``."""

    at: float
    waited: float


class TelegramBot:
    """A bot speaking the Bot API at ``api_url`` (the real one, or a local stand-in)."""

    def __init__(
        self, token: str, client: httpx.AsyncClient, api_url: str, timeout_s: float = 10.0
    ) -> None:
        self._token = token
        self._client = client
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s  # the client's: the longest a request waits for its answer
        # Requests in flight, oldest first (a dict keeps its insertion order): at most the
        # client's connections, plus those waiting for one.
        self._in_flight: dict[int, InFlight] = {}
        self._keys = itertools.count()
        self.last_answer: Answer | None = None  # the last answer of the Bot API's

    def redact(self, text: str) -> str:
        return text.replace(self._token, "<token>")

    def unanswered(self) -> InFlight | None:
        """The oldest request in flight, if any."""
        return next(iter(self._in_flight.values()), None)

    async def _post(self, method: str, params: Mapping[str, Any]) -> tuple[httpx.Response, Any]:
        """The response and its body decoded (``None``: not JSON), kept in flight meanwhile."""
        key = next(self._keys)
        chat = params.get("chat_id")
        chat = chat if isinstance(chat, int) else None
        started = trio.current_time()
        self._in_flight[key] = InFlight(method, chat, started, time.time_ns() // 10**6)
        try:
            response = await self._client.post(f"/bot{self._token}/{method}", json=dict(params))
        finally:
            del self._in_flight[key]
        body = _json(response)
        if is_bot_api(body):
            now = trio.current_time()
            self.last_answer = Answer(now, now - started)
        return response, body

    async def call(self, method: str, params: Mapping[str, Any]) -> tuple[int, Any]:
        """POST a Bot API method; ``(status, decoded JSON or None)``. Raises ``httpx`` errors."""
        response, body = await self._post(method, params)
        return response.status_code, body

    async def send_message(self, chat_id: int, text: str, **opts: Any) -> Verdict:
        """Send ``text`` to ``chat_id`` (extra Bot API fields in ``opts``, such as
        ``parse_mode``) and classify the answer; never raises for delivery trouble."""
        params = {"chat_id": chat_id, "text": text, **opts}
        try:
            response, body = await self._post("sendMessage", params)
        except httpx.HTTPError as exc:
            verdict = classify_error(exc)
            return attrs.evolve(verdict, reason=self.redact(verdict.reason))
        if not is_bot_api(body):  # a page may show the URL, and with it the token
            answer = garbled(response, body)
            return classify(answer.status, attrs.evolve(answer, what=self.redact(answer.what)))
        return classify(response.status_code, body)

    async def reachable(self) -> bool:
        """Whether Telegram answers the bot at all (``getMe``, the probe of an outage): ``False``
        when no answer comes, the answer is a 5xx, or it is not the Bot API's; any other answer
        means it is there."""
        try:
            status, body = await self.call("getMe", {})
        except httpx.HTTPError:
            return False
        return status < 500 and is_bot_api(body)

    async def get_me(self) -> Mapping[str, Any]:
        """The bot's own account; raises ``RuntimeError`` (token redacted) when refused."""
        status, body = await self.call("getMe", {})
        if status != 200 or not isinstance(body, Mapping) or not body.get("ok"):
            raise RuntimeError(self.redact(f"getMe failed: HTTP {status} {body!r}"))
        result = body["result"]
        assert isinstance(result, Mapping)
        return result


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


_TITLE = re.compile(rb"<title>\s*(.*?)\s*</title>", re.IGNORECASE | re.DOTALL)


def garbled(response: httpx.Response, body: Any = None) -> Garbled:
    """An answer that is not the Bot API's (``body``, decoded: ``None`` when it was not JSON),
    read for what it was: its status; for a body that is not JSON, its content type and size,
    and an HTML page's title; and ``Retry-After`` if it has one."""
    if body is None:
        kind = response.headers.get("content-type", "no content type").split(";")[0].strip()
        size = len(response.content)
        title = _TITLE.search(response.content[:4096])
        if title:
            what = f'not JSON ({kind}, "{title.group(1).decode(errors="replace")[:80]}")'
        elif size == 0:
            what = f"not JSON ({kind}, empty)"
        else:
            what = f"not JSON ({kind}, {size} bytes)"
    else:
        what = not_bot_api(body)
    retry_after = response.headers.get("retry-after", "").strip()
    return Garbled(response.status_code, what, int(retry_after) if retry_after.isdigit() else None)


@asynccontextmanager
async def open_bot(
    token: str,
    api_url: str = DEFAULT_API_URL,
    *,
    timeout_s: float = 10.0,
    max_connections: int = 50,
) -> AsyncIterator[TelegramBot]:
    """A bot with one pooled HTTP client, closed on exit."""
    if not token or "/" in token or any(c.isspace() for c in token):
        raise ValueError("bot token must be a non-empty string without '/' or spaces")
    redact = _Redact(token)
    logger = logging.getLogger("httpx")
    logger.addFilter(redact)
    # The client's pool is bounded by these: at most max_connections connections, kept or not.
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    try:
        async with httpx.AsyncClient(
            base_url=api_url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
            limits=limits,
        ) as client:
            yield TelegramBot(token, client, api_url, timeout_s)
    finally:
        logger.removeFilter(redact)
