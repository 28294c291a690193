"""Notifications: every notice the game sends reaches its Telegram chat, in order, within
Telegram's limits.

How the parts fit: ``notify`` (``notifier``) enqueues a ``Notice`` (``notice``, the payload) on
its chat's lane of ``cm.notify``. The ``NotificationWorker`` (``worker``) consumes the queue: for
each notice it takes a send from the ``RateLimiter`` (``rate_limiter``, sliding windows of
``Limits`` kept on the server, so every worker process shares one budget), sends it with the
``TelegramBot`` (``telegram``), and acts on the verdict ``classify`` gives Telegram's answer:
ack with a ``DeliveryNote`` for the audit, retry, defer, follow a migration, drop or stop.
``python -m codemojex.notify`` runs a worker process alone.
"""

from codemojex.notify.classify import Delivered, Drop, Fatal, Migrate, RetryLater, Verdict
from codemojex.notify.limits import Limits, Window, is_group_chat
from codemojex.notify.notice import (
    MAX_TEXT,
    DeliveryNote,
    Notice,
    check_notice,
    telegram_length,
)
from codemojex.notify.notifier import NOTIFY_QUEUE, notify
from codemojex.notify.rate_limiter import DEFAULT_MARGIN_MS, RateLimiter, Take
from codemojex.notify.telegram import DEFAULT_API_URL, TelegramBot, open_bot
from codemojex.notify.worker import NotificationWorker, WorkerStats

__all__ = [
    "DEFAULT_API_URL",
    "DEFAULT_MARGIN_MS",
    "MAX_TEXT",
    "NOTIFY_QUEUE",
    "Delivered",
    "DeliveryNote",
    "Drop",
    "Fatal",
    "Limits",
    "Migrate",
    "Notice",
    "NotificationWorker",
    "RateLimiter",
    "RetryLater",
    "Take",
    "TelegramBot",
    "Verdict",
    "Window",
    "WorkerStats",
    "check_notice",
    "is_group_chat",
    "notify",
    "open_bot",
    "telegram_length",
]
