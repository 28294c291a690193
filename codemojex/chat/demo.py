"""The demo played through the Telegram stand-in: simulated users send ``/newgame``, ``/round``
and their guesses as messages to the stand-in, which serves them to the service as updates
(``getUpdates`` or the webhook), so the whole loop runs with no token: update in, guess, board,
notice out.

The rooms and players are those of ``codemojex.game.demo`` (the same chats and names); the rooms
that demo made before chats had rooms are adopted for their chats, so a data directory of an
earlier version plays on in the same rooms. Rounds last as long as the service's
``--round-length``: the demo starts the next round a little after one ends.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from codemojex.chat.directory import adopt_room, room_of_chat
from codemojex.game.demo import DEMO_KEY, NAMES, ROOMS, nudge
from codemojex.game.rooms import get_room
from codemojex.game.rounds import Round, current_round
from codemojex.game.rules import GameError
from codemojex.game.scoring import ALPHABET, SIZE
from codemojex.standin.updates import UpdateFeed
from codemojex.store import server_time_ms, text_or_none
from echomq_trio import Bus, BusError

__all__ = ["FIRST_USER", "play_in_chats"]

FIRST_USER = 5_000_000  # the simulated users' ids: FIRST_USER + their index in NAMES
T = TypeVar("T")
User = tuple[int, str]


async def play_in_chats(bus: Bus, feed: UpdateFeed, *, seed: int | None = None) -> None:
    """Play until cancelled."""
    rng = random.Random(seed)
    with contextlib.suppress(BusError):
        await _adopt(bus)
    users = [(FIRST_USER + i, name) for i, name in enumerate(NAMES)]
    async with trio.open_nursery() as nursery:
        for n, (chat, title) in enumerate(ROOMS):
            members = list(dict.fromkeys(users[n :: len(ROOMS)] + rng.sample(users, 2)))
            nursery.start_soon(_chat_room, bus, feed, chat, title, members,
                               random.Random(rng.random()))  # fmt: skip


async def _adopt(bus: Bus) -> None:
    saved = text_or_none(await bus.command("GET", DEMO_KEY))
    if saved is not None:
        for room_id in json.loads(saved)["rooms"]:
            with contextlib.suppress(GameError):
                room = await get_room(bus, room_id)
                await adopt_room(bus, room.chat, room.id)


async def _until(read: Callable[[], Awaitable[T | None]]) -> T:
    while (value := await read()) is None:  # noqa: ASYNC110 - the state is in the server
        await trio.sleep(0.2)
    return value


async def _chat_room(bus: Bus, feed: UpdateFeed, chat: int, title: str, members: list[User],
                     rng: random.Random) -> None:  # fmt: skip
    def say(user: User, text: str) -> None:
        feed.user_says(chat, user[0], text, name=user[1], chat_title=title)

    async def open_round() -> Round | None:
        room = await room_of_chat(bus, chat)
        try:
            return None if room is None else await current_round(bus, room)
        except GameError:
            return None

    say(members[0], "/newgame")
    while True:
        try:
            await _until(lambda: room_of_chat(bus, chat))
            say(rng.choice(members), "/round")
            rnd = await _until(open_round)
            wait_ms = rnd.starts_at_ms - await server_time_ms(bus)
            await trio.sleep(max(wait_ms, 0) / 1000 + 0.1)
            guesses = {user: rng.sample(ALPHABET, SIZE) for user in members}
            while (now := await open_round()) is not None and now.id == rnd.id:
                await trio.sleep(rng.uniform(0.3, 1.5))
                user = rng.choice(members)
                nudge(guesses[user], rng)
                say(user, "".join(guesses[user]))
            await trio.sleep(2)  # between rounds
        except BusError as exc:  # the server restarting: play on when it is back
            print(f"demo: {title}: {exc}; retrying", flush=True)
            await trio.sleep(1)
