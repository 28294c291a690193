"""The stand-in's side of what users send: updates of simulated users, served by ``getUpdates``
or delivered to a webhook, as Telegram does.

``UpdateFeed`` keeps the updates not yet confirmed, numbered from a random first id (so two
stand-ins on one bus never reuse an id). What it speaks:

* ``getUpdates``: ``offset`` confirms (forgets) every update below it; the answer is the
  unconfirmed updates from ``offset`` on (``limit``, at most 100); with none it waits up to
  ``timeout`` seconds for one (long polling). A second call while one waits ends the first with
  409 "terminated by other getUpdates request"; while a webhook is set every call is 409.
  ``allowed_updates`` is remembered from call to call, and an update of another kind is not
  made, as Telegram does.
* ``setWebhook`` (``url``, ``secret_token``, ``allowed_updates``, ``drop_pending_updates``),
  ``deleteWebhook``, ``getWebhookInfo``. While a webhook is set, ``run`` POSTs the updates to it
  one at a time in order, with the secret in ``X-Telegram-Bot-Api-Secret-Token``; an answer other
  than 2xx (or none) is tried again after a growing delay, and a 2xx confirms the update. Unlike
  Telegram the URL may be plain ``http`` (the service runs on loopback here).

Simulated users: ``user_says(chat, user, text)`` makes a user send a text message to a chat
(a private chat when ``chat == user``; in a forum topic with ``thread=``), ``push(kind, body)``
any update (an edited message, a sticker, a service message; ``TelegramStandIn.migrate``
pushes the two of a group's upgrade). For tests of the crash window, ``hold_confirmations``
keeps the updates an ``offset`` would confirm (as if the confirming call never reached
Telegram), and ``wait_offset`` waits for a poll that asks past an update.

Memory: at most ``MAX_PENDING`` unconfirmed updates are kept (the oldest go first).
"""

from __future__ import annotations

import collections
import json
import random
import re
import time
from collections.abc import Mapping
from typing import Any

import attrs
import httpx
import trio

from codemojex.standin.chats import chat_json
from codemojex.telegram import ChatKind

__all__ = ["MAX_PENDING", "UPDATE_METHODS", "UpdateFeed", "WebhookTarget"]

MAX_PENDING = 100_000
UPDATE_METHODS = frozenset({"getupdates", "setwebhook", "deletewebhook", "getwebhookinfo"})
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
_WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to "
    "delete the webhook first"
)
_POLL_CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
    "is running"
)
MethodAnswer = tuple[int, dict[str, Any]]  # an HTTP status and the JSON body the stand-in answers


@attrs.frozen
class WebhookTarget:
    """Where the stand-in delivers updates once a bot called ``setWebhook``: the ``url``, and
    the ``secret_token`` it sends with each (``None``: none)."""

    url: str
    secret: str | None


def _ok(result: object) -> MethodAnswer:
    return 200, {"ok": True, "result": result}


def _error(status: int, description: str) -> MethodAnswer:
    return status, {"ok": False, "error_code": status, "description": description}


def _int(params: Mapping[str, object], name: str, default: int | None) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(name)
    return int(value)


def _kinds(value: object) -> frozenset[str] | None:
    if isinstance(value, str):
        value = json.loads(value) if value else []
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise ValueError("allowed_updates")
    return frozenset(value) if value else None


class UpdateFeed:
    """The updates of simulated users, for ``getUpdates`` or a webhook (see the module)."""

    def __init__(self, *, first_update_id: int | None = None) -> None:
        self._next_id = first_update_id or random.randrange(1, 2**31)
        self._pending: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_PENDING)
        self._allowed: frozenset[str] | None = None
        self._message_ids: collections.Counter[int] = collections.Counter()
        self._polls = 0
        self._changed = trio.Event()
        self.webhook: WebhookTarget | None = None
        self.hold_confirmations = False
        self.last_offset: int | None = None  # of the latest getUpdates call
        self.confirmed = 0  # updates confirmed (by an offset, or a webhook's 2xx)
        self.webhook_statuses: collections.Counter[int] = collections.Counter()

    # ---- simulated users -------------------------------------------------------------------

    def user_says(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        name: str = "Player",
        chat_title: str | None = None,
        is_bot: bool = False,
        thread: int | None = None,
    ) -> int | None:
        """User ``user_id`` (``name``) sends ``text`` to ``chat_id``: the update's id (``None``
        when the bot's ``allowed_updates`` exclude messages). ``thread``: in that forum topic
        of a supergroup (the message has ``message_thread_id`` and ``is_topic_message``, its
        chat ``is_forum``)."""
        private = chat_id == user_id
        kind: ChatKind = "private" if private else "supergroup" if chat_id < -(10**12) else "group"
        if thread is not None and (kind != "supergroup" or thread < 1):
            raise ValueError(f"a forum topic (a thread id >= 1) is in a supergroup, got {thread}")
        chat = chat_json(chat_id, kind, name if private else chat_title or f"Group {chat_id}")
        if thread is not None:
            chat["is_forum"] = True
        message: dict[str, Any] = {
            "from": {"id": user_id, "is_bot": is_bot, "first_name": name},
            "chat": chat,
            "text": text,
        }
        if thread is not None:
            message["message_thread_id"] = thread
            message["is_topic_message"] = True
        if text.startswith("/"):
            command = text.split(maxsplit=1)[0]
            message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(command)}]
        return self.push("message", message)

    def push(self, kind: str, body: Mapping[str, Any]) -> int | None:
        """Make an update of ``kind`` (``message``, ``edited_message``, ...) from ``body``; a
        message gets its chat's next ``message_id`` and a ``date`` if it has none."""
        if self._allowed is not None and kind not in self._allowed:
            return None
        content = dict(body)
        chat = content.get("chat")
        if isinstance(chat, Mapping) and isinstance(chat.get("id"), int):
            self._message_ids[chat["id"]] += 1
            content.setdefault("message_id", self._message_ids[chat["id"]])
        content.setdefault("date", int(time.time()))
        update_id = self._next_id
        self._next_id += 1
        self._pending.append({"update_id": update_id, kind: content})
        self._wake()
        return update_id

    @property
    def polls(self) -> int:
        """``getUpdates`` calls answered or waiting (a webhook's 409s are not counted)."""
        return self._polls

    @property
    def pending(self) -> list[dict[str, Any]]:
        """The updates not confirmed yet, oldest first (a copy)."""
        return list(self._pending)

    async def wait_offset(self, offset: int) -> None:
        """Wait for a ``getUpdates`` call with an offset of at least ``offset`` (the poller has
        every update below it on its side). No timeout of its own."""
        while self.last_offset is None or self.last_offset < offset:
            await self._changed.wait()

    async def wait_confirmed(self, count: int) -> None:
        """Wait until ``count`` updates in all were confirmed. No timeout of its own."""
        while self.confirmed < count:
            await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _confirm_below(self, offset: int) -> None:
        if self.hold_confirmations:
            return
        while self._pending and self._pending[0]["update_id"] < offset:
            self._pending.popleft()
            self.confirmed += 1

    # ---- the Bot API methods ---------------------------------------------------------------

    async def call(self, method: str, params: Mapping[str, object]) -> MethodAnswer:
        """Answer one of ``UPDATE_METHODS`` (lower case): ``(HTTP status, JSON body)``."""
        try:
            if method == "getupdates":
                return await self._get_updates(params)
            if method == "setwebhook":
                return self._set_webhook(params)
            if method == "deletewebhook":
                if str(params.get("drop_pending_updates", "")).lower() in ("true", "1"):
                    self._pending.clear()
                self.webhook = None
                self._wake()
                return _ok(True)
            if method == "getwebhookinfo":
                hook = self.webhook
                return _ok({"url": hook.url if hook else "",
                            "pending_update_count": len(self._pending)})  # fmt: skip
        except (ValueError, TypeError) as exc:
            return _error(400, f"Bad Request: wrong parameter {exc}")
        return _error(404, "Not Found")

    async def _get_updates(self, params: Mapping[str, object]) -> MethodAnswer:
        offset = _int(params, "offset", None)
        limit = min(max(_int(params, "limit", 100) or 100, 1), 100)
        timeout = max(_int(params, "timeout", 0) or 0, 0)
        if "allowed_updates" in params:
            self._allowed = _kinds(params["allowed_updates"])
        if self.webhook is not None:
            return _error(409, _WEBHOOK_CONFLICT)
        self._polls += 1
        mine = self._polls
        self.last_offset = offset
        if offset is not None:
            self._confirm_below(offset)
        self._wake()  # an earlier call still waiting ends with a conflict
        deadline = trio.current_time() + timeout
        while True:
            if self._polls != mine:
                return _error(409, _POLL_CONFLICT)
            if self.webhook is not None:
                return _error(409, _WEBHOOK_CONFLICT)
            ready = [u for u in self._pending if offset is None or u["update_id"] >= offset]
            if ready or trio.current_time() >= deadline:
                return _ok(ready[:limit])
            with trio.move_on_at(deadline):
                await self._changed.wait()

    def _set_webhook(self, params: Mapping[str, object]) -> MethodAnswer:
        url = str(params.get("url") or "")
        secret = params.get("secret_token")
        if secret is not None and (not isinstance(secret, str) or not _SECRET.fullmatch(secret)):
            return _error(400, "Bad Request: secret token contains unallowed characters")
        if url and not url.startswith(("https://", "http://")):
            return _error(400, "Bad Request: bad webhook: invalid webhook URL specified")
        if "allowed_updates" in params:
            self._allowed = _kinds(params["allowed_updates"])
        if str(params.get("drop_pending_updates", "")).lower() in ("true", "1"):
            self._pending.clear()
        self.webhook = WebhookTarget(url, secret) if url else None
        self._wake()
        return _ok(True)

    # ---- webhook delivery ------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver to the webhook while one is set, until cancelled."""
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
            task_status.started()
            failures = 0
            while True:
                hook = self.webhook
                if hook is None or not self._pending:
                    await self._changed.wait()
                    continue
                update = self._pending[0]
                headers = {} if hook.secret is None else {SECRET_HEADER: hook.secret}
                try:
                    response = await client.post(hook.url, json=update, headers=headers)
                    status = response.status_code
                except httpx.HTTPError:
                    status = 0  # no answer
                self.webhook_statuses[status] += 1
                if 200 <= status < 300:
                    failures = 0
                    if self._pending and self._pending[0] is update:
                        self._pending.popleft()
                        self.confirmed += 1
                    self._wake()
                    continue
                failures += 1
                await trio.sleep(min(0.05 * 2**failures, 5.0))  # Telegram's retry, shortened
