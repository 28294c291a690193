"""What a Telegram answer means for a notice (pure): delivered, retry later, migrate, drop, or
fatal. Like the mature bot libraries, it reads ``parameters`` first (``retry_after``,
``migrate_to_chat_id``), then the description, then the status, so a 403 that only *sounds*
permanent is retried, and only blocked, kicked, deactivated and similar ones are dropped.

Only the Bot API's own answer is read that way: a JSON object whose ``ok`` is true or false
(``is_bot_api``). Anything else (a proxy's or a captive portal's page, a body cut short, JSON of
another shape) came from something between the bot and Telegram, whatever its status, so it says
nothing about the chat: it is ``Garbled`` and retried as a 5xx is (``RetryLater(server=True,
garbled=True)``: ask ``getMe`` whether every chat would get the same before spending an attempt),
except a 429, whose ``Retry-After`` is honoured as a flood wait.
"""

from __future__ import annotations

import http
from collections.abc import Mapping

import attrs

__all__ = [
    "CAUSES",
    "Delivered",
    "Drop",
    "Fatal",
    "Garbled",
    "Migrate",
    "RetryLater",
    "Verdict",
    "classify",
    "classify_error",
    "is_bot_api",
]

# Why a request failed for every chat alike, when it does (``RetryLater.cause``): an answer of
# the Bot API's with a 5xx status, no answer at all (refused, reset, timed out), or an answer that
# is not the Bot API's; and, seen by the worker's watch rather than an answer, a request that has
# had no answer for too long.
CAUSES = ("server_error", "no_answer", "not_bot_api", "unanswered")


@attrs.frozen
class Delivered:
    message_id: int | None


@attrs.frozen
class RetryLater:
    """Transient. ``flood`` marks a 429: honour ``delay_ms`` (``retry_after``) and do not count it
    as an attempt. Otherwise ``delay_ms`` is a floor for the backoff, if the server gave one."""

    reason: str
    delay_ms: int | None = None
    flood: bool = False
    # A 5xx or no answer at all: perhaps Telegram's trouble for every chat, not this chat's.
    server: bool = False
    answered: bool = True  # False: no answer at all (the request may or may not have arrived)
    garbled: bool = False  # the answer was not the Bot API's (``Garbled``), nor a 5xx

    @property
    def cause(self) -> str:
        """For a ``server`` one, which of ``CAUSES`` it is."""
        if not self.answered:
            return "no_answer"
        return "not_bot_api" if self.garbled else "server_error"


@attrs.frozen
class Migrate:
    """The group became a supergroup: resend to ``new_chat_id`` at once."""

    new_chat_id: int
    reason: str = "group chat was upgraded to a supergroup chat"


@attrs.frozen
class Drop:
    """Permanent for this notice (blocked, chat gone, bad text): record the reason, move on."""

    reason: str


@attrs.frozen
class Fatal:
    """Permanent for the bot (bad token, another instance running): stop sending."""

    reason: str


Verdict = Delivered | RetryLater | Migrate | Drop | Fatal


@attrs.frozen
class Garbled:
    """An answer that is not the Bot API's: its HTTP ``status``, ``what`` it was instead (``not
    JSON (text/html, "502 Bad Gateway")``, ``JSON but not the Bot API's (an array)``), and a
    ``Retry-After`` header's seconds if it had one. ``codemojex.telegram.bot.garbled`` reads
    one from a response; ``classify`` makes one of any decoded body that is not the Bot API's."""

    status: int
    what: str = "not JSON"
    retry_after_s: int | None = None

    @property
    def description(self) -> str:
        try:
            phrase = http.HTTPStatus(self.status).phrase
        except ValueError:
            phrase = "Unknown Status"
        return f"HTTP {self.status} {phrase}: {self.what}"


def is_bot_api(body: object) -> bool:
    """Whether a decoded body is the Bot API's answer: a JSON object whose ``ok`` is a bool."""
    return isinstance(body, Mapping) and isinstance(body.get("ok"), bool)


def not_bot_api(body: object) -> str:
    """What a decoded body that is not the Bot API's was, for ``Garbled.what``."""
    if body is None:
        return "not JSON"
    if isinstance(body, Mapping):
        kind = 'an object without "ok"'
    elif isinstance(body, list):
        kind = "an array"
    elif isinstance(body, str):
        kind = "a string"
    elif isinstance(body, bool):
        kind = "a boolean"
    else:
        kind = "a number"
    return f"JSON but not the Bot API's ({kind})"


# Descriptions that make a notice undeliverable for good (lowercase substrings). Checked against
# the Bot API server (tdlib/telegram-bot-api, ``Client::fail_query_with_error``: it rewrites
# TDLib's errors, e.g. USER_IS_BLOCKED to 403 "bot was blocked by the user" and
# INPUT_USER_DEACTIVATED to 403 "Forbidden: user is deactivated", and prefixes "Bad Request: ",
# "Forbidden: " to the rest) and against what bots meet in the wild. The 403s matter most: an
# unknown 403 is retried, so every permanent one must be here.
_DROP_PHRASES = (
    # 403: the user or the chat shut the bot out
    "bot was blocked by the user",
    "user is deactivated",
    "bot was kicked",  # from the group chat / supergroup chat / channel chat
    "bot is not a member",  # of the channel chat / supergroup chat
    "the group chat was deleted",
    "bot can't initiate conversation",
    "can't initiate conversation",
    "bots can't send messages to bots",
    "can't send messages to bots",
    "can't send messages to the bot",
    "user_banned_in_channel",
    "chat_write_forbidden",
    # 400: the chat is gone or closed to the bot
    "chat not found",
    "group chat was deactivated",
    "chat is deactivated",
    "have no rights to send",
    "not enough rights",
    "need administrator rights",
    "chat_restricted",
    "topic_closed",
    "message thread not found",
    "peer_id_invalid",
    "chat_id is empty",
    # 400: the notice itself can never be sent
    "message is too long",
    "text is too long",
    "message text is empty",
    "can't parse entities",
    "unsupported parse_mode",
)
_FATAL_STATUS = {401: "unauthorized: the bot token is wrong or revoked",
                 404: "not found: the bot token is wrong",
                 409: "conflict: another instance of this bot is running"}  # fmt: skip


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def classify(status: int, body: object) -> Verdict:
    """Classify one answer: HTTP ``status`` and the decoded JSON ``body`` (``None`` when the body
    was not JSON), or the ``Garbled`` it was read as. Never raises."""
    if isinstance(body, Garbled):
        return _garbled(body)
    if not is_bot_api(body):
        return _garbled(Garbled(status, not_bot_api(body)))
    assert isinstance(body, Mapping)
    if status == 200 and body.get("ok") is True:
        result = body.get("result")
        message_id = _int(result.get("message_id")) if isinstance(result, Mapping) else None
        return Delivered(message_id)
    code = _int(body.get("error_code")) or status
    description = str(body.get("description") or f"HTTP {status}")
    params = body.get("parameters")
    params = params if isinstance(params, Mapping) else {}
    retry_after = _int(params.get("retry_after"))
    if retry_after is not None:
        return RetryLater(description, max(retry_after, 0) * 1000, flood=code == 429)
    migrate_to = _int(params.get("migrate_to_chat_id"))
    if migrate_to is not None:
        return Migrate(migrate_to, description)
    low = description.lower()
    if code in _FATAL_STATUS or "unauthorized" in low:
        return Fatal(f"{_FATAL_STATUS.get(code, 'unauthorized')} ({description})")
    if any(phrase in low for phrase in _DROP_PHRASES):
        return Drop(description)
    if code == 429:
        return RetryLater(description, 1000, flood=True)
    if code >= 500 or status >= 500:
        return RetryLater(description, server=True)
    if code == 403:
        # An unknown 403 is not proof of a block (some are transient): a few spaced retries.
        return RetryLater(description)
    if status == 200:  # ok false with a 200: not what the Bot API answers
        return RetryLater(f"undecodable answer: {description}")
    return Drop(description)


def _garbled(answer: Garbled) -> RetryLater:
    """Not the Bot API's answer: nothing in it is about the chat. A 429 is a flood wait (its
    ``Retry-After``, else 1 s); anything else is retried as a 5xx is, ``Retry-After`` as the
    floor of the backoff. A 5xx page (the proxy's 502 or 504) is a server error; any other
    status with such a body (a 200 page, a body cut short) is ``garbled``."""
    wait = None if answer.retry_after_s is None else max(answer.retry_after_s, 0) * 1000
    if answer.status == 429:
        return RetryLater(answer.description, wait or 1000, flood=True)
    return RetryLater(answer.description, wait, server=True, garbled=answer.status < 500)


def classify_error(exc: BaseException) -> RetryLater:
    """A request that got no answer (network error, timeout) is worth another try."""
    return RetryLater(f"no answer: {type(exc).__name__}: {exc}".rstrip(": "), server=True,
                      answered=False)  # fmt: skip
