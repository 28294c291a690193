"""The key schema of the app (pure): every key ``codemojex`` keeps on the server, declared once.

Three places hold them. The app's own keys start ``cm:``: a few global ones (the index of
rooms, the players) and a room's, which carry the room's id as hash tag (``cm:{<room>}:...``),
so a room's record, rounds and boards share one cluster slot and one script touches them
together. The keys that must sit beside a bus queue (the migrated chats and the chat links, the
rate limiter's logs, a chat's streak of 429s) are that queue's app keys
(``bus.keys(queue).app(name)``, ``echomq_trio.keys.QueueKeys.app``). ``SCHEMA`` names each key
(or pattern: ``<...>`` marks the variable part), its place, its Redis type and what it holds;
``RoomKeys``, ``QueueAppKeys`` and the functions below build them by name, and no other module
spells one. Names on the server are as they always were: data written before this schema reads.

The Lua mirror: an app script gets every key it touches in KEYS, built here (a key with a
variable part the script learns, such as the day of today's board or a quiet chat's log, comes
as its ``stem``: the key up to that part). Each script's header names its KEYS by their names
in ``SCHEMA`` (``-- KEYS[2] round_board: cm:{<room>}:board:round:<round>``), and
``codemojex.scripts`` lists the same names for the Python that calls it;
``tests/codemojex/test_keys.py`` fails when a header, the Python and ``SCHEMA`` disagree or a
script derives a key by pattern.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import attrs

from codemojex import ids
from echomq_trio.keys import queue_keys

__all__ = [
    "FEED_PATTERN",
    "QUEUES",
    "SCHEMA",
    "AppKey",
    "QueueAppKeys",
    "RoomKeys",
    "feed_channel",
    "global_key",
    "queue_app_keys",
    "room_keys",
]

Place = Literal["global", "room", "queue", "channel"]

_APP = "cm:"  # every key of the app's own starts so
# A queue's app key as the scripts' headers show it: the bus's prefix with <queue> for the name.
_QUEUE_APP_SHOWN = queue_keys("QUEUE").app("x")[: -len("x")].replace("QUEUE", "<queue>")


@attrs.frozen
class AppKey:
    """One key of the app: ``name`` (as the stores and the scripts' headers call it), its
    ``place`` (``global``: ``cm:<pattern>``; ``room``: ``cm:{<room>}:<pattern>``; ``queue``: a
    queue's app key ``bus.keys(queue).app(pattern)``; ``channel``: a pub/sub channel
    ``cm:<pattern>``, no key), its ``pattern`` there, Redis ``type`` and ``meaning``."""

    name: str
    place: Place
    pattern: str
    type: str
    meaning: str

    @property
    def stem(self) -> str:
        """The fixed part of the pattern: all of it, or what stands before ``<...>``."""
        return self.pattern.split("<", 1)[0]

    @property
    def variable(self) -> bool:
        return "<" in self.pattern

    @property
    def shown(self) -> str:
        """The whole key as a pattern, as the scripts' headers write it."""
        return {
            "global": _APP + self.pattern,
            "channel": _APP + self.pattern,
            "room": _APP + "{<room>}:" + self.pattern,
            "queue": _QUEUE_APP_SHOWN + self.pattern,
        }[self.place]


SCHEMA: tuple[AppKey, ...] = (
    # global
    AppKey("room_index", "global", "room-index", "zset", "every room's id, score 0 (ordered by id: mint order)"),  # noqa: E501
    AppKey("legacy_rooms", "global", "rooms", "set", "every room's id as written before the index; moved into it at start"),  # noqa: E501
    AppKey("players", "global", "players", "hash", "player id -> JSON {name, chat}"),
    AppKey("players_by_user", "global", "tg-players", "hash", "Telegram user id -> player id"),
    AppKey("legacy_chat_rooms", "global", "chat-rooms", "hash", "chat id -> room id as written before the links lived in the notify queue's slot; moved at start"),  # noqa: E501
    AppKey("demo", "global", "demo", "string", "JSON {rooms, players}: what the demo made"),
    # a room's, one slot
    AppKey("room", "room", "room", "hash", "the room's record: chat, title; round (its open round), last (the last it ended)"),  # noqa: E501
    AppKey("round", "room", "round:<round>", "hash", "a round: secret, starts_at_ms, status (open, ended), opened_ms, ends_at_ms, thread, clock_total, guesses, ended_ms"),  # noqa: E501
    AppKey("round_board", "room", "board:round:<round>", "zset", "a round's board: player -> best score (percentage packed with when)"),  # noqa: E501
    AppKey("day_board", "room", "board:day:<day>", "zset", "a UTC day's board: player -> best score that day"),  # noqa: E501
    # beside a bus queue (the notify queue), in its slot
    AppKey("migrations", "queue", "migrated", "hash", "old chat id -> new chat id (Telegram's group upgrades)"),  # noqa: E501
    AppKey("chat_links", "queue", "chat-rooms", "hash", "chat id -> the room that plays there"),
    AppKey("flooded", "queue", "flooded:<chat>", "string", "a chat's streak of 429s: set at its first, deleted at a delivery; its lifetime tells the streak's length"),  # noqa: E501
    AppKey("rate_global", "queue", "rate:global", "zset", "the bot's send log: member slot:seq, score: when"),  # noqa: E501
    AppKey("rate_chat", "queue", "rate:chat:<chat>", "zset", "a chat's send log (as rate_global)"),
    AppKey("rate_chats", "queue", "rate:chats", "zset", "chats with a log; score: when the log may be forgotten"),  # noqa: E501
    AppKey("rate_reserved", "queue", "rate:rsv:<chat>", "string", "a chat's reserved slot in the logs (a member), with a lifetime"),  # noqa: E501
    AppKey("rate_paused", "queue", "rate:paused", "zset", "chats paused after a 429; score: the pause's end"),  # noqa: E501
    AppKey("rate_pause_global", "queue", "rate:pause:global", "string", "the end of the bot's pause after a 429"),  # noqa: E501
    AppKey("rate_pause_outage", "queue", "rate:pause:outage", "string", "the end of the hold while Telegram answers nobody"),  # noqa: E501
    AppKey("rate_clock", "queue", "rate:clock", "hash", "the limiter's own clock: the queue's clock_total at its first use"),  # noqa: E501
    AppKey("rate_seq", "queue", "rate:seq", "string", "the counter that numbers the logs' members"),
    # pub/sub
    AppKey("feed", "channel", "board:<room>", "channel", "a room's board changed (the room id): live pages redraw"),  # noqa: E501
)  # fmt: skip

_SPECS = {spec.name: spec for spec in SCHEMA}

# The bus queues the app keeps (their keys are the bus's, ``echomq_trio.keys``): the notices to
# send (with the app keys above in its slot), the game's own jobs (round ends, the digest), and
# Telegram's updates to handle.
QUEUES: dict[str, str] = {"notify": "cm.notify", "game": "cm.game", "updates": "cm.updates"}


def _spec(name: str) -> AppKey:
    return _SPECS[name]


def global_key(name: str) -> str:
    """A global key by its ``SCHEMA`` name (``global_key("players") == "cm:players"``)."""
    spec = _SPECS.get(name)
    if spec is None or spec.place != "global":
        raise ValueError(f"no global key {name!r}")
    return _APP + spec.pattern


ROOM_INDEX = global_key("room_index")
LEGACY_ROOMS = global_key("legacy_rooms")
PLAYERS = global_key("players")
PLAYERS_BY_USER = global_key("players_by_user")
LEGACY_CHAT_ROOMS = global_key("legacy_chat_rooms")
DEMO = global_key("demo")
FEED_PATTERN = _APP + _spec("feed").stem + "*"  # every room's feed channel


def feed_channel(room: str) -> str:
    """The pub/sub channel where a room's board changes are told (``cm:board:<room>``)."""
    return _APP + _spec("feed").stem + room


def _room_prefix(room: str) -> str:
    return f"{_APP}{{{room}}}:"


def _check_room(room: str) -> str:
    if not ids.is_valid(room, ids.ROOM):
        raise ValueError(f"room must be an RMM id, got {room!r}")
    return room


def _check_round(round_id: str) -> str:
    if not ids.is_valid(round_id, ids.ROUND):
        raise ValueError(f"round must be an RND id, got {round_id!r}")
    return round_id


@attrs.frozen
class RoomKeys:
    """The keys of one room (its id is their hash tag: one slot). Built by ``room_keys``."""

    id: str
    prefix: str  # cm:{<room>}:

    @property
    def room(self) -> str:
        return self.prefix + _spec("room").pattern

    def round(self, round_id: str) -> str:
        """A round's state (checks that ``round_id`` is an RND id)."""
        return self.round_stem + _check_round(round_id)

    def round_board(self, round_id: str) -> str:
        return self.round_board_stem + _check_round(round_id)

    def day_board(self, day: int) -> str:
        if isinstance(day, bool) or not isinstance(day, int) or day < 0:
            raise ValueError(f"day must be a day number >= 0, got {day!r}")
        return self.day_board_stem + str(day)

    @property
    def round_stem(self) -> str:
        """``round``'s key up to the round id: for a script that learns the id itself."""
        return self.prefix + _spec("round").stem

    @property
    def round_board_stem(self) -> str:
        return self.prefix + _spec("round_board").stem

    @property
    def day_board_stem(self) -> str:
        return self.prefix + _spec("day_board").stem


def room_keys(room: str) -> RoomKeys:
    """The keys of room ``room`` (checks that it is an RMM id)."""
    return RoomKeys(_check_room(room), _room_prefix(room))


def room_key(room: str, suffix: str) -> str:
    """``cm:{<room>}:<suffix>``: one of a room's keys by its pattern filled in (the room's
    record is ``room_key(room, "room")``); prefer ``room_keys``."""
    return _room_prefix(room) + suffix


@attrs.frozen
class QueueAppKeys:
    """The app's keys in a bus queue's slot (the notify queue's). Built by ``queue_app_keys``."""

    queue: str
    migrations: str
    chat_links: str
    rate_prefix: str  # the queue's app key rate: (every rate_* key starts so)
    rate_global: str
    rate_chats: str
    rate_paused: str
    rate_pause_global: str
    rate_pause_outage: str
    rate_clock: str
    rate_seq: str
    rate_chat_stem: str
    rate_reserved_stem: str
    flooded_stem: str

    def flooded(self, chat: int) -> str:
        """A chat's streak of 429s."""
        return self.flooded_stem + str(chat)

    def rate_chat(self, chat: int) -> str:
        return self.rate_chat_stem + str(chat)


@lru_cache(maxsize=64)  # bounded: the app keeps its keys beside one or two queues
def queue_app_keys(queue: str) -> QueueAppKeys:
    """The app's keys beside ``queue`` (checks the queue's name, as ``Bus.keys`` does)."""
    k = queue_keys(queue)
    fixed = {s.name: k.app(s.pattern) for s in SCHEMA if s.place == "queue" and not s.variable}
    stems = {s.name + "_stem": k.app(s.stem) for s in SCHEMA if s.place == "queue" and s.variable}
    return QueueAppKeys(queue=queue, rate_prefix=k.app("rate:"), **fixed, **stems)
