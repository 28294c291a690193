"""The game: rooms (``RMM``), players (``USR``) and rounds (``RND``) with a secret of six
distinct emojis. State lives in the server, keys tagged per room (``cm:{<room>}:...``).

``start_round`` opens the round, announces it and schedules its start reminder with
``enqueue_at`` (the reminder waits on the bus, so it survives restarts); ``guess`` validates,
scores, keeps the player's best on the board and tells the player; ``end_round`` closes the
round and sends the results to the room. A round is opened and closed by one script each
(``round_start``, ``round_end``), the only writers of its state, so a failure between steps
never leaves it half changed and of concurrent ``end_round`` calls exactly one sends results.
Names and titles are limited (``MAX_NAME``, ``MAX_TITLE``) so every message fits Telegram.
The daily standings digest is a recurring schedule on ``cm.game`` (``register_digest``), whose
occurrences ``send_digest`` turns into one top-10 notice per room. That fan-out is idempotent:
each room's notice carries the idempotency key ``digest:<occurrence job id>:<room>``, so when
the occurrence is retried the rooms already admitted answer duplicate and only the rest go.
Rooms go independently: one that fails is logged and the others still go.
"""

from __future__ import annotations

import json
import logging
import random
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import attrs

from codemojex import ids
from codemojex.game import board
from codemojex.game.scoring import ALPHABET, SIZE, Score, parse_emojis, score
from codemojex.notify import notifier
from codemojex.notify.notice import Notice, check_notice, encode
from codemojex.notify.notifier import NOTIFY_QUEUE, notify
from echomq_trio import Bury, Bus, BusError, Job, jobs, repeat
from echomq_trio.keys import as_text
from echomq_trio.repeat import Registered

__all__ = [
    "DIGEST_NAME",
    "GAME_QUEUE",
    "MAX_NAME",
    "MAX_START_DELAY_MS",
    "MAX_TITLE",
    "TOP_N",
    "DigestIncomplete",
    "GameError",
    "GuessResult",
    "Notify",
    "Player",
    "Room",
    "Round",
    "check_label",
    "create_player",
    "create_room",
    "digest_text",
    "end_round",
    "game_handler",
    "guess",
    "list_rooms",
    "register_digest",
    "send_digest",
    "start_round",
]

GAME_QUEUE = "cm.game"
DIGEST_NAME = "daily-standings"
DAY_MS = 86_400_000
ROOMS_KEY = "cm:rooms"
PLAYERS_KEY = "cm:players"

# Input limits, all in one place. Every message the game builds must fit Telegram's 4096
# characters, counted as Telegram counts them (UTF-16 code units, so a character outside the
# Basic Multilingual Plane counts 2). The worst cases, every character of a name or title
# counting 2 and TOP_N standings of 100%: round results 1,670 (about 45 + 2·MAX_TITLE +
# TOP_N·(10 + 2·MAX_NAME)); daily digest 1,647; round announcement 368; guess reply about 100
# (with the rank's digits); start reminder 55. tests/codemojex/game/test_game.py builds each message
# at these limits and checks it fits. Names and titles holding control or format characters
# or line breaks (Unicode categories Cc, Cf, Cs, Zl, Zp; the zero-width joiner of emoji
# sequences is allowed) are refused too, so no input can forge lines of a message.
MAX_NAME = 64  # a player's name, in characters (Telegram allows 64 for a first name)
MAX_TITLE = 128  # a room's title, in characters (Telegram's limit for a chat title)
MAX_START_DELAY_MS = 7 * DAY_MS  # how far ahead a round may start
TOP_N = 10  # standings in the round results and the daily digest
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_ZWJ = "\u200d"


log = logging.getLogger("codemojex.game")


class GameError(ValueError):
    """A move the game refuses (no open round, unknown room or player, bad guess)."""


class DigestIncomplete(Exception):
    """Some rooms' digest notices failed for a reason that may pass (the server, the network).
    The other rooms went; raised so the occurrence is retried, which sends only the rest."""


class Notify(Protocol):
    """What the game sends notices with: ``codemojex.notify.notifier.notify`` (a seam for tests)."""

    async def __call__(
        self, bus: Bus, chat: int, text: str, *, key: str | None = None
    ) -> str | None: ...


@attrs.frozen
class Room:
    id: str
    chat: int
    title: str


@attrs.frozen
class Player:
    id: str
    name: str
    chat: int


@attrs.frozen
class Round:
    id: str
    room: str
    starts_at_ms: int
    secret: tuple[str, ...] = attrs.field(repr=False)


@attrs.frozen
class GuessResult:
    score: Score
    best: int
    improved: bool
    rank: int | None


def _k(room: str, suffix: str) -> str:
    return f"cm:{{{room}}}:{suffix}"


def check_label(field: str, value: object, limit: int) -> str:
    """``value`` without surrounding spaces, if it is 1-``limit`` characters with no control
    or format characters and no line breaks; ``GameError`` naming the field and limit if not."""
    raw = value if isinstance(value, str) else ""
    text = raw.strip()
    refused = any(unicodedata.category(c) in _REFUSED_CATEGORIES and c != _ZWJ for c in raw)
    if refused or not 1 <= len(text) <= limit:
        raise GameError(
            f"{field} must be 1-{limit} characters without control characters or newlines"
        )
    return text


async def create_room(bus: Bus, chat: int, title: str) -> Room:
    """A room for a Telegram chat (usually a group: a negative id). The title is 1-``MAX_TITLE``
    characters without control characters or newlines (``GameError`` otherwise)."""
    title = check_label("room title", title, MAX_TITLE)
    check_notice(chat, title, None)
    room = Room(ids.new(ids.ROOM), chat, title)
    await bus.wire.command("HSET", _k(room.id, "room"), "chat", str(chat), "title", title)
    await bus.wire.command("SADD", ROOMS_KEY, room.id)
    return room


async def get_room(bus: Bus, room_id: str) -> Room:
    if not ids.is_valid(room_id, ids.ROOM):
        raise GameError(f"not a room id: {room_id!r}")
    chat, title = await bus.wire.command("HMGET", _k(room_id, "room"), "chat", "title")
    if chat is None:
        raise GameError(f"no room {room_id}")
    return Room(room_id, int(chat), as_text(title))


async def list_room_ids(bus: Bus) -> list[str]:
    members = await bus.wire.command("SMEMBERS", ROOMS_KEY)
    return sorted(as_text(m) for m in members or [])


async def list_rooms(bus: Bus) -> list[Room]:
    return [await get_room(bus, room_id) for room_id in await list_room_ids(bus)]


async def create_player(bus: Bus, name: str, chat: int) -> Player:
    """A player, reachable in the private chat ``chat``. The name is 1-``MAX_NAME`` characters
    without control characters or newlines (``GameError`` otherwise)."""
    name = check_label("player name", name, MAX_NAME)
    check_notice(chat, name, None)
    player = Player(ids.new(ids.USER), name, chat)
    await bus.wire.command("HSET", PLAYERS_KEY, player.id,
                           json.dumps({"name": player.name, "chat": chat}))  # fmt: skip
    return player


async def get_player(bus: Bus, player_id: str) -> Player:
    if not ids.is_valid(player_id, ids.USER):
        raise GameError(f"not a player id: {player_id!r}")
    raw = await bus.wire.command("HGET", PLAYERS_KEY, player_id)
    if raw is None:
        raise GameError(f"no player {player_id}")
    data = json.loads(raw)
    return Player(player_id, data["name"], int(data["chat"]))


async def player_names(bus: Bus, player_ids: Sequence[str]) -> dict[str, str]:
    if not player_ids:
        return {}
    raw = await bus.wire.command("HMGET", PLAYERS_KEY, *player_ids)
    return {
        p: (json.loads(r)["name"] if r is not None else p)
        for p, r in zip(player_ids, raw, strict=True)
    }


async def start_round(
    bus: Bus, room_id: str, *, starts_in_ms: int = 60_000, rng: random.Random | None = None
) -> Round:
    """Draw a secret, open the round, announce it now, and schedule its start reminder.

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
    room = await get_room(bus, room_id)
    secret = tuple((rng or random.SystemRandom()).sample(ALPHABET, SIZE))
    round_id = ids.new(ids.ROUND)
    code, value = await bus.wire.script(
        "codemojex.game/round_start",
        [_k(room.id, "room"), _k(room.id, f"round:{round_id}")],
        [round_id, "".join(secret), str(starts_in_ms)],
    )
    if code == 0:
        raise GameError(f"a round is already open in {room.title}")
    if code < 0:
        raise GameError(f"no room {room.id}")
    rnd = Round(round_id, room.id, int(value), secret)
    reminder = Notice(room.chat, f"⏰ Round {rnd.id} has started: guess the 6 emojis!",
                      id=ids.new(ids.NOTICE))  # fmt: skip
    await jobs.enqueue_at(bus, NOTIFY_QUEUE, ids.new(ids.JOB), encode(reminder), rnd.starts_at_ms,
                          group=str(room.chat))  # fmt: skip
    await notify(bus, room.chat, f"🎲 New round {rnd.id} in {room.title}: it starts in "
                 f"{starts_in_ms // 1000} s. Emojis: {''.join(ALPHABET)}")  # fmt: skip
    return rnd


async def current_round(bus: Bus, room_id: str) -> Round:
    room = await get_room(bus, room_id)
    rnd = await bus.wire.command("HGET", _k(room.id, "room"), "round")
    if not rnd:
        raise GameError(f"no round is open in {room.title}")
    secret, starts_at, status = await bus.wire.command(
        "HMGET", _k(room.id, f"round:{as_text(rnd)}"), "secret", "starts_at_ms", "status"
    )
    if secret is None or as_text(status) != "open":
        raise GameError(f"no round is open in {room.title}")
    return Round(as_text(rnd), room.id, int(starts_at), tuple(as_text(secret)))


def describe(result: Score) -> str:
    marks = " ".join(f"{p.guess}{p.status}" for p in result.breakdown)
    return f"{result.percentage}% ({result.total}/600): {marks}"


async def guess(bus: Bus, room_id: str, player_id: str, text: str | Sequence[str]) -> GuessResult:
    """Score a guess of exactly six emojis from the alphabet against the open round, keep the
    player's best on the board, and notify the player."""
    try:
        emojis = parse_emojis(text)
    except ValueError as exc:
        raise GameError(str(exc)) from exc
    player = await get_player(bus, player_id)
    rnd = await current_round(bus, room_id)
    now = await bus.wire.server_time_ms()
    if now < rnd.starts_at_ms:
        raise GameError(f"the round starts in {(rnd.starts_at_ms - now + 999) // 1000} s")
    result = score(rnd.secret, emojis)
    recorded = await board.record(bus, room_id, player.id, result.percentage)
    standing = await board.rank(bus, room_id, player.id)
    await notify(bus, player.chat, f"{describe(result)} · best {recorded.best}% · rank {standing}")
    return GuessResult(result, recorded.best, recorded.improved, standing)


def standings_text(title: str, standings: Sequence[board.Standing], names: dict[str, str]) -> str:
    if not standings:
        return f"{title}: no scores yet."
    lines = [f"{s.rank}. {names.get(s.player, s.player)} {s.percentage}%" for s in standings]
    return f"🏆 {title}\n" + "\n".join(lines)


async def end_round(bus: Bus, room_id: str) -> list[board.Standing]:
    """Close the open round and send the room its secret and standings.

    Closing is one script (``round_end``): it ends the round and clears the room's pointer
    together. Of concurrent calls exactly one ends the round and sends the results; the others
    raise ``GameError`` "no round is open in <title>", as a call with no round open does."""
    room = await get_room(bus, room_id)
    reply = await bus.wire.script("codemojex.game/round_end", [_k(room.id, "room")], [])
    if reply[0] != 1:
        raise GameError(f"no round is open in {room.title}")
    secret = as_text(reply[2])
    standings = await board.top(bus, room.id, TOP_N)
    names = await player_names(bus, [s.player for s in standings])
    await notify(bus, room.chat, f"Round over, the secret was {secret}\n"
                 + standings_text(room.title, standings, names))  # fmt: skip
    return standings


async def digest_text(bus: Bus, room: Room) -> str:
    standings = await board.top(bus, room.id, TOP_N)
    names = await player_names(bus, [s.player for s in standings])
    return standings_text(f"Daily standings, {room.title}", standings, names)


async def send_digest(bus: Bus, occurrence: str, *, notify: Notify = notifier.notify) -> int:
    """Send every room its top 10 for the digest occurrence ``occurrence`` (its job id) through
    the notification pipeline; returns how many rooms' notices are admitted (now or by an
    earlier attempt of the occurrence, whose key makes this one a duplicate).

    Each room goes on its own: a room whose notice is invalid (``ValueError``, which includes a
    ``GameError``) is logged and skipped for good; any other failure is logged, the other rooms
    still go, and ``DigestIncomplete`` is raised at the end so the occurrence is retried."""
    room_ids = await list_room_ids(bus)
    admitted = 0
    failed: list[str] = []
    for room_id in room_ids:
        try:
            room = await get_room(bus, room_id)
            text = await digest_text(bus, room)
            await notify(bus, room.chat, text, key=f"digest:{occurrence}:{room_id}")
            admitted += 1
        except ValueError as exc:
            log.warning("digest %s: room %s skipped, its notice is invalid: %s",
                        occurrence, room_id, exc)  # fmt: skip
        except BusError as exc:
            log.warning("digest %s: room %s failed, to be retried: %s", occurrence, room_id, exc)
            failed.append(room_id)
        except Exception:
            log.exception("digest %s: room %s failed, to be retried", occurrence, room_id)
            failed.append(room_id)
    if failed:
        raise DigestIncomplete(
            f"digest {occurrence}: {len(failed)} of {len(room_ids)} rooms failed "
            f"({', '.join(failed)}); the others were sent"
        )
    return admitted


async def register_digest(
    bus: Bus, *, every_ms: int = DAY_MS, first_in_ms: int | None = None
) -> tuple[Registered, int]:
    """Register the daily digest on ``cm.game`` (idempotent: a live registration is kept)."""
    first = every_ms if first_in_ms is None else first_in_ms
    return await repeat.register(bus, GAME_QUEUE, DIGEST_NAME, every_ms, "digest", first)


def game_handler(
    bus: Bus, *, notify: Notify = notifier.notify
) -> Callable[[Job], Awaitable[Bury | None]]:
    """The handler of ``cm.game`` jobs: ``digest`` occurrences send the standings digest (a
    ``DigestIncomplete`` raised for rooms that failed makes the consumer retry the job)."""

    async def handle(job: Job) -> Bury | None:
        if job.payload == b"digest":
            await send_digest(bus, job.id, notify=notify)
            return None
        return Bury(f"unknown game job {job.payload[:40]!r}")

    return handle
