"""``python -m codemojex.standin``: the Telegram Bot API stand-in alone, until Ctrl-C or SIGTERM.

    python -m codemojex.standin [--host H] [--port 8081] [--token 123456:TEST] [--no-limits]
                                [--keep 1000] [--proxy-pages]

It enforces Telegram's documented flood limits (``TELEGRAM_FLOOD``) unless ``--no-limits``;
``--proxy-pages`` answers scripted 502s and 504s with the proxy's HTML page, as the real ones.

It prints ``Telegram stand-in at <URL>  (bot URL <URL>/bot<token>/)`` once it serves, logs every
answer on stderr, and exits 0 after a signal.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable

import trio

from codemojex.standin.bot_api import DEFAULT_KEEP, DEFAULT_LIMITS, TelegramStandIn
from servicekit.cli import cancel_on_signal

__all__ = ["main"]


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m codemojex.standin",
        description="Serve a local Telegram Bot API stand-in until Ctrl-C.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--token", default="123456:TEST")
    parser.add_argument("--no-limits", action="store_true", help="do not enforce flood limits")
    parser.add_argument(
        "--proxy-pages", action="store_true", help="answer 502 and 504 with HTML pages, not JSON"
    )
    parser.add_argument(
        "--keep",
        type=_positive,
        default=DEFAULT_KEEP,
        metavar="N",
        help=f"recent requests and deliveries kept (default {DEFAULT_KEEP})",
    )
    args = parser.parse_args(None if argv is None else list(argv))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    limits = None if args.no_limits else DEFAULT_LIMITS
    stand_in = TelegramStandIn(args.token, limits, keep=args.keep, proxy_pages=args.proxy_pages)

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(stand_in.serve, args.host, args.port)
            print(f"Telegram stand-in at {url}  (bot URL {url}/bot{args.token}/)", flush=True)

    trio.run(cancel_on_signal, serve)
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
