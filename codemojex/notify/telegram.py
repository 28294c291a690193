"""``TelegramBot``: ``sendMessage`` over one pooled ``httpx`` client on trio, with timeouts,
answers classified by ``codemojex.notify.classify``. The bot token is never logged: it is
redacted from httpx's request log lines and from every error text this module produces.

Not every answer is the Bot API's JSON: a 502 or 504 from the proxy in front of it is an HTML
page, and a 429 may carry only a ``Retry-After`` header. Such an answer is read as an error with
its status, its phrase and what it was (``not JSON: text/html, "502 Bad Gateway"``), and the
header's seconds as ``retry_after``, so ``classify`` retries it like the JSON one.
"""

from __future__ import annotations

import http
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx

from codemojex.notify.classify import Verdict, classify, classify_error

__all__ = ["DEFAULT_API_URL", "TelegramBot", "open_bot"]

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


class TelegramBot:
    """A bot speaking the Bot API at ``api_url`` (the real one, or a local stand-in)."""

    def __init__(self, token: str, client: httpx.AsyncClient, api_url: str) -> None:
        self._token = token
        self._client = client
        self.api_url = api_url.rstrip("/")

    def redact(self, text: str) -> str:
        return text.replace(self._token, "<token>")

    async def call(self, method: str, params: Mapping[str, Any]) -> tuple[int, Any]:
        """POST a Bot API method; ``(status, decoded JSON or None)``. Raises ``httpx`` errors."""
        response = await self._client.post(f"/bot{self._token}/{method}", json=dict(params))
        return response.status_code, _json(response)

    async def _answer(self, method: str, params: Mapping[str, Any]) -> tuple[int, Any]:
        """Like :meth:`call`, but an answer that is not the Bot API's JSON comes back as the
        error body it stands for (see the module's docstring)."""
        response = await self._client.post(f"/bot{self._token}/{method}", json=dict(params))
        body = _json(response)
        if isinstance(body, Mapping):
            return response.status_code, body
        return response.status_code, not_json(response)

    async def send_message(self, chat_id: int, text: str, **opts: Any) -> Verdict:
        """Send ``text`` to ``chat_id`` (extra Bot API fields in ``opts``, such as
        ``parse_mode``) and classify the answer; never raises for delivery trouble."""
        try:
            status, body = await self._answer(
                "sendMessage", {"chat_id": chat_id, "text": text, **opts}
            )
        except httpx.HTTPError as exc:
            verdict = classify_error(exc)
            return attrs.evolve(verdict, reason=self.redact(verdict.reason))
        return classify(status, body)

    async def reachable(self) -> bool:
        """Whether Telegram answers the bot at all (``getMe``): ``False`` when no answer comes or
        the answer is a 5xx (the probe of an outage); any other answer means it is there."""
        try:
            status, _ = await self.call("getMe", {})
        except httpx.HTTPError:
            return False
        return status < 500

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


def not_json(response: httpx.Response) -> dict[str, Any]:
    """The error body an answer that is not the Bot API's JSON stands for: its status and
    phrase, what it was (content type, an HTML page's title), and ``Retry-After`` if it has one."""
    status = response.status_code
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown Status"
    kind = response.headers.get("content-type", "no content type").split(";")[0].strip()
    title = _TITLE.search(response.content[:4096])
    what = f'{kind}, "{title.group(1).decode(errors="replace")[:80]}"' if title else kind
    body: dict[str, Any] = {
        "ok": False,
        "error_code": status,
        "description": f"HTTP {status} {phrase}: not JSON ({what})",
    }
    retry_after = response.headers.get("retry-after", "").strip()
    if retry_after.isdigit():
        body["parameters"] = {"retry_after": int(retry_after)}
    return body


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
            yield TelegramBot(token, client, api_url)
    finally:
        logger.removeFilter(redact)
