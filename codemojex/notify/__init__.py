"""Notifications: every notice the game sends reaches its Telegram chat, in order, within
Telegram's limits.

How the parts fit: ``notify`` (``notifier``) enqueues a ``Notice`` (``notice``, the payload) on
its chat's lane of ``cm.notify`` (its job id: ``job_id_of``). The ``NotificationWorker``
(``worker``) consumes the queue with one claimer and a task per chat: for each notice the chat's
task takes a send from the ``RateLimiter`` (``rate_limiter``, sliding windows of ``Limits`` kept
on the server, so every worker process shares one budget), holding short waits and deferring
long ones, sends it with the ``TelegramBot`` (``telegram``), and acts on the verdict ``classify``
gives Telegram's answer, as ``steps`` (pure, ``StepPolicy``) decides: ack with a
``DeliveryNote`` for the audit, retry, defer, follow a migration, drop, stop, or wait out an
outage of Telegram behind the ``OutageGate`` (``outage``) without spending attempts: a 5xx, no
answer, an answer that is not the Bot API's, or a request left unanswered, each outage logged
once from beginning to end (``health``, pure).
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
from codemojex.notify.notifier import NOTIFY_QUEUE, job_id_of, notify
from codemojex.notify.outage import OutageGate
from codemojex.notify.rate_limiter import DEFAULT_MARGIN_MS, RateLimiter, Take
from codemojex.notify.steps import StepPolicy
from codemojex.notify.telegram import DEFAULT_API_URL, TelegramBot, open_bot
from codemojex.notify.worker import DeliveryStats, NotificationWorker

__all__ = [
    "DEFAULT_API_URL",
    "DEFAULT_MARGIN_MS",
    "MAX_TEXT",
    "NOTIFY_QUEUE",
    "Delivered",
    "DeliveryNote",
    "DeliveryStats",
    "Drop",
    "Fatal",
    "Limits",
    "Migrate",
    "Notice",
    "NotificationWorker",
    "OutageGate",
    "RateLimiter",
    "RetryLater",
    "StepPolicy",
    "Take",
    "TelegramBot",
    "Verdict",
    "Window",
    "check_notice",
    "is_group_chat",
    "job_id_of",
    "notify",
    "open_bot",
    "telegram_length",
]
