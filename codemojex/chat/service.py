"""How the service takes updates in: ``identify`` the bot, then either ``poll_updates`` (a
``Poller`` on a client of its own, whose timeout outlasts a long poll) or, in webhook mode, a
``Webhook`` on the page server registered with ``register_webhook``."""

from __future__ import annotations

import trio

from codemojex.chat.intake import UPDATES_QUEUE
from codemojex.chat.poller import POLL_TIMEOUT_S, Poller, TelegramRefused
from codemojex.telegram.bot import TelegramBot, open_bot
from echomq_trio import Bus

__all__ = ["identify", "poll_updates"]


async def identify(bot: TelegramBot) -> tuple[int, str]:
    """The bot's id and username (``getMe``); ``TelegramRefused`` when Telegram refuses."""
    try:
        me = await bot.get_me()
    except RuntimeError as exc:
        raise TelegramRefused(f"{exc} (is the bot token right?)") from None
    return int(me["id"]), str(me.get("username") or "")


async def poll_updates(
    bus: Bus,
    token: str,
    api_url: str,
    bot_id: int,
    *,
    queue: str = UPDATES_QUEUE,
    timeout_s: int = POLL_TIMEOUT_S,
    task_status: trio.TaskStatus[Poller] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a ``Poller`` until cancelled; ``task_status.started`` gets it (for its statistics)."""
    async with open_bot(token, api_url, timeout_s=timeout_s + 15, max_connections=2) as bot:
        poller = Poller(bus, bot, bot_id, queue=queue, timeout_s=timeout_s)
        async with trio.open_nursery() as nursery:
            await nursery.start(poller.run)
            task_status.started(poller)
