"""Notifications: every notice the game sends reaches its Telegram chat, in order, within
Telegram's limits.

How the parts fit: ``notify`` (``notifier``) enqueues a ``Notice`` (``notice``, the payload) on
its chat's lane of ``cm.notify`` (its job id: ``job_id_of``). The ``NotificationWorker``
(``worker``) consumes the queue with one claimer and a task per chat: for each notice the chat's
task takes a send from the ``RateLimiter`` (``rate_limiter``, sliding windows of ``Limits`` kept
on the server, so every worker process shares one budget), holding short waits and deferring
long ones, sends it with the ``TelegramBot``, and acts on the verdict ``classify`` gives
Telegram's answer (both of ``codemojex.telegram``), as ``steps`` (pure, ``StepPolicy``)
decides: ack with a ``DeliveryNote`` for the audit, retry, defer, follow a migration, drop,
stop, or wait out an outage of Telegram behind the ``OutageGate`` (``outage``) without
spending attempts: a 5xx, no answer, an answer that is not the Bot API's, or a request left
unanswered, each outage logged once from beginning to end (``health``, pure).
``python -m codemojex.notify`` runs a worker process alone.
"""

from codemojex.notify.notice import DeliveryNote, Notice, check_notice
from codemojex.notify.notifier import NOTIFY_QUEUE, job_id_of, notify
from codemojex.notify.outage import OutageGate
from codemojex.notify.rate_limiter import DEFAULT_MARGIN_MS, RateLimiter, Take
from codemojex.notify.steps import StepPolicy
from codemojex.notify.worker import DeliveryStats, NotificationWorker

__all__ = [
    "DEFAULT_MARGIN_MS",
    "NOTIFY_QUEUE",
    "DeliveryNote",
    "DeliveryStats",
    "Notice",
    "NotificationWorker",
    "OutageGate",
    "RateLimiter",
    "StepPolicy",
    "Take",
    "check_notice",
    "job_id_of",
    "notify",
]
