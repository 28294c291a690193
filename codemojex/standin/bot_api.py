"""The Telegram Bot API stand-in: a real HTTP server on loopback, trio-native, that speaks the
part of the Bot API codemojex uses and enforces Telegram's limits.

Why it exists: the service must run with no bot token and no network (``python -m
codemojex.run`` sends its notices here by default), and the notification pipeline must be tested
without talking to Telegram. Mocking the HTTP client would test nothing that matters (timeouts,
retries, connection handling, JSON and error parsing), and the real Telegram cannot be told to
fail on demand. So the stand-in serves the few Bot API methods the pipeline uses over real HTTP,
answers with Telegram's own JSON shapes and error descriptions, records what arrives, enforces
Telegram's flood limits the way Telegram does (HTTP 429 with ``parameters.retry_after``), and can
be scripted per chat to fail in every way the pipeline has to survive.

In a trio program (the service, a test), start it in a nursery::

    async with open_stand_in(limits=TELEGRAM_FLOOD.scaled(10)) as tg:
        url = f"{tg.api_url}/bot{tg.token}/sendMessage"
        tg.script(42, Scripted.flood_wait(2), Scripted.server_error(502))
        ...
        assert tg.by_chat()[42] == ["hello"]

Alone: ``python -m codemojex.standin --port 8081 --token 123456:TEST [--no-limits] [--keep N]``.

What it speaks: ``/bot<token>/<method>`` by GET or POST, with parameters in the query string, a
JSON body, a form-encoded body or a multipart/form-data body (the four ways the Bot API documents,
https://core.telegram.org/bots/api#making-requests); methods ``getMe`` and ``sendMessage`` (names
are case-insensitive, as on Telegram). A wrong token is a 401, an unknown method a 404 "Not Found:
method not found" (the Bot API server's ``Client::on_cmd`` wording).

How strict it is, as Telegram is:

* Flood limits are its own (``FloodRules``, by default ``TELEGRAM_FLOOD``: Telegram's documented
  figures, with ``retry_after`` growing on repeated violations), not the rate limiter's: pass
  ``limits=`` a ``FloodRules`` to make Telegram stricter or looser than the limiter believes (a
  limiter's ``Limits`` is read as the same windows, no penalty). A 429 carries ``Retry-After``.
* Permanent answers stay: after a migration (scripted, or :meth:`TelegramStandIn.migrate`) the old
  group id keeps answering the migrate error; the upgrade itself comes as Telegram sends it, two
  service messages (``migrate_to_chat_id`` in the old group, ``migrate_from_chat_id`` in the
  new supergroup) among the updates; a chat that blocked the bot (a scripted 403, or
  :meth:`TelegramStandIn.block`) stays blocked until :meth:`TelegramStandIn.unblock`.
* ``parse_mode`` is applied (``codemojex.telegram.markup``): malformed HTML or MarkdownV2 is a 400
  "Bad Request: can't parse entities: ..."; accepted markup comes back as the plain text plus
  ``entities``. No text is "message text is empty", over 32 KiB as sent "text is too long"
  (both, and ``parse_mode``'s errors, before the chat is looked at, as the Bot API server reads
  them); the text is then trimmed as TDLib trims it: whitespace only is "text must be
  non-empty", over 4096 UTF-16 units after parsing "message is too long".
* ``message_thread_id`` (a forum topic) is taken for a supergroup, recorded
  (``Delivery.thread``) and echoed in the message with ``is_topic_message``; a value that is not
  a positive integer, or one sent to a private chat or a basic group (which have no topics), is
  400 "Bad Request: message thread not found".
* Chats are what their ids say (``codemojex.standin.chats``): basic groups, supergroups, private
  chats, with a ``title`` or a ``first_name`` (and a basic group's
  ``all_members_are_administrators``); an id no chat can have is "chat not found".
* ``getMe`` answers the bot's ``User`` with the fields Telegram returns only there
  (``can_join_groups``, ``can_read_all_group_messages``, ... : ``GET_ME_ONLY``).
* A 502 or 504 can come as the HTML page of the proxy in front of the Bot API
  (``Scripted.gateway_page``, or every scripted 502/504 with ``proxy_pages = True``), as the real
  ones do, instead of JSON.

``getUpdates``, ``setWebhook``, ``deleteWebhook`` and ``getWebhookInfo`` are answered by
``codemojex.standin.updates`` (the ``updates`` attribute: what simulated users send).

Memory stays bounded however long it runs (the service runs it for weeks): it counts every
``sendMessage`` (by status, and deliveries per chat: the chat's last message id) and keeps the
records of only the most recent ``keep`` requests and ``keep`` deliveries (1,000 by default), which
is what ``requests``, ``deliveries``, ``by_chat`` and ``max_in_window`` read; ``statistics()`` and
``delivered()`` give the totals. The flood model keeps only the sends its windows still see
(``codemojex.standin.flood``). What grows with time is one counter per chat ever delivered to
(Telegram numbers messages per chat) and what the operator scripts.
"""

from __future__ import annotations

import collections
import email.policy
import http
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from email.parser import BytesParser
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import attrs
import trio

from codemojex.standin.chats import chat_json
from codemojex.standin.flood import TELEGRAM_FLOOD, FloodModel, FloodRules, most_in_span
from codemojex.standin.updates import UPDATE_METHODS, UpdateFeed
from codemojex.telegram import (
    MAX_TEXT,
    MAX_TEXT_BYTES,
    PARSE_MODES,
    ChatKind,
    Limits,
    Window,
    chat_kind,
    markup,
    telegram_length,
)
from servicekit.asgi import Response, answer, serve_app

if TYPE_CHECKING:
    from hypercorn.typing import (
        ASGIReceiveCallable,
        ASGISendCallable,
        HTTPScope,
        Scope,
    )

__all__ = [
    "DEFAULT_KEEP",
    "DEFAULT_LIMITS",
    "GET_ME_ONLY",
    "MAX_MESSAGE_LENGTH",
    "MAX_TEXT_BYTES",
    "TELEGRAM_FLOOD",
    "Delivery",
    "FloodRules",
    "Limits",
    "RequestRecord",
    "Scripted",
    "StandInStats",
    "TelegramStandIn",
    "Window",
    "most_in_span",
    "open_stand_in",
]

log = logging.getLogger("codemojex.standin.bot_api")

MAX_MESSAGE_LENGTH = MAX_TEXT
"""Longest accepted ``text``, counted as Telegram counts it (UTF-16 code units)."""

GET_ME_ONLY: JsonObject = {
    "can_join_groups": True,
    "can_read_all_group_messages": True,
    "supports_inline_queries": False,
    "can_connect_to_business": False,
    "has_main_web_app": False,
    "has_topics_enabled": False,
    "allows_users_to_create_topics": False,
}
"""The fields Telegram's ``User`` has "only in getMe" (Bot API 9.4; the Bot API server's
``JsonUser`` with ``full_bot_info``), as a bot set up as ``docs/howto/telegram-bot.md`` says
has them: it may join groups and reads every message there (privacy mode off, so it sees the
guesses); no inline mode, business connection, main Web App or topics. A message's ``from``
has none of them."""

MAX_BODY_BYTES = 1 << 20
BLOCKED = "Forbidden: bot was blocked by the user"
UPGRADED_BY = 1  # the user who upgrades a group, unless ``migrate`` is told another
NO_THREAD = "Bad Request: message thread not found"
JsonObject = dict[str, Any]


DEFAULT_LIMITS: FloodRules = TELEGRAM_FLOOD
"""The stand-in's flood rules unless told otherwise: Telegram's documented figures."""
DEFAULT_KEEP = 1000
"""Records kept of the most recent requests, and of the most recent deliveries: with texts of
about 70 characters a message's two records take about 400 bytes, so 400 KB in all (a text of
the longest, 4096 UTF-16 units, takes 4 to 16 KB more)."""


@attrs.frozen
class StandInStats:
    """Totals since the stand-in was made (a snapshot from ``statistics()``), over every
    ``sendMessage``, whether or not its record is still kept."""

    requests: int = 0  # sendMessage calls answered, whatever the answer
    delivered: int = 0  # of them, delivered (answered 200)
    rate_limited: int = 0  # answered 429 because a limit was exceeded (scripted 429s are not)
    chats: int = 0  # chats delivered to
    statuses: Mapping[int, int] = attrs.field(factory=dict)  # answers by HTTP status


@attrs.frozen
class Delivery:
    """A message the stand-in accepted (answered 200): what a user would have seen."""

    chat_id: int
    text: str
    message_id: int
    at: float
    """The stand-in's clock (``time.monotonic`` unless injected), in seconds."""
    wall_ms: int
    parse_mode: str | None
    shown: str = ""
    """What the user sees: ``text`` with its markup applied and trimmed (see ``entities``)."""
    entities: tuple[markup.Entity, ...] = ()
    thread: int | None = None
    """The forum topic it went to (``message_thread_id``), ``None`` for the chat itself."""


@attrs.frozen
class RequestRecord:
    """One ``sendMessage`` call, whatever its outcome (including scripted and 401 answers)."""

    chat_id: int | None
    """``None`` when the request had no usable ``chat_id``."""
    text: str | None
    status: int
    description: str | None
    """Telegram's error description; ``None`` on success."""
    at: float
    retry_after: int | None = None


@attrs.frozen
class Scripted:
    """A canned answer for one ``sendMessage`` call to a chat; build one with the classmethods.

    ``Scripted.server_error(status=500)``: a 5xx whose description is the status phrase
    ("Internal Server Error", "Bad Gateway", ...).
    ``Scripted.flood_wait(retry_after_s)``: 429 "Too Many Requests: retry after N" with
    ``parameters.retry_after``.
    ``Scripted.forbidden(description=...)``: 403, by default "bot was blocked by the user".
    ``Scripted.bad_request(description=...)``: 400, by default "chat not found".
    ``Scripted.migrate(new_chat_id)``: 400 "group chat was upgraded to a supergroup chat" with
    ``parameters.migrate_to_chat_id``.
    ``Scripted.unauthorized()``: 401 "Unauthorized".
    ``Scripted.conflict()``: 409 "Conflict: terminated by other getUpdates request; ...".
    ``Scripted.hang(seconds)``: wait that long, then handle the call normally (it is delivered
    even if the client has given up, as a timed-out request to Telegram may have been).
    ``Scripted.gateway_page(status=502)``: a 502 or 504 as the proxy in front of the Bot API
    sends it: an HTML page, not JSON.

    A scripted 403 blocks the chat and a scripted migrate migrates it, for good, as on Telegram:
    later calls to the chat get the same answer (see ``TelegramStandIn.block`` and ``migrate``;
    the migration's service messages are among the updates from then on).
    """

    status: int
    description: str | None = None
    parameters: Mapping[str, int] | None = None
    hang_s: float | None = None
    page: bool = False  # an HTML page from the proxy rather than the Bot API's JSON

    def __attrs_post_init__(self) -> None:
        if self.hang_s is None and self.status < 400:
            raise ValueError(f"a scripted answer is an error status (>= 400), got {self.status}")

    @classmethod
    def server_error(cls, status: int = 500) -> Scripted:
        if not 500 <= status <= 599:
            raise ValueError(f"server_error needs a 5xx status, got {status}")
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Server Error"
        return cls(status, phrase)

    @classmethod
    def flood_wait(cls, retry_after_s: int) -> Scripted:
        return cls(
            429,
            f"Too Many Requests: retry after {retry_after_s}",
            {"retry_after": retry_after_s},
        )

    @classmethod
    def forbidden(cls, description: str = BLOCKED) -> Scripted:
        return cls(403, description)

    @classmethod
    def bad_request(cls, description: str = "Bad Request: chat not found") -> Scripted:
        return cls(400, description)

    @classmethod
    def migrate(cls, new_chat_id: int) -> Scripted:
        reply = _migrated(new_chat_id)
        return cls(reply.status, reply.body["description"], reply.body["parameters"])

    @classmethod
    def unauthorized(cls) -> Scripted:
        return cls(401, "Unauthorized")

    @classmethod
    def conflict(cls) -> Scripted:
        return cls(
            409,
            "Conflict: terminated by other getUpdates request; "
            "make sure that only one bot instance is running",
        )

    @classmethod
    def gateway_page(cls, status: int = 502) -> Scripted:
        if status not in GATEWAY_STATUSES:
            raise ValueError(f"gateway_page needs 502 or 504, got {status}")
        return cls(status, http.HTTPStatus(status).phrase, page=True)

    @classmethod
    def hang(cls, seconds: float) -> Scripted:
        if seconds < 0:
            raise ValueError(f"hang needs seconds >= 0, got {seconds}")
        return cls(200, hang_s=seconds)


@attrs.frozen
class _Reply:
    status: int
    body: JsonObject
    page: bool = False  # answer with the proxy's HTML page for ``status`` instead of ``body``


def _error(status: int, description: str, parameters: Mapping[str, int] | None = None) -> _Reply:
    body: JsonObject = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = dict(parameters)
    return _Reply(status, body)


GATEWAY_STATUSES = frozenset({502, 504})


def proxy_page(status: int) -> bytes:
    """The page nginx (the proxy in front of api.telegram.org) answers a 502 or 504 with."""
    title = f"{status} {http.HTTPStatus(status).phrase}"
    return (f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}"
            f"</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n"
            ).encode()  # fmt: skip


class _BadRequest(Exception):
    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


def _bot_id(token: str) -> int:
    prefix = token.partition(":")[0]
    return int(prefix) if prefix.isdigit() else 0


def _parse_chat_id(value: object) -> int | None:
    """The chat id, ``None`` if absent or empty; raises for ids Telegram would not find."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise _BadRequest("Bad Request: chat not found")


def _thread_id(value: object) -> int | None:
    """``message_thread_id``: ``None`` when absent or empty, else an int (0 for what is no
    number: no thread has it, so it is "not found")."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return 0


def _parse_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


class TelegramStandIn:
    """The stand-in's state and its ASGI app; serve it with :meth:`serve` or :func:`open_stand_in`.

    ``limits`` are the stand-in's own flood rules (``FloodRules``; by default Telegram's
    documented figures); a limiter's ``Limits`` is read as ``FloodRules.matching(limits)`` (the
    same windows, no penalty); ``None`` disables rate enforcement. ``keep`` is how many of the
    most recent requests, and of the most recent deliveries, are kept for reading
    (``DEFAULT_KEEP``); the totals are counted regardless. ``clock`` (seconds) timestamps
    deliveries and drives the rate windows; inject one to control time in unit tests.
    ``proxy_pages``: answer every scripted 502 and 504 with the proxy's HTML page, as the real
    ones come (settable later).
    """

    def __init__(
        self,
        token: str,
        limits: FloodRules | Limits | None = DEFAULT_LIMITS,
        *,
        keep: int = DEFAULT_KEEP,
        clock: Callable[[], float] = time.monotonic,
        proxy_pages: bool = False,
    ) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self.token = token
        self.keep = keep
        self.bot_id = _bot_id(token)
        self.flood = None if limits is None else FloodModel(limits)
        """The flood model the limits are enforced with (``None`` without limits)."""
        self.limits = None if self.flood is None else self.flood.rules
        """The flood rules enforced (``None`` without limits)."""
        self.proxy_pages = proxy_pages
        self._clock = clock
        self._api_url: str | None = None
        # Bounded: the most recent ``keep`` of each.
        self._requests: collections.deque[RequestRecord] = collections.deque(maxlen=keep)
        self._deliveries: collections.deque[Delivery] = collections.deque(maxlen=keep)
        # Bounded by the HTTP statuses the stand-in answers (about a dozen).
        self._statuses: collections.Counter[int] = collections.Counter()
        # One int per chat ever delivered to (the chat's last message id, as Telegram numbers
        # messages per chat): bounded by the chats the service has, not by the messages.
        self._delivered: collections.Counter[int] = collections.Counter()
        self._rate_limited = 0
        # Set by the operator (``script``, ``block``): bounded by what the operator sets.
        self._scripts: dict[int, collections.deque[Scripted]] = {}
        self._blocked: dict[int, str] = {}
        self._migrated: dict[int, int] = {}  # old group id -> its supergroup's id
        self._chats: dict[int, tuple[ChatKind, str | None]] = {}  # named by ``name_chat``
        self._changed = trio.Event()
        self.updates = UpdateFeed()
        """What simulated users send: ``getUpdates``, webhooks (``codemojex.standin.updates``)."""

    # ---- serving ---------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        """``http://127.0.0.1:PORT`` while serving; methods are at ``{api_url}/bot{token}/NAME``."""
        if self._api_url is None:
            raise RuntimeError("the Telegram stand-in is not serving")
        return self._api_url

    def method_url(self, method: str = "sendMessage") -> str:
        return f"{self.api_url}/bot{self.token}/{method}"

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled; ``task_status.started`` gets the api_url (with the real port)."""
        try:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(serve_app, self.app, host, port, _HYPERCORN_LOG)
                await nursery.start(self.updates.run)
                self._api_url = url
                task_status.started(url)
        finally:
            self._api_url = None

    # ---- scripting -------------------------------------------------------------------------

    def script(self, chat_id: int, *responses: Scripted) -> None:
        """Queue canned answers for the next ``sendMessage`` calls to ``chat_id``, in order."""
        self._scripts.setdefault(chat_id, collections.deque()).extend(responses)

    def pending_scripts(self, chat_id: int) -> int:
        """How many scripted answers for ``chat_id`` are not used yet."""
        return len(self._scripts.get(chat_id, ()))

    def unscript(self, chat_id: int) -> int:
        """Drop the scripted answers for ``chat_id`` not used yet (the next calls are answered
        as Telegram would); how many were dropped."""
        return len(self._scripts.pop(chat_id, ()))

    def block(self, chat_id: int, description: str = BLOCKED) -> None:
        """Answer every message to ``chat_id`` with 403 ``description`` until :meth:`unblock`."""
        self._blocked[chat_id] = description

    def unblock(self, chat_id: int) -> None:
        self._blocked.pop(chat_id, None)

    def migrate(
        self, chat_id: int, new_chat_id: int, *, announce: bool = True, by: int = UPGRADED_BY
    ) -> None:
        """The group ``chat_id`` became the supergroup ``new_chat_id``: from now on every message
        to ``chat_id`` is answered 400 "group chat was upgraded to a supergroup chat" with
        ``parameters.migrate_to_chat_id``, as Telegram answers an upgraded group's old id, and
        the supergroup has the group's title. With ``announce`` (as on Telegram) the bot is told
        among its updates, by the two service messages Telegram sends, both from the user ``by``
        who upgraded it: one in the old group with ``migrate_to_chat_id``, then one in the new
        supergroup with ``migrate_from_chat_id``. ``announce=False`` leaves the bot to find out
        from a send's 400 alone."""
        if chat_kind(chat_id) != "group":
            raise ValueError(f"a basic group (-1 .. -999999999999) is upgraded, got {chat_id}")
        if chat_kind(new_chat_id) != "supergroup":
            raise ValueError(f"a group migrates to a supergroup id (-100...), got {new_chat_id}")
        self._upgrade(chat_id, new_chat_id, announce=announce, by=by)

    def _upgrade(self, chat_id: int, new_chat_id: int, *, announce: bool, by: int) -> None:
        if self._migrated.get(chat_id) == new_chat_id:
            return  # upgraded already: Telegram says it once
        self._migrated[chat_id] = new_chat_id
        old = self.chat(chat_id) if chat_kind(chat_id) is not None else {"id": chat_id}
        title = old.get("title")
        if isinstance(title, str) and chat_kind(new_chat_id) == "supergroup":
            self._chats.setdefault(new_chat_id, ("supergroup", title))
        if not announce:
            return
        user = {"id": by, "is_bot": False, "first_name": "Group owner"}
        self.updates.push("message", {"from": user, "chat": old,
                                      "migrate_to_chat_id": new_chat_id})  # fmt: skip
        new = self.chat(new_chat_id) if chat_kind(new_chat_id) else {"id": new_chat_id}
        self.updates.push("message", {"from": user, "chat": new,
                                      "migrate_from_chat_id": chat_id})  # fmt: skip

    def name_chat(self, chat_id: int, name: str, *, channel: bool = False) -> None:
        """Give ``chat_id`` a title (a group's, a channel's) or a first name (a private chat's);
        ``channel`` makes a -100... id a channel rather than a supergroup."""
        kind = chat_kind(chat_id)
        if kind is None:
            raise ValueError(f"no chat can have the id {chat_id}")
        if channel and kind != "supergroup":
            raise ValueError(f"a channel has a -100... id, got {chat_id}")
        self._chats[chat_id] = ("channel" if channel else kind, name)

    def chat(self, chat_id: int) -> dict[str, object]:
        """The Bot API's ``Chat`` object of ``chat_id`` (``ValueError`` if no chat has the id)."""
        kind, name = self._chats.get(chat_id, (chat_kind(chat_id), None))
        if kind is None:
            raise ValueError(f"no chat can have the id {chat_id}")
        return chat_json(chat_id, kind, name)

    # ---- records: totals ever, and the most recent ``keep`` --------------------------------

    def statistics(self) -> StandInStats:
        statuses = dict(self._statuses)
        return StandInStats(
            requests=sum(statuses.values()),
            delivered=statuses.get(200, 0),  # a sendMessage answered 200 is a delivery
            rate_limited=self._rate_limited,
            chats=len(self._delivered),
            statuses=statuses,
        )

    @property
    def rate_limited(self) -> int:
        """429s issued because a limit was exceeded (scripted 429s are not counted)."""
        return self._rate_limited

    def delivered(self, chat_id: int | None = None) -> int:
        """How many messages were delivered in all, or to ``chat_id`` (its last message id)."""
        if chat_id is None:
            return self._statuses[200]
        return self._delivered[chat_id]  # a Counter: 0 for a chat never delivered to

    @property
    def requests(self) -> list[RequestRecord]:
        """The most recent ``keep`` ``sendMessage`` calls, oldest first (a copy)."""
        return list(self._requests)

    @property
    def deliveries(self) -> list[Delivery]:
        """The most recent ``keep`` deliveries, oldest first (a copy)."""
        return list(self._deliveries)

    def by_chat(self) -> dict[int, list[str]]:
        """Delivered texts per chat, in arrival order, of the kept deliveries."""
        out: dict[int, list[str]] = {}
        for d in self._deliveries:
            out.setdefault(d.chat_id, []).append(d.text)
        return out

    def max_in_window(self, window_ms: int, chat_id: int | None = None) -> int:
        """The most kept deliveries (overall, or to ``chat_id``) within any ``window_ms`` span.

        A span is half-open, ``[t, t + window)``, matching how the limits are enforced.
        """
        times = [d.at for d in self._deliveries if chat_id is None or d.chat_id == chat_id]
        return most_in_span(sorted(times), window_ms / 1000)

    async def wait_deliveries(self, count: int, chat_id: int | None = None) -> list[Delivery]:
        """Wait until at least ``count`` messages in all (to ``chat_id``, if given) were
        delivered, counted by :meth:`delivered`; returns the kept deliveries (to ``chat_id``):
        all of them while no more than ``keep`` were delivered, else the most recent.

        No timeout of its own: put it under ``trio.fail_after``.
        """
        while self.delivered(chat_id) < count:
            await self._changed.wait()
        return [d for d in self._deliveries if chat_id is None or d.chat_id == chat_id]

    # ---- the ASGI app ----------------------------------------------------------------------

    async def app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        await answer(scope, receive, send, self._answer)

    async def _answer(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> Response:
        reply = await self._http(scope, receive)
        if reply.page:
            page = proxy_page(reply.status)
            length = (b"content-length", str(len(page)).encode())
            return Response(reply.status, b"text/html", page, [length])
        payload = json.dumps(reply.body, ensure_ascii=False).encode()
        headers = [(b"content-length", str(len(payload)).encode())]
        retry_after = reply.body.get("parameters", {}).get("retry_after")
        if reply.status == 429 and retry_after is not None:
            headers.append((b"retry-after", str(retry_after).encode()))
        return Response(reply.status, b"application/json", payload, headers)

    async def _http(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> _Reply:
        raw = bytearray()
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                return _error(400, "Bad Request: client went away")
            if event["type"] != "http.request":
                continue
            raw += event["body"]
            if len(raw) > MAX_BODY_BYTES:
                return _error(413, "Request Entity Too Large")
            if not event["more_body"]:
                break

        token, sep, method = scope["path"].removeprefix("/bot").partition("/")
        if not scope["path"].startswith("/bot") or not sep or not method or "/" in method:
            return _error(404, "Not Found")
        method = method.lower()
        if scope["method"] not in ("GET", "POST"):
            return _error(405, "Method Not Allowed")
        token_ok = token == self.token
        if not token_ok and method != "sendmessage":
            return _error(401, "Unauthorized")
        params: dict[str, object] = {}
        body_error: str | None = None
        try:
            params = _params(scope, bytes(raw))
        except _BadRequest as e:
            body_error = e.description

        if method == "sendmessage":
            # Every call is recorded, even with a wrong token (a misconfigured bot sends those).
            return await self._send_message(params, token_ok=token_ok, body_error=body_error)
        if body_error is not None:
            return _error(400, body_error)
        if method == "getme":
            return _Reply(200, {"ok": True, "result": self._me() | GET_ME_ONLY})
        if method in UPDATE_METHODS:
            return _Reply(*await self.updates.call(method, params))
        return _error(404, "Not Found: method not found")

    def _me(self) -> JsonObject:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "codemojex",
            "username": "codemojex_bot",
        }

    async def _send_message(
        self, params: Mapping[str, object], *, token_ok: bool, body_error: str | None
    ) -> _Reply:
        text_value = params.get("text")
        raw_text = None if text_value is None else _parse_text(text_value)
        chat_id: int | None = None
        chat_error: str | None = None
        try:
            chat_id = _parse_chat_id(params.get("chat_id"))
        except _BadRequest as e:
            chat_error = e.description

        def answer(reply: _Reply) -> _Reply:
            retry = reply.body.get("parameters", {}).get("retry_after")
            self._statuses[reply.status] += 1
            self._requests.append(
                RequestRecord(
                    chat_id=chat_id,
                    text=raw_text,
                    status=reply.status,
                    description=reply.body.get("description"),
                    at=self._clock(),
                    retry_after=retry,
                )
            )
            if reply.status != 200:
                log.info("answered %s to chat %s: %s", reply.status, chat_id, reply.body)
            return reply

        if not token_ok:
            return answer(_error(401, "Unauthorized"))
        if body_error is not None:
            return answer(_error(400, body_error))
        # A scripted answer stands for whatever Telegram (or the proxy in front of it) answers
        # that chat, so it comes before every check but the chat's own.
        if chat_id is not None and self._is_chat(chat_id) and (queue := self._scripts.get(chat_id)):
            scripted = queue.popleft()
            if scripted.hang_s is None:
                return answer(self._scripted(chat_id, scripted))
            await trio.sleep(scripted.hang_s)
        # The order and the wording follow tdlib/telegram-bot-api's Client.cpp and TDLib: the
        # Bot API server reads the text first (process_send_message_query calls
        # get_input_message_text, then do_send_message looks the chat up): no text is "Message
        # text is empty", over 32 KiB as sent "Text is too long", then parse_mode
        # (get_formatted_text); then the chat; then TDLib's own checks of what is left after
        # parsing and trimming (fix_formatted_text: "Text must be non-empty"; over 4096 UTF-16
        # units "Message is too long"); fail_query_with_error prefixes "Bad Request: " and
        # lowers the first letter.
        text = raw_text or ""
        if not text:
            return answer(_error(400, "Bad Request: message text is empty"))
        if len(text.encode()) > MAX_TEXT_BYTES:
            return answer(_error(400, "Bad Request: text is too long"))
        parse_mode = params.get("parse_mode")
        if parse_mode in (None, "") or str(parse_mode).lower() == "none":
            parse_mode = None
        elif not isinstance(parse_mode, str) or parse_mode.lower() not in PARSE_MODES:
            return answer(_error(400, "Bad Request: unsupported parse_mode"))
        try:
            shown = markup.apply(text, parse_mode)
        except markup.MarkupError as e:
            return answer(_error(400, f"Bad Request: can't parse entities: {e}"))
        if chat_id is None:
            return answer(_error(400, chat_error or "Bad Request: chat_id is empty"))
        if not self._is_chat(chat_id):
            return answer(_error(400, "Bad Request: chat not found"))
        if chat_id in self._migrated:
            return answer(_migrated(self._migrated[chat_id]))
        if not shown.text:
            return answer(_error(400, "Bad Request: text must be non-empty"))
        if telegram_length(shown.text) > MAX_MESSAGE_LENGTH:
            return answer(_error(400, "Bad Request: message is too long"))
        thread = _thread_id(params.get("message_thread_id"))
        if thread is not None and (thread < 1 or self.chat(chat_id)["type"] != "supergroup"):
            return answer(_error(400, NO_THREAD))
        if chat_id in self._blocked:
            return answer(_error(403, self._blocked[chat_id]))

        now = self._clock()
        retry_after = None if self.flood is None else self.flood.retry_after(chat_id, now)
        if retry_after is not None:
            self._rate_limited += 1
            return answer(
                _error(
                    429,
                    f"Too Many Requests: retry after {retry_after}",
                    {"retry_after": retry_after},
                )
            )
        delivered = self._deliver(chat_id, text, parse_mode, shown, now, thread)
        return answer(_Reply(200, {"ok": True, "result": delivered}))

    def _is_chat(self, chat_id: int) -> bool:
        """Whether a chat can have ``chat_id`` (by its range, or named by the operator)."""
        return chat_id in self._chats or chat_kind(chat_id) is not None

    def _scripted(self, chat_id: int, scripted: Scripted) -> _Reply:
        """The reply of a scripted answer; a block or a migration stays, as on Telegram."""
        migrate_to = (scripted.parameters or {}).get("migrate_to_chat_id")
        if migrate_to is not None:
            self._upgrade(chat_id, migrate_to, announce=True, by=UPGRADED_BY)
        elif scripted.status == 403 and scripted.description:
            self._blocked[chat_id] = scripted.description
        page = scripted.page or (self.proxy_pages and scripted.status in GATEWAY_STATUSES)
        reply = _error(scripted.status, scripted.description or "", scripted.parameters)
        return attrs.evolve(reply, page=page)

    def _deliver(
        self,
        chat_id: int,
        text: str,
        parse_mode: str | None,
        shown: markup.Formatted,
        now: float,
        thread: int | None = None,
    ) -> JsonObject:
        self._delivered[chat_id] += 1
        message_id = self._delivered[chat_id]
        wall = time.time()
        self._deliveries.append(
            Delivery(
                chat_id=chat_id,
                text=text,
                message_id=message_id,
                at=now,
                wall_ms=int(wall * 1000),
                parse_mode=parse_mode,
                shown=shown.text,
                entities=shown.entities,
                thread=thread,
            )
        )
        if self.flood is not None:
            self.flood.record(chat_id, now)
        self._changed.set()
        self._changed = trio.Event()
        log.info("delivered to %s #%s: %r", chat_id, message_id, text)
        message: JsonObject = {
            "message_id": message_id,
            "from": self._me(),
            "chat": self.chat(chat_id),
            "date": int(wall),
            "text": shown.text,
        }
        if thread is not None:
            message["message_thread_id"] = thread
            message["is_topic_message"] = True
        if shown.entities:
            message["entities"] = markup.entities_json(shown.entities)
        return message


def _migrated(new_chat_id: int) -> _Reply:
    return _error(400, "Bad Request: group chat was upgraded to a supergroup chat",
                  {"migrate_to_chat_id": new_chat_id})  # fmt: skip


def _params(scope: HTTPScope, body: bytes) -> dict[str, object]:
    params: dict[str, object] = dict(
        parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    )
    if not body:
        return params
    content_type = header = ""
    for name, value in scope["headers"]:
        if name.lower() == b"content-type":
            header = value.decode("latin-1")
            content_type = header.split(";")[0].strip().lower()
    if content_type == "application/json":
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, ValueError):
            raise _BadRequest("Bad Request: can't parse JSON object") from None
        if not isinstance(data, dict):
            raise _BadRequest("Bad Request: can't parse JSON object")
        params.update(data)
    elif content_type == "application/x-www-form-urlencoded":
        try:
            params.update(parse_qsl(body.decode(), keep_blank_values=True))
        except UnicodeDecodeError:
            raise _BadRequest("Bad Request: can't decode parameters") from None
    elif content_type == "multipart/form-data":
        params.update(_form_data(header, body))
    return params


def _form_data(content_type: str, body: bytes) -> dict[str, str]:
    """The fields of a multipart/form-data body (files are not kept: no method here takes one)."""
    message = BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart() or message.defects:
        raise _BadRequest("Bad Request: can't parse multipart/form-data")
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(name, str) or not isinstance(payload, bytes):
            raise _BadRequest("Bad Request: can't parse multipart/form-data")
        if part.get_filename() is None:
            try:
                fields[name] = payload.decode()
            except UnicodeDecodeError:
                raise _BadRequest("Bad Request: can't decode parameters") from None
    return fields


_HYPERCORN_LOG = "codemojex.standin.hypercorn"  # warnings and errors only


@asynccontextmanager
async def open_stand_in(
    token: str = "123456:TEST",
    limits: FloodRules | Limits | None = DEFAULT_LIMITS,
    *,
    keep: int = DEFAULT_KEEP,
    clock: Callable[[], float] = time.monotonic,
    proxy_pages: bool = False,
) -> AsyncIterator[TelegramStandIn]:
    """Serve a :class:`TelegramStandIn` on a free loopback port for the duration of the block."""
    stand_in = TelegramStandIn(token, limits, keep=keep, clock=clock, proxy_pages=proxy_pages)
    # The body's exception is re-raised outside the nursery, so that a failing test shows its
    # own assertion instead of an ExceptionGroup around it.
    body_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        await nursery.start(stand_in.serve)
        try:
            yield stand_in
        except BaseException as e:
            body_error = e
        finally:
            nursery.cancel_scope.cancel()
    if body_error is not None:
        raise body_error
