"""``python -m codemojex.notify``: a notification worker process alone, beside the service or
in place of its worker (every process shares the one rate limit on the server).

    python -m codemojex.notify [--url URL] [--queue cm.notify] [--telegram-api-url URL]
                               [--global-limit 30/1000] [--private-limit 3/3000]
                               [--group-limit 20/60000] [--margin-ms 30] [--lease-ms 15000]
                               [--beat-ms 500] [--hold-max-ms 5000] [--stuck-after-s 3600]
                               [--hang-after-s 5]

It runs a ``NotificationWorker`` and a ``Metronome`` on the queue at ``--url`` (or
``ECHOMQ_URL``) and never starts a server of its own. The bot token comes from
``CODEMOJEX_TELEGRAM_TOKEN`` only (a command line is visible to every user of the machine).
It prints ``ready`` once it consumes; SIGINT or SIGTERM stops it cleanly (the notices it holds go
back to pending) with exit status 0. Errors are one line on stderr: exit status 2 for a usage
error, 1 when it fails (the server unreachable, Telegram refusing the token).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import trio

from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.notify.outage import DEFAULT_HANG_AFTER_S, log_to_stderr
from codemojex.notify.rate_limiter import DEFAULT_MARGIN_MS, RateLimiter
from codemojex.notify.steps import DEFAULT_HOLD_MAX_MS, DEFAULT_STUCK_AFTER_MS, StepPolicy
from codemojex.notify.worker import NotificationWorker
from codemojex.telegram.bot import DEFAULT_API_URL, open_bot
from codemojex.telegram.limits import Limits, Window
from echomq_trio import BusError, Metronome, StopConsumer, open_bus
from servicekit.cli import CliError, cancel_on_signal, first_error

__all__ = ["main"]

TOKEN_ENV = "CODEMOJEX_TELEGRAM_TOKEN"
DEFAULT_LEASE_MS = 15_000
DEFAULT_BEAT_MS = 500


def _window(text: str) -> Window:
    try:
        return Window.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    d = Limits()
    p = argparse.ArgumentParser(
        prog="python -m codemojex.notify",
        description=f"Run a notification worker until Ctrl-C; the bot token comes from "
        f"{TOKEN_ENV}.",
    )
    p.add_argument("--url", default=os.environ.get("ECHOMQ_URL"),
                   help="the server that holds the queue (default: ECHOMQ_URL); required: no "
                   "server is started")  # fmt: skip
    p.add_argument("--queue", default=NOTIFY_QUEUE, help="the queue (default: %(default)s)")
    p.add_argument("--telegram-api-url", default=DEFAULT_API_URL,
                   help="Bot API base URL (default: %(default)s)")  # fmt: skip
    for flag, window, what in [("--global-limit", d.global_, "bot-wide"),
                               ("--private-limit", d.private, "to one private chat"),
                               ("--group-limit", d.group, "to one group chat")]:  # fmt: skip
        p.add_argument(flag, type=_window, default=window,
                       help=f"sends per window {what}, LIMIT/WINDOW_MS "
                       f"(default: {window})")  # fmt: skip
    p.add_argument("--margin-ms", type=int, default=DEFAULT_MARGIN_MS,
                   help="added to each window for arrival jitter "
                   "(default: %(default)s)")  # fmt: skip
    p.add_argument("--lease-ms", type=int, default=DEFAULT_LEASE_MS,
                   help="lease per claimed notice (default: %(default)s)")  # fmt: skip
    p.add_argument("--beat-ms", type=int, default=DEFAULT_BEAT_MS,
                   help="the metronome's beat (default: %(default)s)")  # fmt: skip
    p.add_argument("--hold-max-ms", type=int, default=DEFAULT_HOLD_MAX_MS,
                   help="longest rate-limit wait held in a chat task; longer ones are deferred "
                   "(default: %(default)s)")  # fmt: skip
    p.add_argument("--stuck-after-s", type=int, default=DEFAULT_STUCK_AFTER_MS // 1000,
                   help="a chat answering 429 this long in a row: its notice is dead with the "
                   "reason (default: %(default)s)")  # fmt: skip
    p.add_argument("--hang-after-s", type=float, default=DEFAULT_HANG_AFTER_S,
                   help="a request to Telegram unanswered this long is logged as an outage "
                   "(default: %(default)s)")  # fmt: skip
    return p


async def _work(args: argparse.Namespace, token: str) -> None:
    limits = Limits(args.global_limit, args.private_limit, args.group_limit)
    async with open_bus(args.url) as bus, open_bot(token, args.telegram_api_url) as bot:
        limiter = RateLimiter(bus, limits, tag=args.queue, margin_ms=args.margin_ms)
        policy = StepPolicy(hold_max_ms=args.hold_max_ms,
                            stuck_after_ms=args.stuck_after_s * 1000)  # fmt: skip
        worker = NotificationWorker(bus, bot, limiter, queue=args.queue, lease_ms=args.lease_ms,
                                    policy=policy, hang_after_s=args.hang_after_s)  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await nursery.start(Metronome(bus, args.queue, beat_ms=args.beat_ms).run)
            print("ready", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    try:
        if not args.url:
            raise CliError("needs --url (or ECHOMQ_URL), the server that holds the queue; it "
                           "never starts a server of its own", status=2)  # fmt: skip
        if not token:
            raise CliError(f"needs the bot token in {TOKEN_ENV}", status=2)
        log_to_stderr()
        trio.run(cancel_on_signal, _work, args, token)
    except (Exception, BaseExceptionGroup) as exc:
        known = first_error(exc, (CliError, StopConsumer, BusError, ValueError, OSError))
        if known is None:
            raise
        print(f"codemojex.notify: {known}", file=sys.stderr)
        return known.status if isinstance(known, CliError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
