"""The app's key schema (``codemojex.keys``) against its Lua mirror, its stores and the server:
every app script's KEYS header names schema entries in the order the Python that calls it
passes them, no script derives a key by pattern, no module but the schema spells a key, names
on the server are the ones data was written under, and every key the app's flows leave on a
real server is declared, of its declared type."""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path

import pytest

from codemojex import ids
from codemojex.chat.directory import follow_migration, open_room, player_for
from codemojex.chat.intake import UPDATES_QUEUE
from codemojex.chat.meaning import Chat, Sender
from codemojex.game import board, rooms, rounds
from codemojex.game.digest import GAME_QUEUE
from codemojex.keys import (
    QUEUES,
    SCHEMA,
    AppKey,
    feed_channel,
    global_key,
    queue_app_keys,
    room_key,
    room_keys,
)
from codemojex.notify import streak
from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.store import SCRIPTS, fields, script
from codemojex.telegram.limits import Limits, Window
from echomq_trio import Bus, open_bus
from echomq_trio.keys import queue_keys

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "codemojex"
APP_SCRIPTS = sorted(PACKAGE.rglob("scripts/*.lua"))
SPECS = {s.name: s for s in SCHEMA}


def _code(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def _header(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip())
    return " ".join(lines)


def _header_keys(path: Path) -> list[tuple[int, str, str]]:
    """The header's KEYS: (n, schema name, the key as shown)."""
    found = re.findall(r"KEYS\[(\d+)\] (\w+): (\S+?)(?=[ ,;(]|$)", _header(path))
    return [(int(n), name, shown) for n, name, shown in found]


def _declared(name: str) -> tuple[AppKey | None, str]:
    """A header's KEYS name: its schema entry and the key as it must be shown."""
    if name == "queue_meta":
        return None, "the queue's meta"
    spec = SPECS[name.removesuffix("_stem")]
    if name.endswith("_stem"):  # the key up to its (last) variable part
        assert spec.variable, name
        return spec, spec.shown[: spec.shown.rindex("<")]
    return spec, spec.shown


# --- the schema ----------------------------------------------------------------------------------


def test_names_on_the_server_are_the_ones_data_was_written_under() -> None:
    room, rnd = "RMM" + "0" * 11, "RND" + "1" * 11
    k = room_keys(room)
    assert k.room == "cm:{" + room + "}:room" == room_key(room, "room")
    assert k.round(rnd) == "cm:{" + room + "}:round:" + rnd
    assert k.round_board(rnd) == "cm:{" + room + "}:board:round:" + rnd
    assert k.day_board(20_000) == "cm:{" + room + "}:board:day:20000"
    assert (k.round_stem, k.round_board_stem, k.day_board_stem) == (
        "cm:{" + room + "}:round:", "cm:{" + room + "}:board:round:", "cm:{" + room + "}:board:day:"
    )  # fmt: skip
    assert [global_key(n) for n in ("room_index", "legacy_rooms", "players", "players_by_user",
                                    "legacy_chat_rooms", "demo")] == [
        "cm:room-index", "cm:rooms", "cm:players", "cm:tg-players", "cm:chat-rooms", "cm:demo"
    ]  # fmt: skip
    assert feed_channel(room) == "cm:board:" + room
    q = queue_keys("cm.notify")
    a = queue_app_keys("cm.notify")
    assert (a.migrations, a.chat_links, a.flooded(-7)) == (
        q.app("migrated"), q.app("chat-rooms"), q.app("flooded:-7"))  # fmt: skip
    rate = q.app("rate:")
    assert a.rate_prefix == rate
    assert [a.rate_global, a.rate_chats, a.rate_paused, a.rate_pause_global, a.rate_pause_outage,
            a.rate_clock, a.rate_seq, a.rate_chat(42), a.rate_reserved_stem] == [
        rate + s for s in ("global", "chats", "paused", "pause:global", "pause:outage", "clock",
                           "seq", "chat:42", "rsv:")
    ]  # fmt: skip


def test_the_app_s_queues_are_the_schema_s() -> None:
    schema = (QUEUES["notify"], QUEUES["game"], QUEUES["updates"])
    assert schema == (NOTIFY_QUEUE, GAME_QUEUE, UPDATES_QUEUE)
    for name in QUEUES.values():
        queue_keys(name)  # a name the bus gives a queue


def test_variable_parts_are_checked() -> None:
    k = room_keys(ids.new(ids.ROOM))
    for bad in ("RMM0000", "nope", ""):
        with pytest.raises(ValueError, match="room must be an RMM id"):
            room_keys(bad)
        with pytest.raises(ValueError, match="round must be an RND id"):
            k.round(bad)
    for day in (-1, True, "3"):
        with pytest.raises(ValueError, match="day must be"):
            k.day_board(day)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no global key"):
        global_key("room")
    with pytest.raises(ValueError, match="queue"):
        queue_app_keys("a b")


def test_every_entry_is_named_once_with_a_known_place_and_type() -> None:
    assert len(SPECS) == len(SCHEMA)
    for spec in SCHEMA:
        assert spec.place in ("global", "room", "queue", "channel"), spec
        assert spec.type in ("string", "hash", "zset", "set", "channel"), spec
        assert (spec.type == "channel") == (spec.place == "channel"), spec


# --- the Lua mirror ------------------------------------------------------------------------------


def test_every_app_script_has_its_python_object() -> None:
    assert sorted(s.name.rpartition("/")[2] for s in SCRIPTS) == sorted(p.stem for p in APP_SCRIPTS)
    for s in SCRIPTS:
        package, _, base = s.name.rpartition("/")
        assert (PACKAGE / package.removeprefix("codemojex.") / "scripts" / f"{base}.lua").is_file()


@pytest.mark.parametrize("path", APP_SCRIPTS, ids=lambda p: p.stem)
def test_each_script_s_keys_header_is_the_schema_and_the_python_s(path: Path) -> None:
    declared = _header_keys(path)
    assert [n for n, _, _ in declared] == list(range(1, len(declared) + 1)), declared
    assert tuple(name for _, name, _ in declared) == script(path.stem).keys
    for _, name, shown in declared:
        spec, want = _declared(name)
        if spec is not None:
            assert shown == want, (path.stem, name, shown, want)
    uses = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", _code(path.read_text()))}
    # Every key used is declared (the limiter's scripts share one KEYS list: each uses some).
    assert uses <= {n for n, _, _ in declared}, f"{path.stem}: KEYS used {uses}"
    if not path.stem.startswith("rate_"):
        assert uses == {n for n, _, _ in declared}, f"{path.stem}: KEYS used {uses}"


@pytest.mark.parametrize("path", APP_SCRIPTS, ids=lambda p: p.stem)
def test_no_script_derives_a_key_by_pattern(path: Path) -> None:
    code = _code(path.read_text())
    assert not re.search(r"string\.(match|sub|gsub|find)\(KEYS", code), path.stem
    assert not re.search(r"ARGV\[\d+\]\s*\.\.", code), f"{path.stem} builds a key from ARGV"
    stems = {n for n, name, _ in _header_keys(path) if name.endswith("_stem")}
    for n in re.findall(r"KEYS\[(\d+)\]\s*\.\.", code):
        assert int(n) in stems, f"{path.stem}: KEYS[{n}] is no stem but is extended"
    for spec in SCHEMA:
        for piece in {spec.stem, "cm:"} - {""}:
            if ":" in piece or "-" in piece:
                assert f"'{piece}" not in code, f"{path.stem} spells {piece!r}"


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    ]  # fmt: skip


def test_no_module_but_the_schema_spells_an_app_key() -> None:
    modules = [p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "keys.py"]
    assert len(modules) > 40
    hits = [
        f"{p.relative_to(ROOT)}:{line}: {value!r}"
        for p in modules
        for line, value in _string_constants(p)
        if value.startswith("cm:") or value.startswith("{cm:")
    ]
    assert hits == []
    app_names = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in modules
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\.app\(f?[\"']", line)
    ]
    assert app_names == []


def test_the_app_makes_no_raw_client_call() -> None:
    """Raw commands go through ``Bus.command`` and scripts through ``Bus.run``: no module
    reaches the client under the bus (``bus.transport``)."""
    hits = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in PACKAGE.rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if ".wire." in line or ".transport." in line
    ]
    assert hits == []


def test_replies_are_read_by_name() -> None:
    assert fields([b"outcome", b"opened", b"starts_at_ms", 5]) == {
        "outcome": "opened", "starts_at_ms": "5"}  # fmt: skip
    assert fields({b"held": 2}) == {"held": "2"}
    for bad in ([b"outcome"], 1, None):
        with pytest.raises(ValueError, match="not a map"):
            fields(bad)


# --- on a real server ----------------------------------------------------------------------------


async def test_every_key_the_app_leaves_on_the_server_is_declared(
    standalone_only: str, queue: str
) -> None:
    # SCAN needs one server holding every key: the standalone one.
    async with open_bus(standalone_only) as bus:
        room_id = await _every_flow(bus, queue)
        seen = await _app_keys_of(bus, queue, room_id)
    expected = {s.name for s in SCHEMA if s.place != "channel"}
    expected -= {"legacy_rooms", "legacy_chat_rooms", "demo"}  # gone once moved; the demo's own
    assert expected <= set(seen), sorted(expected - set(seen))


async def _every_flow(bus: Bus, queue: str) -> str:
    chat = -1_000_000 - random.randrange(10**6)
    room_id, _ = await open_room(bus, Chat(chat, "Keys", private=False, thread=None), queue=queue)
    player = await player_for(bus, Sender(7_000_000 + random.randrange(10**6), "Kay"))
    rnd = await rounds.start_round(bus, room_id, starts_in_ms=0)
    await board.record(bus, room_id, rnd.id, player.id, 50)
    await rounds.end_round(bus, room_id)
    await rooms.migrate_room_index(bus)
    await follow_migration(bus, chat, chat - 1, queue=queue)
    # One send a second for the bot: a second chat waits for the bot's window, reserved a slot.
    limiter = RateLimiter(bus, Limits(global_=Window(1, 1000)), tag=queue)
    taken = await limiter.take(42)
    await limiter.sent(42, taken.entry)
    reserved = await limiter.take(44)
    assert reserved.blocked_by == "global", reserved
    await limiter.pause("chat", 43, 60_000)
    await limiter.pause("global", 0, 60_000)
    await limiter.hold_outage(60_000)
    await streak.flooded_for_ms(bus, 45, 60_000, queue=queue)
    return room_id


async def _app_keys_of(bus: Bus, queue: str, room_id: str) -> dict[str, str]:
    """Every key of the app (the room's, the globals, the queue's app keys) by its schema name;
    fails on an undeclared key or a wrong type."""
    room_prefix = room_keys(room_id).prefix
    app_prefix = queue_keys(queue).app("x")[:-1]
    seen: dict[str, str] = {}
    for match in (room_prefix + "*", app_prefix + "*", "cm:[^{]*"):
        for key in await bus.transport.scan(match):
            spec = _spec_of(key, room_prefix, app_prefix)
            assert spec is not None, f"undeclared key {key!r}"
            kind = await bus.command("TYPE", key)
            kind = kind.decode() if isinstance(kind, bytes) else kind
            assert kind == spec.type, f"{key!r} is a {kind}, declared {spec.type}"
            seen[spec.name] = key
    return seen


def _spec_of(key: str, room_prefix: str, app_prefix: str) -> AppKey | None:
    for place, prefix in (("room", room_prefix), ("queue", app_prefix), ("global", "cm:")):
        if key.startswith(prefix):
            rest = key[len(prefix) :]
            for spec in SCHEMA:
                if spec.place != place:
                    continue
                if spec.variable and rest.startswith(spec.stem) and len(rest) > len(spec.stem):
                    return spec
                if not spec.variable and rest == spec.pattern:
                    return spec
            return None
    return None
