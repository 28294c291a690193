"""``python -m codemojex.run``: everything on one machine.

With no settings: an embedded server (data in ``./codemojex-data``, so a restart resumes
scheduled jobs), the notification worker and a metronome for ``cm.notify``, one
``echomq_trio.Worker`` serving ``cm.game`` (the daily digest) and ``cm.updates`` (the game in
chats), each with its metronome, the live feed and its page (with Prometheus metrics at
``/metrics``, ``codemojex.metrics``, and the bus dashboard at ``/bus/``,
``echomq_trio.dashboard``), the local Telegram stand-in as the transport, and a demo. It
prints where to look and a short live summary. Ctrl-C or SIGTERM shuts it all down cleanly
within a few seconds (jobs in hand go back to pending); a second start resumes. ``--help``
lists the settings.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial

import trio

from codemojex import game
from codemojex.allocator import Trimmer, relaunch
from codemojex.audit import (
    Archiver,
    ArchiverStats,
    Ledger,
    S3Unavailable,
    check_replica,
    open_replica,
)
from codemojex.chat import (
    UPDATES_QUEUE,
    WEBHOOK_PATH,
    ChatGame,
    TelegramRefused,
    Webhook,
    new_secret,
    register_webhook,
)
from codemojex.chat.demo import play_in_chats
from codemojex.chat.directory import LEGACY_CHAT_ROOMS_KEY, upgrade_chat_links
from codemojex.chat.service import identify, poll_updates
from codemojex.game import Feed, PageServer, board, demo
from codemojex.game.page import DASHBOARD_PATH, EMOJI_FONT
from codemojex.keys import LEGACY_ROOMS
from codemojex.metrics import ServiceMetrics
from codemojex.notify import NOTIFY_QUEUE, DeliveryStats, NotificationWorker, RateLimiter
from codemojex.notify.health import Trouble
from codemojex.notify.health import note as telegram_note
from codemojex.notify.outage import log_to_stderr
from codemojex.settings import Settings, SettingsError, parse_settings
from codemojex.standin import TelegramStandIn, open_stand_in
from codemojex.store import server_time_ms
from codemojex.telegram import DEFAULT_API_URL, open_bot
from echomq_trio import (
    Bus,
    BusError,
    Metronome,
    Serve,
    StopConsumer,
    Worker,
    jobs,
    memory,
    open_bus,
)
from echomq_trio.dashboard import Dashboard, new_token
from echomq_trio.durability import Durability, InMemory, OnDisk
from echomq_trio.storage import has_waitaof, read_storage, storage_note
from servicekit import humane
from servicekit.cli import cancel_on_signal, first_error
from servicekit.datadir import DataDir, InUse

__all__ = ["MEMORY_REPORT_AT", "main", "memory_note", "run", "summary_line", "telegram_endpoint"]

STAND_IN_TOKEN = "123456:LOCAL-STAND-IN"
MEMORY_REPORT_AT = 0.8  # the summary shows the server's memory past this fraction of its ceiling
SUMMARY_ROOMS = 3  # the summary shows the round leaders of the first rooms, this many
# The promise of notify() is that a notice whose id it returned is delivered: so an admission
# (a notice, an update from Telegram, a reminder) returns once the server's append-only file
# holds it. A settlement returns from memory: waiting for the disk on each would hold every
# chat's lane a sync longer, and a settlement lost with a dead server only sends a notice again.
DURABILITY = OnDisk(settlements=False)
DURABILITY_TEXT = (
    "notify() returns a notice's id once the server's append-only file holds it (WAITAOF); "
    "settlements return from memory"
)
# The same on a server whose WAITAOF answers before its file is synced (storage.waitaof_syncs).
DURABILITY_WRITTEN_TEXT = (
    "notify() returns a notice's id once the server's append-only file holds it, written but "
    "not yet synced: this server answers WAITAOF before its sync (redis/redis#13793), so a "
    "killed server keeps the notice and a power cut may lose the last second or two; "
    "settlements return from memory"
)


def say(text: str) -> None:
    print(text, flush=True)


@asynccontextmanager
async def _telegram(settings: Settings) -> AsyncIterator[tuple[str, str, TelegramStandIn | None]]:
    if settings.telegram_token is not None:
        yield settings.telegram_token, settings.telegram_api_url, None
        return
    # The stand-in keeps Telegram's own flood rules, not the limiter's settings: limits set
    # looser than Telegram's meet its 429s here as they would in production.
    async with open_stand_in(STAND_IN_TOKEN) as stand_in:
        yield STAND_IN_TOKEN, stand_in.api_url, stand_in


async def summary_line(
    bus: Bus,
    worker: DeliveryStats,
    archiver: ArchiverStats | None,
    *,
    memory_at: float = MEMORY_REPORT_AT,
    telegram: Callable[[], Trouble | None] = lambda: None,
) -> str:
    """The summary line: notices, the notify queue, the archive, each room's leader in its
    current round (the first three rooms: one page of three, so the cost does not grow with the
    number of rooms), the server's memory once its use passes ``memory_at`` of its ceiling, and
    an outage of Telegram going on (``telegram``: reads the worker's
    ``outage.statistics().trouble`` when the line is made, after its reads of the server, so a
    line written after an outage ended never shows it). ``BusError`` when the server cannot be
    read."""
    notify_counts = await jobs.counts(bus, NOTIFY_QUEUE)
    first = await game.room_page(bus, count=SUMMARY_ROOMS)
    leaders = []
    for room in first.rooms:
        shown = await game.latest_round(bus, room.id)
        best = (
            [] if shown is None else await board.top(bus, board.round_board(room.id, shown.id), 1)
        )
        if best:
            names = await game.player_names(bus, [best[0].player])
            leaders.append(f"{names[best[0].player]} {best[0].percentage}% ({room.title})")
    use = await memory.memory_use(bus)
    audit = ""
    if archiver is not None:
        r = archiver.replicator
        audit = f" | archived {archiver.folder.archived}, segments {r.segments}"
        audit += f", re-sent {archiver.folder.resent}" if archiver.folder.resent else ""
        audit += f" (FENCED: {r.fenced})" if r.fenced else ""
        if r.replica_down_since is not None:
            since = humane.at(round(r.replica_down_since * 1000), round(time.time() * 1000))
            audit += f" (replica down since {since}: {r.replica_error})"
    known = f", already delivered {worker.already_delivered}" if worker.already_delivered else ""
    return (
        f"notices sent {worker.delivered}, deferred {worker.deferred}, retried {worker.retried}, "
        f"dropped {worker.dropped}, 429s {worker.flood_waits}{known} "
        f"| pending {notify_counts.pending}, "
        f"scheduled {notify_counts.scheduled}, dead {notify_counts.dead}{audit} "
        f"| round leaders: {', '.join(leaders) or '-'}"
        + memory_note(use, at=memory_at)
        + _storage_note(bus)
        + telegram_note(telegram(), trio.current_time())
    )


def _storage_note(bus: Bus) -> str:
    """`` | WRITES REFUSED since 12:00:01 (2 min), the server cannot write ...`` while the
    embedded server cannot write its append-only file (``Bus.storage``), else nothing."""
    if bus.storage is None:
        return ""
    seen = bus.storage.statistics()
    if seen.refusing_since is None:
        return ""
    lasted = humane.span(round((trio.current_time() - seen.refusing_since) * 1000))
    return f" | {storage_note(seen.storage)} (for {lasted})"


def memory_note(use: memory.MemoryUse, *, at: float = MEMORY_REPORT_AT) -> str:
    """`` | server memory 850 MiB of 1.0 GiB (83%)`` once the server's used memory passes
    ``at`` of its ceiling (at the ceiling it refuses writes), else nothing."""
    fraction = use.fraction
    if fraction is None or fraction < at:
        return ""
    note = (
        f" | server memory {memory.size_text(use.used_bytes)} of "
        f"{memory.size_text(use.max_bytes)} ({fraction:.0%})"
    )
    return note + (": WRITES REFUSED" if use.used_bytes >= use.max_bytes else "")


async def _summary(
    bus: Bus, worker: NotificationWorker, archiver: Archiver | None, every_s: float
) -> None:
    def telegram() -> Trouble | None:
        return worker.outage.statistics().trouble

    while True:
        await trio.sleep(every_s)
        try:
            stats = None if archiver is None else archiver.statistics()
            say(await summary_line(bus, worker.statistics(), stats, telegram=telegram))
        except BusError as exc:
            say(f"summary: server unavailable: {exc}")


async def _durability(url: str | None) -> tuple[Durability, str]:
    """``DURABILITY`` where the server keeps an append-only file (the embedded one always
    does); a server given by ``--url`` without one, or without ``WAITAOF`` to wait for it
    (Redis 7.0), can only hold notices in memory: said so."""
    if url is not None:
        async with open_bus(url) as probe:
            if not (await read_storage(probe)).aof:
                return InMemory(), (
                    f"the server at {probe.url} keeps no append-only file, so a notice is in its "
                    "memory only (set appendonly yes on it to have notify() wait for its disk)"
                )
            if not await has_waitaof(probe):
                return InMemory(), (
                    f"the server at {probe.url} has no WAITAOF (a Redis before 7.2), so notify() "
                    "returns once a notice is in its memory, before its append-only file has it "
                    "(Valkey or Redis 7.2+ lets notify() wait for its disk)"
                )
    return DURABILITY, DURABILITY_TEXT


def telegram_endpoint(api_url: str, *, local: bool) -> str:
    """Where notices go, truthfully: the local stand-in, Telegram's own Bot API, or another
    server named by ``--telegram-api-url`` (a self-hosted Bot API server, a proxy)."""
    if local:
        return f"local stand-in at {api_url} (no bot token given: nothing reaches Telegram)"
    if api_url.rstrip("/") == DEFAULT_API_URL:
        return f"Telegram's Bot API at {DEFAULT_API_URL}"
    return f"the Bot API server at {api_url} (--telegram-api-url)"


class PortInUse(OSError):
    """A port the service must listen on is taken; the message names the port and its flag."""


def check_ports(settings: Settings) -> None:
    """Refuse, before anything starts, a page or feed port that another process holds."""
    if settings.page_port and settings.page_port == settings.feed_port:
        raise SettingsError("--page-port and --feed-port must differ (or be 0: any free port)")
    wanted = [(settings.page_port, "--page-port", "CODEMOJEX_PAGE_PORT"),
              (settings.feed_port, "--feed-port", "CODEMOJEX_FEED_PORT")]  # fmt: skip
    for port, flag, env in wanted:
        if port and not _bindable(settings.host, port):
            raise PortInUse(
                f"port {port} on {settings.host} is in use; choose another with {flag} (or "
                f"{env}; 0 picks a free port)"
            )


def _bindable(host: str, port: int) -> bool:
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


async def run(
    settings: Settings,
    *,
    data_dir: DataDir | None = None,
    task_status: trio.TaskStatus[dict[str, str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run until cancelled; ``task_status.started`` gets the page and feed URLs.

    ``data_dir`` is ``settings.data_dir`` already owned by the caller (``main`` owns it before
    anything else happens); without it, ``run`` owns it for its duration (``InUse`` if another
    process does)."""
    if data_dir is None:
        with DataDir.own(settings.data_dir) as owned:
            await run(settings, data_dir=owned, task_status=task_status)
        return
    url = settings.url
    # After a repair or restore of the server's data, the archive says which notices were sent.
    archive_db = settings.archive_db_path if settings.archive else None
    durability, durability_text = await _durability(url)
    async with (
        open_bus(url, data_dir=data_dir if url is None else None, durability=durability) as bus,
        _telegram(settings) as (token, api_url, stand_in),
        open_bot(token, api_url) as bot,
        Ledger.for_data_dir(data_dir.path, archive_db) as ledger,
    ):
        if durability is DURABILITY and bus.waitaof_syncs is False and not bus.syncs_file_itself:
            durability_text = DURABILITY_WRITTEN_TEXT
        limiter = RateLimiter(bus, settings.limits)
        metrics = ServiceMetrics(bus, [NOTIFY_QUEUE, game.GAME_QUEUE, UPDATES_QUEUE])
        worker = NotificationWorker(bus, bot, limiter, metrics=metrics.notify, ledger=ledger,
                                    hang_after_s=settings.telegram_hang_after_s)  # fmt: skip
        metrics.watch(worker=worker)
        answer, next_run = await game.register_digest(
            bus, at=settings.digest_at, tz=settings.digest_tz
        )
        moved = await game.migrate_room_index(bus)  # rooms kept before the index (see rooms)
        linked = await upgrade_chat_links(bus)  # chat links kept before (see chat.directory)
        async with trio.open_nursery() as nursery:
            archiver = None
            if not settings.archive:
                await jobs.set_audit(bus, NOTIFY_QUEUE, False)  # nobody would trim the stream
            else:
                archiver = Archiver(
                    bus,
                    settings.archive_db_path,
                    open_replica(settings.replica_spec),
                    compact_segments=settings.compact_segments,
                )
                metrics.watch(archiver=archiver)
                await nursery.start(archiver.run)  # before the worker: every notice is audited
            # cm.notify: the notification worker (its own claimer and per-chat lane tasks, not
            # a Consumer) and a metronome of its own, beating faster for deferred notices.
            await nursery.start(worker.run)
            on = metrics.bus_metrics
            await nursery.start(Metronome(bus, NOTIFY_QUEUE, beat_ms=500, metrics=on).run)
            # Telegram's updates: the chat game consumes cm.updates; a poller or the webhook
            # (a route of the page server) admits them (codemojex.chat).
            bot_id, username = await identify(bot)
            chat_game = ChatGame(bus, bot_id, username, round_ms=round(settings.round_s * 1000),
                                 keep_ms=round(settings.round_keep_s * 1000))  # fmt: skip
            # cm.game (the digest) and cm.updates: each a consumer and a metronome, in one
            # Worker; on shutdown their jobs in hand go back to pending, no attempt spent.
            served = [Serve(game.GAME_QUEUE, game.game_handler(bus)), chat_game.serve()]
            await nursery.start(Worker(bus, served, metrics=on).run)
            secret = new_secret()
            webhook = Webhook(bus, bot_id, secret) if settings.updates == "webhook" else None
            routes = {} if webhook is None else {WEBHOOK_PATH: webhook.answer}
            feed = Feed(bus)
            feed_port = await nursery.start(feed.serve, settings.host, settings.feed_port)
            dash_token = os.environ.get("ECHOMQ_DASHBOARD_TOKEN") or new_token()
            dashboard = Dashboard(bus, dash_token, emoji_font=EMOJI_FONT)
            await nursery.start(dashboard.run)
            viewers = Trimmer(lambda: feed.statistics().viewers + dashboard.streams)
            nursery.start_soon(viewers.run)  # memory given back once viewers leave
            pages = PageServer(bus, feed_port, metrics, dashboard, routes)
            page_url = await nursery.start(pages.serve, settings.host, settings.page_port)
            if webhook is None:
                await nursery.start(poll_updates, bus, token, api_url, bot_id)
                updates = "polling getUpdates"
            else:
                hook_url = settings.webhook_url or page_url + WEBHOOK_PATH
                await register_webhook(bot, hook_url, secret)
                served = page_url + WEBHOOK_PATH
                updates = f"webhook {hook_url}" + ("" if hook_url == served else f" -> {served}")
            where = {"page": page_url, "feed": f"ws://{settings.host}:{feed_port}/rooms/<room>"}
            say(f"codemojex is running. Leaderboard: {page_url}")
            say(f"  metrics: {page_url}/metrics")
            say(f"  bus dashboard: {page_url}{DASHBOARD_PATH}/#token={dash_token}")
            d = settings.data_dir  # the embedded server's, recorded there for `echomq`
            say(f"  server: {bus.url}" + ("" if url else f" (data in {d}: echomq --data-dir {d})"))
            say(f"  telegram: {telegram_endpoint(api_url, local=stand_in is not None)}")
            say(f"  durability: {durability_text}")
            now = await server_time_ms(bus)
            say(f"  daily digest: {answer.value}, next run {humane.at(next_run, now)}, "
                f"daily at {settings.digest_at} {settings.digest_tz}")  # fmt: skip
            say(f"  updates: {updates}, as @{username}")
            if moved:
                say(f"  rooms: moved {moved} room(s) of the old set {LEGACY_ROOMS} into the index")
            if linked:
                say(
                    f"  chats: moved {linked} chat link(s) of {LEGACY_CHAT_ROOMS_KEY} beside the "
                    "migrated chats"
                )
            if settings.demo and stand_in is not None:  # simulated users talk in chats
                nursery.start_soon(play_in_chats, bus, stand_in.updates)
            elif settings.demo:
                keep_ms = round(settings.round_keep_s * 1000)
                nursery.start_soon(partial(demo.play, bus, round_keep_ms=keep_ms))
            if archiver is not None:
                say(f"  audit: {settings.archive_db_path}, replicated to "
                    f"{archiver.replica.describe()}")  # fmt: skip
            if (checked := ledger.describe()) is not None:
                say(f"  ledger: {checked}")
            if settings.summary_every_s > 0:
                nursery.start_soon(_summary, bus, worker, archiver, settings.summary_every_s)
            task_status.started(where)


async def _main(settings: Settings, data_dir: DataDir) -> int:
    # A second signal exits at once: the kernel drops the data-directory lock and the embedded
    # server goes with us (parent-death signal).
    await cancel_on_signal(partial(run, settings, data_dir=data_dir), announce=_shutting_down)
    say("stopped")
    return 0


def _shutting_down(signum: signal.Signals) -> None:
    say(f"{signum.name}: shutting down (again to exit at once)")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 after a clean stop, 1 when the service failed, 2 when it could not start
    (a bad setting, the data directory owned by another process, a port in use, an s3://
    replica without boto3), 128+N after a second signal N."""
    log_to_stderr()
    try:
        settings = parse_settings(argv)
        data_dir = DataDir.own(settings.data_dir)  # before any other side effect
    except (SettingsError, InUse) as exc:
        print(f"codemojex: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"codemojex: cannot use the data directory {settings.data_dir}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 2
    with data_dir:
        try:
            check_ports(settings)
            if settings.archive:
                check_replica(settings.replica_spec)  # an s3:// one needs boto3
        except (ValueError, OSError, S3Unavailable) as exc:  # SettingsError is a ValueError
            print(f"codemojex: {exc}", file=sys.stderr)
            data_dir.abandon()  # refused before anything started: leave the directory as it was
            return 2
        try:
            return trio.run(_main, settings, data_dir)
        except (Exception, BaseExceptionGroup) as exc:
            first = first_error(exc, (StopConsumer, BusError, OSError, InUse, TelegramRefused))
            if first is None:
                raise
        print(f"codemojex: {first}", file=sys.stderr)
        data_dir.abandon()  # what a failed start made goes; a directory holding data stays
        return 2 if isinstance(first, InUse) else 1  # an archive another process holds


if __name__ == "__main__":
    relaunch()  # with the allocator that gives memory back (codemojex.allocator)
    sys.exit(main())
