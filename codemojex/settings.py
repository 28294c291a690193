"""Settings of ``python -m codemojex.run``: flags, else environment variables, else defaults.
Every bad value is reported as one line naming the setting."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from codemojex.audit.compaction import DEFAULT_COMPACT_SEGMENTS
from codemojex.game.digest import DEFAULT_DIGEST_AT, DEFAULT_DIGEST_TZ, digest_cron
from codemojex.game.rounds import ENDED_ROUND_KEEP_MS, MIN_KEEP_MS
from codemojex.notify.outage import DEFAULT_HANG_AFTER_S
from codemojex.telegram import DEFAULT_API_URL, Limits, Window
from echomq_trio import cron

__all__ = ["Settings", "SettingsError", "parse_settings"]


class SettingsError(ValueError):
    """A setting that cannot be used; the message names it."""


def _window(name: str, text: str) -> Window:
    try:
        return Window.parse(text, name)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def _port(name: str, value: int) -> int:
    if not 0 <= value < 65536:
        raise SettingsError(f"{name} must be a port number 0-65535 (0: any free port), got {value}")
    return value


@attrs.frozen
class Settings:
    url: str | None = None
    data_dir: Path = Path("codemojex-data")
    telegram_token: str | None = None
    telegram_api_url: str = DEFAULT_API_URL
    telegram_hang_after_s: float = DEFAULT_HANG_AFTER_S
    limits: Limits = Limits()
    host: str = "127.0.0.1"
    page_port: int = 8080
    feed_port: int = 8081
    demo: bool = True
    summary_every_s: float = 5.0
    archive: bool = True
    archive_db: Path | None = None  # default: <data_dir>/audit.sqlite
    replica: str | None = None  # default: the directory <data_dir>/replica
    compact_segments: int = DEFAULT_COMPACT_SEGMENTS
    round_keep_s: float = ENDED_ROUND_KEEP_MS / 1000
    updates: str = "poll"  # how Telegram's updates come in: "poll" or "webhook"
    webhook_url: str | None = None  # the public HTTPS URL Telegram posts to (webhook mode)
    round_s: float = 60.0  # how long a round started with /round lasts
    digest_at: str = DEFAULT_DIGEST_AT  # the daily digest's local time, HH:MM
    digest_tz: str = DEFAULT_DIGEST_TZ  # ... in this IANA zone

    @property
    def archive_db_path(self) -> Path:
        return self.archive_db or self.data_dir / "audit.sqlite"

    @property
    def replica_spec(self) -> str:
        return self.replica or str(self.data_dir / "replica")


# (flag, environment variable, help)
_HELP = {
    "url": ("--url", "ECHOMQ_URL", "Valkey/Redis URL; default: an embedded server"),
    "data_dir": ("--data-dir", "CODEMOJEX_DATA_DIR",
                 "where the embedded server keeps its data (a restart resumes from it)"),
    "telegram_token": ("--telegram-token", "CODEMOJEX_TELEGRAM_TOKEN",
                       "a real bot token: send through the real Bot API; default: the local "
                       "stand-in"),
    "telegram_api_url": ("--telegram-api-url", "CODEMOJEX_TELEGRAM_API_URL",
                         "Bot API base URL used with a token"),
    "telegram_hang_after_s": ("--telegram-hang-after", "CODEMOJEX_TELEGRAM_HANG_AFTER",
                             "seconds a request to Telegram may go unanswered before it is "
                             "logged as an outage and shown on the summary line and in the "
                             "metrics (at least 0.1; the client gives up at 10)"),
    "global_limit": ("--global-limit", "CODEMOJEX_GLOBAL_LIMIT",
                     "bot-wide sends per window, LIMIT/WINDOW_MS"),
    "private_limit": ("--private-limit", "CODEMOJEX_PRIVATE_LIMIT",
                      "sends per window to one private chat, LIMIT/WINDOW_MS"),
    "group_limit": ("--group-limit", "CODEMOJEX_GROUP_LIMIT",
                    "sends per window to one group chat, LIMIT/WINDOW_MS"),
    "host": ("--host", "CODEMOJEX_HOST", "address the page and the feed listen on"),
    "page_port": ("--page-port", "CODEMOJEX_PAGE_PORT", "port of the leaderboard page (0: any)"),
    "feed_port": ("--feed-port", "CODEMOJEX_FEED_PORT", "port of the websocket feed (0: any)"),
    "demo": ("--demo", "CODEMOJEX_DEMO", "play a few demo rooms with simulated players: on/off"),
    "summary_every_s": ("--summary-every", "CODEMOJEX_SUMMARY_EVERY",
                        "seconds between live summary lines (0: none)"),
    "archive": ("--archive", "CODEMOJEX_ARCHIVE",
                "fold an audit of every notice into SQLite and replicate it: on/off"),
    "archive_db": ("--archive-db", "CODEMOJEX_ARCHIVE_DB",
                   "the audit archive's SQLite file (default: <data-dir>/audit.sqlite)"),
    "replica": ("--replica", "CODEMOJEX_REPLICA",
                "where archive segments are replicated: a directory or s3://bucket/prefix "
                "(default: the directory <data-dir>/replica)"),
    "compact_segments": ("--compact-segments", "CODEMOJEX_COMPACT_SEGMENTS",
                         "replica segments after the newest manifest that start a compaction "
                         "(at least 2)"),
    "round_keep_s": ("--round-keep", "CODEMOJEX_ROUND_KEEP",
                     "seconds an ended round and its board are kept (its results stay readable; "
                     "at least 1)"),
    "updates": ("--updates", "CODEMOJEX_UPDATES",
                "how Telegram's updates come in: poll (getUpdates) or webhook"),
    "webhook_url": ("--webhook-url", "CODEMOJEX_WEBHOOK_URL",
                    "webhook mode: the public https URL Telegram posts updates to, proxied to "
                    "/telegram/webhook on the page port (required with a token); default with the "
                    "stand-in: the page URL"),
    "round_s": ("--round-length", "CODEMOJEX_ROUND_LENGTH",
                "seconds a round started in a chat with /round lasts (at least 5)"),
    "digest_at": ("--digest-at", "CODEMOJEX_DIGEST_AT",
                  "local time (HH:MM) the daily standings digest is sent, in --digest-tz"),
    "digest_tz": ("--digest-tz", "CODEMOJEX_DIGEST_TZ",
                  "IANA time zone of --digest-at (e.g. Europe/Berlin); kept across DST changes"),
}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    d = Settings()
    defaults = {
        "url": None, "data_dir": str(d.data_dir), "telegram_token": None,
        "telegram_api_url": d.telegram_api_url,
        "telegram_hang_after_s": f"{d.telegram_hang_after_s:g}",
        "global_limit": str(d.limits.global_),
        "private_limit": str(d.limits.private), "group_limit": str(d.limits.group),
        "host": d.host, "page_port": str(d.page_port), "feed_port": str(d.feed_port),
        "demo": _on_off(d.demo), "summary_every_s": str(d.summary_every_s),
        "archive": _on_off(d.archive), "archive_db": None, "replica": None,
        "compact_segments": str(d.compact_segments), "round_keep_s": f"{d.round_keep_s:g}",
        "updates": d.updates, "webhook_url": None, "round_s": f"{d.round_s:g}",
        "digest_at": d.digest_at, "digest_tz": d.digest_tz,
    }  # fmt: skip
    parser = argparse.ArgumentParser(
        prog="python -m codemojex.run",
        description="Run codemojex: the bus, the notification worker, the game, the live "
        "leaderboard, and (by default) a local Telegram stand-in and a demo.",
    )
    for dest, (flag, env, text) in _HELP.items():
        shown = "(none)" if defaults[dest] is None else defaults[dest]
        parser.add_argument(flag, dest=dest, default=os.environ.get(env, defaults[dest]),
                            help=f"{text} [env {env}; default {shown}]")  # fmt: skip
    return parser


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    """Settings from ``argv`` and the environment; ``SettingsError`` for a bad value."""
    ns = build_parser().parse_args(argv)
    demo = _switch("--demo", ns.demo)
    archive = _switch("--archive", ns.archive)
    try:
        page_port, feed_port = int(ns.page_port), int(ns.feed_port)
    except ValueError:
        raise SettingsError("--page-port and --feed-port must be integers") from None
    summary = _number("--summary-every", ns.summary_every_s, float, 0)
    compact = _number("--compact-segments", ns.compact_segments, int, 2)
    keep = _number("--round-keep", ns.round_keep_s, float, MIN_KEEP_MS / 1000)
    round_s = _number("--round-length", ns.round_s, float, 5)
    hang_after = _number("--telegram-hang-after", ns.telegram_hang_after_s, float, 0.1)
    token = ns.telegram_token or None
    digest_at, digest_tz = _digest(ns.digest_at, ns.digest_tz)
    updates, webhook_url = _updates(ns.updates, ns.webhook_url or None, token)
    if token is not None and ("/" in token or any(c.isspace() for c in token)):
        raise SettingsError("--telegram-token must not contain '/' or spaces")
    if ns.url is not None:
        from echomq_trio.wire import parse_url

        try:
            parse_url(ns.url)
        except ValueError as exc:
            raise SettingsError(f"--url: {exc}") from None
    return Settings(
        url=ns.url,
        data_dir=Path(ns.data_dir),
        telegram_token=token,
        telegram_api_url=ns.telegram_api_url,
        telegram_hang_after_s=float(hang_after),
        limits=Limits(
            _window("--global-limit", ns.global_limit),
            _window("--private-limit", ns.private_limit),
            _window("--group-limit", ns.group_limit),
        ),
        host=ns.host,
        page_port=_port("--page-port", page_port),
        feed_port=_port("--feed-port", feed_port),
        demo=demo,
        summary_every_s=float(summary),
        archive=archive,
        archive_db=Path(ns.archive_db) if ns.archive_db else None,
        replica=_replica(ns.replica),
        compact_segments=int(compact),
        round_keep_s=float(keep),
        updates=updates,
        webhook_url=webhook_url,
        round_s=float(round_s),
        digest_at=digest_at,
        digest_tz=digest_tz,
    )


def _number(name: str, text: str, kind: type[int] | type[float], least: float) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        raise SettingsError(f"{name} must be {'an integer' if kind is int else 'a number'}, "
                            f"got {text!r}") from None  # fmt: skip
    if not value >= least:  # also refuses nan
        raise SettingsError(f"{name} must be >= {least:g}, got {text!r}")
    return value


def _digest(at: str, tz: str) -> tuple[str, str]:
    try:
        digest_cron(at)
    except ValueError as exc:
        raise SettingsError(f"--digest-at: {exc}") from None
    try:
        cron.parse(digest_cron(at), tz)
    except ValueError as exc:
        raise SettingsError(f"--digest-tz: {exc}") from None
    return at, tz


def _on_off(value: bool) -> str:
    return "on" if value else "off"


def _switch(name: str, value: str) -> bool:
    text = str(value).lower()
    if text not in ("on", "off", "true", "false", "1", "0", "yes", "no"):
        raise SettingsError(f"{name} must be on or off, got {value!r}")
    return text in ("on", "true", "1", "yes")


def _replica(spec: str | None) -> str | None:
    if spec and "://" in spec and not spec.startswith("s3://"):
        raise SettingsError(f"--replica must be a directory or s3://bucket/prefix, got {spec!r}")
    return spec or None


def _updates(mode: str, url: str | None, token: str | None) -> tuple[str, str | None]:
    if mode not in ("poll", "webhook"):
        raise SettingsError(f"--updates must be poll or webhook, got {mode!r}")
    if url is not None and not url.startswith("https://"):
        raise SettingsError(f"--webhook-url must be an https:// URL, got {url!r}")
    if mode == "webhook" and token is not None and url is None:
        raise SettingsError("--updates webhook with a --telegram-token needs --webhook-url "
                            "(the public https URL that reaches /telegram/webhook)")  # fmt: skip
    return mode, url
