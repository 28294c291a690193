"""Playing in Telegram: updates come in through the bus, exactly once and in order per chat.

How the parts fit: ``meaning`` (pure) decides what an update means to the game (a command, a
guess, or nothing, by rule). ``intake.admit`` is the one way an update enters the bus: a job on
``cm.updates`` in its chat's lane (limit 1), with the update id as idempotency key. The
``Poller`` reads updates with ``getUpdates`` long polling and confirms them to Telegram only
after they are on the bus; in webhook mode the ``Webhook`` endpoint (on the page server) checks
the secret, admits the update and only then answers 200. ``ChatGame`` consumes the queue and
plays: rooms per chat and players per Telegram user (``directory``, which also follows a group
upgraded to a supergroup), rounds, guesses and boards (``codemojex.game``), every answer
through ``codemojex.notify``.
"""

from codemojex.chat.directory import follow_migration, open_room, player_for, room_of_chat
from codemojex.chat.handler import ChatGame, ChatStats
from codemojex.chat.intake import ALLOWED_UPDATES, UPDATES_QUEUE, admit
from codemojex.chat.meaning import (
    Chat,
    Command,
    Guess,
    Ignored,
    Meaning,
    Sender,
    Upgraded,
    meaning,
)
from codemojex.chat.poller import Poller, PollerStats, TelegramRefused
from codemojex.chat.webhook import WEBHOOK_PATH, Webhook, new_secret, register_webhook

__all__ = [
    "ALLOWED_UPDATES",
    "UPDATES_QUEUE",
    "WEBHOOK_PATH",
    "Chat",
    "ChatGame",
    "ChatStats",
    "Command",
    "Guess",
    "Ignored",
    "Meaning",
    "Poller",
    "PollerStats",
    "Sender",
    "TelegramRefused",
    "Upgraded",
    "Webhook",
    "admit",
    "follow_migration",
    "meaning",
    "new_secret",
    "open_room",
    "player_for",
    "register_webhook",
    "room_of_chat",
]
