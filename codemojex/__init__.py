"""codemojex: the notification pipeline, game and audit archive of a Telegram emoji-guessing
game, on echomq_trio.

How the parts fit, by capability:

* ``codemojex.notify``: notices enqueued on a fair lane per chat, delivered to Telegram by the
  ``NotificationWorker`` within a rate limit shared by every process.
* ``codemojex.game``: rooms, rounds, scoring and leaderboards, the daily digest, and the live
  feed and page; it sends its messages through ``codemojex.notify``.
* ``codemojex.chat``: Telegram's updates in, through the bus (a poller or the webhook admits
  each to its chat's lane, once), and the game played in chats, answering through
  ``codemojex.notify``.
* ``codemojex.audit``: every settled notice folded into SQLite off the hot path and replicated
  off-box; ``python -m codemojex.audit`` reads and restores it.
* ``codemojex.telegram``: what the service knows of Telegram itself: the Bot API client, how
  its answers are classified, its limits, its markup and text rules, and what a chat id is;
  ``notify``, ``chat``, ``game`` and ``standin`` use it, and it uses none of them.
* ``codemojex.standin``: the Telegram Bot API stand-in the service talks to without a token
  (its simulated users' messages come back as updates).

``codemojex.run`` (``python -m codemojex.run``) starts all of it with ``codemojex.settings``;
``ids``, ``asgi`` and ``stats`` are the small pieces the capabilities share.
"""
