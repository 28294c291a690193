"""Rounds (``RND``): a secret of six distinct emojis to guess in a room. A round's state lives
in the server under the room's hash tag (``cm:{<room>}:round:<id>``).

``start_round`` opens the round, announces it and schedules its start reminder with
``enqueue_at`` (the reminder waits on the bus, so it survives restarts); ``guess`` validates,
scores, keeps the player's best on the round's board and today's (``board``) and tells the
player; ``end_round`` closes the round and sends the results (the round's board) to the room. A
round is opened and closed by one script each (``round_start``, ``round_end``), the only writers
of its state, so a failure between steps never leaves it half changed and of concurrent
``end_round`` calls exactly one sends results. Both publish on the room's feed channel, so the
live page switches to the new round's (empty) board, or shows the ended one as final.

Lifetimes: an open round has none (a room has at most one). Ending a round sets it and its
board to expire ``ENDED_ROUND_KEEP_MS`` later (one hour), in the same script, so the page can
show a room's last results for a while and the server keeps at most an hour of ended rounds:
about 110 rounds per room at the demo's pace (30 s rounds), two keys each.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs

from codemojex import ids
from codemojex.game import board
from codemojex.game.rooms import get_player, get_room, player_names
from codemojex.game.rules import MAX_START_DELAY_MS, TOP_N, GameError
from codemojex.game.scoring import ALPHABET, SIZE, Score, parse_emojis, score
from codemojex.game.texts import Text, bold, escape, html, plain
from codemojex.keys import room_keys
from codemojex.notify.notice import Notice, encode
from codemojex.notify.notifier import NOTIFY_QUEUE, notify
from codemojex.store import items, script, server_time_ms, text, text_or_none
from echomq_trio import Bus, Seq, jobs

__all__ = [
    "ENDED_ROUND_KEEP_MS",
    "GuessResult",
    "LatestRound",
    "Round",
    "RoundView",
    "current_round",
    "describe",
    "end_round",
    "guess",
    "latest_round",
    "round_view",
    "standings_html",
    "standings_text",
    "start_round",
]

ENDED_ROUND_KEEP_MS = 3_600_000  # an ended round and its board expire an hour after it ends
MIN_KEEP_MS = 1_000  # the results are read from the round's board just after it ends


@attrs.frozen
class Round:
    id: str
    room: str
    starts_at_ms: int
    secret: tuple[str, ...] = attrs.field(repr=False)
    thread: int | None = None  # the forum topic its notices go to (where /round was asked)


@attrs.frozen
class LatestRound:
    """The round a room's live board shows: its open round, else the last one it ended."""

    id: str
    open: bool


@attrs.frozen
class RoundView:
    """What the live page shows of a round: when it starts and is meant to end (server ms; no
    end when none was set), how many guesses it had, and its secret once it has ended."""

    starts_at_ms: int
    ends_at_ms: int | None
    guesses: int
    secret: str | None  # only once the round is over


@attrs.frozen
class GuessResult:
    score: Score
    best: int  # the player's best in this round
    improved: bool
    rank: int | None  # on this round's board


async def start_round(
    bus: Bus,
    room_id: str,
    *,
    starts_in_ms: int = 60_000,
    rng: random.Random | None = None,
    lasts_ms: int | None = None,
    thread: int | None = None,
) -> Round:
    """Draw a secret, open the round, announce it now, and schedule its start reminder.
    ``lasts_ms``, when given, is how long the round is meant to last from its start: the live
    page counts down to it (ending the round is still ``end_round``'s). ``thread``, when given,
    is the forum topic of the room's chat where the round is played: its announcement,
    reminder and results go there.

    Opening is one script (``round_start``): it checks the room exists and has no open round
    (``GameError`` "a round is already open in <title>" otherwise), creates the round and points
    the room at it, or changes nothing. The notices live in the notify queue's slot, so they
    are enqueued after it."""
    if (
        isinstance(starts_in_ms, bool)
        or not isinstance(starts_in_ms, int)
        or not 0 <= starts_in_ms <= MAX_START_DELAY_MS
    ):
        raise GameError(f"starts_in_ms must be an int in 0..{MAX_START_DELAY_MS}")
    if lasts_ms is not None and (
        isinstance(lasts_ms, bool) or not isinstance(lasts_ms, int) or lasts_ms < 1
    ):
        raise GameError("lasts_ms must be a positive int")
    if thread is not None and (isinstance(thread, bool) or not isinstance(thread, int)
                               or thread < 1):  # fmt: skip
        raise GameError("thread must be a positive int (a forum topic's message_thread_id)")
    room = await get_room(bus, room_id)
    secret = tuple((rng or random.SystemRandom()).sample(ALPHABET, SIZE))
    round_id = ids.new(ids.ROUND)
    k = room_keys(room.id)
    got = await _START.run(
        bus,
        [k.room, k.round(round_id), k.round_stem],
        [round_id, "".join(secret), str(starts_in_ms), board.feed_channel(room.id), room.id,
         "" if lasts_ms is None else str(lasts_ms), "" if thread is None else str(thread),
         str(await jobs.clock_total(bus, NOTIFY_QUEUE))],
    )  # fmt: skip
    if got["outcome"] == "open":
        raise GameError(f"a round is already open in {room.title}")
    if got["outcome"] != "opened":
        raise GameError(f"no room {room.id}")
    rnd = Round(round_id, room.id, int(got["starts_at_ms"]), secret, thread)
    started = plain(f"⏰ Round {rnd.id} has started: guess the 6 emojis!")
    reminder = Notice(room.chat, started.body, started.opts(thread), id=ids.new(ids.NOTICE),
                      due_ms=rnd.starts_at_ms)  # fmt: skip
    # In starts_in_ms, a wait of a length: a step of the server clock does not move it.
    await jobs.enqueue_in(bus, NOTIFY_QUEUE, encode(reminder), starts_in_ms,
                          group=str(room.chat))  # fmt: skip
    announced = html(f"🎲 New round {rnd.id} in {bold(escape(room.title))}: it starts in "
                     f"{starts_in_ms // 1000} s. Emojis: {''.join(ALPHABET)}")  # fmt: skip
    await notify(bus, room.chat, announced.body, announced.opts(thread))
    return rnd


async def current_round(bus: Bus, room_id: str) -> Round:
    room = await get_room(bus, room_id)
    k = room_keys(room.id)
    rnd = text_or_none(await bus.command("HGET", k.room, "round"))
    if not rnd:
        raise GameError(f"no round is open in {room.title}")
    secret, starts_at, status, thread, total = map(text_or_none, items(await bus.command(
        "HMGET", k.round(rnd), "secret", "starts_at_ms", "status", "thread", "clock_total",
    )))  # fmt: skip
    if secret is None or starts_at is None or status != "open":
        raise GameError(f"no round is open in {room.title}")
    since = await _stepped_since(bus, total)
    return Round(rnd, room.id, int(starts_at) + since, tuple(secret),
                 None if thread is None else int(thread))  # fmt: skip


async def _stepped_since(bus: Bus, noted: object) -> int:
    """How far the server clock has stepped since a round noted the sum of its steps (its
    ``clock_total``): the round's times are kept as written, so one started before a step an
    hour back reads an hour late until this is added."""
    at_open = 0 if noted is None else int(text(noted))
    return await jobs.clock_total(bus, NOTIFY_QUEUE) - at_open


async def latest_round(bus: Bus, room_id: str) -> LatestRound | None:
    """The room's open round, else the last round it ended while that is kept (see
    ``ENDED_ROUND_KEEP_MS``), else ``None`` (also for a room that does not exist)."""
    if not ids.is_valid(room_id, ids.ROOM):
        raise GameError(f"not a room id: {room_id!r}")
    k = room_keys(room_id)
    for rnd in map(text_or_none, items(await bus.command("HMGET", k.room, "round", "last"))):
        if rnd:
            status = text_or_none(await bus.command("HGET", k.round(rnd), "status"))
            if status is not None:
                return LatestRound(rnd, status == "open")
    return None


async def round_view(bus: Bus, room_id: str, round_id: str) -> RoundView | None:
    """The live page's view of a round, or ``None`` once it has expired. Read only."""
    starts, ends, guesses, status, secret, total = map(text_or_none, items(await bus.command(
        "HMGET", room_keys(room_id).round(round_id), "starts_at_ms", "ends_at_ms", "guesses",
        "status", "secret", "clock_total",
    )))  # fmt: skip
    if status is None or starts is None:
        return None
    since = await _stepped_since(bus, total)
    return RoundView(
        starts_at_ms=int(starts) + since,
        ends_at_ms=None if ends is None else int(ends) + since,
        guesses=int(guesses or 0),
        secret=None if status == "open" else secret,
    )


def describe(result: Score) -> str:
    marks = " ".join(f"{p.guess}{p.status}" for p in result.breakdown)
    return f"{result.percentage}% ({result.total}/600): {marks}"


async def guess(
    bus: Bus,
    room_id: str,
    player_id: str,
    text: str | Sequence[str],
    *,
    key: str | Seq | None = None,
) -> GuessResult:
    """Score a guess of exactly six emojis from the alphabet against the open round, keep the
    player's best on the round's board and today's, and notify the player of their best and
    rank in the round. ``key`` makes the notice once (``notify``): a guess made again with the
    same key (a handler run again after a crash) tells the player once."""
    try:
        emojis = parse_emojis(text)
    except ValueError as exc:
        raise GameError(str(exc)) from exc
    player = await get_player(bus, player_id)
    rnd = await current_round(bus, room_id)
    now = await server_time_ms(bus)
    if now < rnd.starts_at_ms:
        raise GameError(f"the round starts in {(rnd.starts_at_ms - now + 999) // 1000} s")
    result = score(rnd.secret, emojis)
    recorded = await board.record(bus, room_id, rnd.id, player.id, result.percentage)
    standing = await board.rank(bus, board.round_board(room_id, rnd.id), player.id)
    told = plain(f"{describe(result)} · round best {recorded.best}% · rank {standing}")
    await notify(bus, player.chat, told.body, told.opts(), key=key)
    return GuessResult(result, recorded.best, recorded.improved, standing)


def standings_html(title: str, standings: Sequence[board.Standing], names: dict[str, str]) -> str:
    """The standings under ``title``, as a piece of HTML: the title and the names escaped."""
    if not standings:
        return f"{escape(title)}: no scores yet."
    lines = [f"{s.rank}. {escape(names.get(s.player, s.player))} {s.percentage}%"
             for s in standings]  # fmt: skip
    return f"🏆 {escape(title)}\n" + "\n".join(lines)


def standings_text(title: str, standings: Sequence[board.Standing], names: dict[str, str]) -> Text:
    """The standings under ``title`` as a text of their own (HTML: ``standings_html``)."""
    return html(standings_html(title, standings, names))


async def end_round(
    bus: Bus, room_id: str, *, keep_ms: int = ENDED_ROUND_KEEP_MS
) -> list[board.Standing]:
    """Close the open round and send the room its secret and the round's standings.

    Closing is one script (``round_end``): it ends the round, clears the room's pointer and
    sets the round and its board to expire after ``keep_ms`` (at least 1000) together. Of
    concurrent calls exactly one ends the round and sends the results; the others raise
    ``GameError`` "no round is open in <title>", as a call with no round open does."""
    if isinstance(keep_ms, bool) or not isinstance(keep_ms, int) or keep_ms < MIN_KEEP_MS:
        raise ValueError(f"keep_ms must be an int >= {MIN_KEEP_MS}, got {keep_ms!r}")
    room = await get_room(bus, room_id)
    k = room_keys(room.id)
    got = await _END.run(
        bus,
        [k.room, k.round_stem, k.round_board_stem],
        [str(keep_ms), board.feed_channel(room.id), room.id],
    )
    if got["outcome"] != "ended":
        raise GameError(f"no round is open in {room.title}")
    round_id, secret, thread = got["round"], got["secret"], got["thread"]
    standings = await board.top(bus, board.round_board(room.id, round_id), TOP_N)
    names = await player_names(bus, [s.player for s in standings])
    results = html(
        f"Round over, the secret was {bold(secret)}\n"
        + standings_html(f"{room.title}, round {round_id}", standings, names)
    )
    await notify(bus, room.chat, results.body, results.opts(int(thread) if thread else None))
    return standings


_START, _END = script("round_start"), script("round_end")
