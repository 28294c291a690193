"""What the app's stores share (rooms, rounds, boards, the directory, the limiter, the
migrations): the app's scripts as objects, replies decoded by name, and the server's clock, all
over the bus's checked seams (``Bus.run`` for a script, ``Bus.command`` for a raw command).

An app script answers a map: a flat list of field names and values (``{'outcome', 'opened',
'starts_at_ms', at}``), which ``fields`` reads by name, so the order is the script's own
business and a field added never shifts another. ``AppScript`` holds a script's name and the
``SCHEMA`` names of its KEYS, in order: the same names its Lua header gives them
(``tests/codemojex/test_keys.py`` holds the two together).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from echomq_trio import Bus
from echomq_trio.protocol import Call

__all__ = [
    "SCRIPTS",
    "AppScript",
    "fields",
    "items",
    "number",
    "pairs",
    "script",
    "server_time_ms",
    "text",
    "text_or_none",
]


def text(value: object) -> str:
    """A server reply (bytes or str) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def text_or_none(value: object) -> str | None:
    return None if value is None else text(value)


def number(value: object) -> int:
    """A server reply (an integer, or its decimal text as bytes or str) as int."""
    return value if isinstance(value, int) and not isinstance(value, bool) else int(text(value))


def items(value: object) -> list[object]:
    """An array reply as a list (``None``: empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"expected an array reply, got {value!r}")
    return list(value)


def pairs(value: object) -> list[tuple[object, object]]:
    """A reply of pairs (``HSCAN``'s fields and values, ``WITHSCORES``): a flat list (RESP2) or
    a map (RESP3), in order."""
    if isinstance(value, dict):
        return list(value.items())
    flat = items(value)
    return list(zip(flat[::2], flat[1::2], strict=True))


@attrs.frozen
class AppScript:
    """One app script: its name (``package/base``, see ``echomq_trio.lua``), its KEYS by
    their ``codemojex.keys.SCHEMA`` names, in order (``*_stem``: the key up to its variable
    part; ``queue_meta``: the bus queue's meta key), and the words its ``outcome`` field takes
    (none: its answer has no outcome)."""

    name: str
    keys: tuple[str, ...]
    outcomes: tuple[str, ...] = ()

    async def run(self, bus: Bus, keys: Sequence[str], args: Sequence[str]) -> dict[str, str]:
        """Run the script on ``keys`` (as many as it names) and ``args``; its answer by name."""
        if len(keys) != len(self.keys):
            raise ValueError(f"{self.name} takes {len(self.keys)} keys, got {len(keys)}")
        return await bus.run(Call(self.name, tuple(keys), tuple(args), decode=fields))


SCRIPTS: tuple[AppScript, ...] = (
    AppScript("codemojex.game/round_start", ("room", "round", "round_stem"),
              ("opened", "open", "no_room")),
    AppScript("codemojex.game/round_end", ("room", "round_stem", "round_board_stem"),
              ("ended", "none_open")),
    AppScript("codemojex.game/board_record", ("round", "round_board", "day_board_stem"),
              ("recorded", "not_open")),
    AppScript("codemojex.notify/chat_migrate", ("migrations", "chat_links"),
              ("recorded", "known")),
    *(
        AppScript(f"codemojex.notify/{name}", (
            "rate_global", "queue_meta", "rate_clock", "rate_pause_global", "rate_pause_outage",
            "rate_paused", "rate_chats", "rate_seq", "rate_chat_stem", "rate_reserved_stem"),
            outcomes)
        for name, outcomes in (("rate_take", ("taken", "booked", "global", "chat", "paused")),
                               ("rate_sent", ()), ("rate_pause", ()))
    ),
)  # fmt: skip
_BY_NAME = {s.name.rpartition("/")[2]: s for s in SCRIPTS}


def script(base: str) -> AppScript:
    """The app script ``base`` (``"round_start"``)."""
    return _BY_NAME[base]


def fields(reply: object) -> dict[str, str]:
    """A script's map answer (a flat list of names and values, or a RESP3 map) by name."""
    if isinstance(reply, dict):
        return {text(k): text(v) for k, v in reply.items()}
    if not isinstance(reply, list) or len(reply) % 2:
        raise ValueError(f"a script answered {reply!r}, not a map of fields")
    return {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply), 2)}


async def server_time_ms(bus: Bus) -> int:
    """The server's clock, Unix ms (one ``TIME``)."""
    secs, micros = items(await bus.command("TIME"))
    return number(secs) * 1000 + number(micros) // 1000
