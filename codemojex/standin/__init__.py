"""The Telegram Bot API stand-in: what ``python -m codemojex.run`` sends its notices to when it
has no bot token, and what the tests and benchmarks send to.

How the parts fit: ``bot_api`` holds the ``TelegramStandIn`` (its state, and an ASGI app served
on loopback by hypercorn), ``open_stand_in`` to serve one for the length of a block, the records
of what arrived (``Delivery``, ``RequestRecord``), and ``Scripted`` answers that make a chat
fail on demand. It is as strict as Telegram: it enforces flood rules of its own
(``FloodRules``; by default ``TELEGRAM_FLOOD``, Telegram's documented figures with a growing
penalty), not the limiter's ``Limits``, through ``flood`` (pure: the windows, forgetting the
sends they no longer see); it applies ``parse_mode`` through ``codemojex.telegram.markup`` (pure:
HTML, MarkdownV2 and Markdown to plain text and entities, or Telegram's "can't parse entities");
and it answers with the chats their ids name (``codemojex.telegram.chats``) as ``chats``
(pure) writes them. It keeps counters of
everything and the records of only the most recent ``keep`` requests and deliveries, so its
memory is bounded however long it runs. ``updates`` (``UpdateFeed``, its ``updates``
attribute) is the other direction: simulated users' messages, served by ``getUpdates`` or
delivered to a webhook. ``python -m codemojex.standin`` runs it alone.
"""

from codemojex.standin.bot_api import (
    DEFAULT_KEEP,
    DEFAULT_LIMITS,
    MAX_MESSAGE_LENGTH,
    MAX_TEXT_BYTES,
    Delivery,
    RequestRecord,
    Scripted,
    StandInStats,
    TelegramStandIn,
    open_stand_in,
)
from codemojex.standin.flood import TELEGRAM_FLOOD, FloodRules, Penalty, most_in_span

__all__ = [
    "DEFAULT_KEEP",
    "DEFAULT_LIMITS",
    "MAX_MESSAGE_LENGTH",
    "MAX_TEXT_BYTES",
    "TELEGRAM_FLOOD",
    "Delivery",
    "FloodRules",
    "Penalty",
    "RequestRecord",
    "Scripted",
    "StandInStats",
    "TelegramStandIn",
    "most_in_span",
    "open_stand_in",
]
