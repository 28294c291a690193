"""A demo that plays a few rooms with simulated players, so there is something to watch.

Rooms and players are created once and remembered in the server (``cm:demo``), so a restart
plays on with the same ones. Each room runs rounds of ``round_s`` seconds, back to back; players
guess at random intervals, learning a little from their last score. Each round has a board of
its own, so the live page starts empty every round and fills as the players close in; the ended
rounds expire an hour later (``rounds.ENDED_ROUND_KEEP_MS``), so the demo can run for weeks in
bounded memory.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random

import trio

from codemojex.game.rooms import Player, Room, create_player, create_room, get_player, get_room
from codemojex.game.rounds import ENDED_ROUND_KEEP_MS, end_round, guess, start_round
from codemojex.game.rules import GameError
from codemojex.game.scoring import ALPHABET, SIZE
from codemojex.keys import DEMO
from codemojex.store import text_or_none
from echomq_trio import Bus, BusError
from echomq_trio.backoff import reconnect_delay_s

__all__ = ["NAMES", "ROOMS", "nudge", "play"]

# The demo holds these rooms and players (and a guess per player for the round in play), nothing
# that grows as it plays.
ROOMS = [(-1001000000001, "Emoji Masters"), (-1001000000002, "Night Owls"),
         (-1001000000003, "Quick Guessers")]  # fmt: skip
NAMES = ["Alice", "Bob", "Chen", "Dana", "Eve", "Farid", "Gita", "Hugo", "Ines", "Jon", "Kai",
         "Lena"]  # fmt: skip
DEMO_KEY = DEMO  # what the demo made (codemojex.keys)


def nudge(attempt: list[str], rng: random.Random) -> None:
    """Change a simulated player's guess a little: swap two positions, or try a new emoji."""
    if rng.random() < 0.5:
        i, j = rng.sample(range(SIZE), 2)
        attempt[i], attempt[j] = attempt[j], attempt[i]
    else:
        attempt[rng.randrange(SIZE)] = rng.choice([e for e in ALPHABET if e not in attempt])


async def _setup(bus: Bus) -> tuple[list[Room], list[Player]]:
    saved = text_or_none(await bus.command("GET", DEMO_KEY))
    if saved is not None:
        data = json.loads(saved)
        rooms = [await get_room(bus, r) for r in data["rooms"]]
        players = [await get_player(bus, p) for p in data["players"]]
        return rooms, players
    rooms = [await create_room(bus, chat, title) for chat, title in ROOMS]
    players = [await create_player(bus, name, 5_000_000 + i) for i, name in enumerate(NAMES)]
    await bus.command("SET", DEMO_KEY, json.dumps(
        {"rooms": [r.id for r in rooms], "players": [p.id for p in players]}))  # fmt: skip
    return rooms, players


async def _room(bus: Bus, room: Room, players: list[Player], round_s: float,
                rng: random.Random, keep_ms: int) -> None:  # fmt: skip
    while True:
        with contextlib.suppress(GameError):
            await end_round(bus, room.id, keep_ms=keep_ms)  # one left open by a previous run
        await start_round(bus, room.id, starts_in_ms=2_000, rng=rng, lasts_ms=round(round_s * 1000))
        await trio.sleep(2.1)
        deadline = trio.current_time() + round_s
        guesses = {p.id: rng.sample(ALPHABET, SIZE) for p in players}  # a round's, per player
        while trio.current_time() < deadline:
            await trio.sleep(rng.uniform(0.3, 1.5))
            player = rng.choice(players)
            attempt = guesses[player.id]
            nudge(attempt, rng)
            with contextlib.suppress(GameError):
                await guess(bus, room.id, player.id, attempt)
        await end_round(bus, room.id, keep_ms=keep_ms)


async def play(
    bus: Bus,
    *,
    round_s: float = 30.0,
    seed: int | None = None,
    round_keep_ms: int = ENDED_ROUND_KEEP_MS,
) -> None:
    """Play until cancelled; each ended round is kept ``round_keep_ms``."""
    rng = random.Random(seed)
    for errors in itertools.count(1):
        try:
            rooms, players = await _setup(bus)
            break
        except BusError as exc:  # the server restarting: set up when it is back
            print(f"demo: setting up: {exc}; retrying", flush=True)
            await trio.sleep(reconnect_delay_s(errors))
    async with trio.open_nursery() as nursery:
        for n, room in enumerate(rooms):
            members = players[n :: len(rooms)] + rng.sample(players, 2)
            nursery.start_soon(_keep_playing, bus, room, list(dict.fromkeys(members)), round_s,
                               random.Random(rng.random()), round_keep_ms)  # fmt: skip


async def _keep_playing(bus: Bus, room: Room, players: list[Player], round_s: float,
                        rng: random.Random, round_keep_ms: int) -> None:  # fmt: skip
    while True:
        try:
            await _room(bus, room, players, round_s, rng, round_keep_ms)
        except BusError as exc:  # the server restarting: play on when it is back
            print(f"demo: {room.title}: {exc}; retrying", flush=True)
            await trio.sleep(1)
