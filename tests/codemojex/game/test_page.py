"""The leaderboard page in a real headless Chromium: it shows the current round's board and says
so, a new score appears without a reload, and a new round starts an empty board."""

from functools import partial

import pytest
import trio

from codemojex import game
from codemojex.game import board
from codemojex.game.feed import Feed
from codemojex.game.page import PageServer
from echomq_trio import Bus
from tests.codemojex.game.browser import open_page
from tests.conftest import wait_for

pytestmark = pytest.mark.slow


async def test_page_shows_the_board_and_updates_in_place(bus: Bus) -> None:
    await bus.wire.command("DEL", "cm:rooms")
    room = await game.create_room(bus, -777, "Browser Room")
    alice = await game.create_player(bus, "Alice", 1)
    bob = await game.create_player(bus, "Bob", 2)
    rnd = await game.start_round(bus, room.id, starts_in_ms=0)
    await board.record(bus, room.id, rnd.id, alice.id, 61)
    async with trio.open_nursery() as nursery:
        feed = Feed(bus)
        feed_port = await nursery.start(feed.serve, "127.0.0.1", 0)
        page_url = await nursery.start(PageServer(bus, feed_port).serve, "127.0.0.1", 0)
        async with open_page() as page:
            await page.goto(f"{page_url}/?room={room.id}")

            async def board_text() -> str:
                return str(await page.evaluate(
                    "document.querySelector('#board') ? document.querySelector('#board')"
                    ".innerText : ''"
                ))  # fmt: skip

            async def shows_alice() -> bool:
                return "Alice" in await board_text() and "61%" in await board_text()

            await wait_for(shows_alice, timeout=30, step=0.1)
            assert await page.evaluate("document.querySelector('#title').textContent") == (
                "Browser Room"
            )
            await page.evaluate("window.__marker = 'same page'")  # gone if the page reloads
            shows = "document.querySelector('#shows').textContent"
            assert await page.evaluate(shows) == f"Round {rnd.id} · this round's best"
            await board.record(bus, room.id, rnd.id, bob.id, 88)

            async def shows_bob_first() -> bool:
                text = await board_text()
                return "Bob" in text and text.index("Bob") < text.index("Alice")

            await wait_for(shows_bob_first, timeout=30, step=0.1)
            assert await page.evaluate("window.__marker") == "same page"
            assert "88%" in await board_text()

            async def says(text: str) -> bool:
                return bool(await page.evaluate(shows) == text)

            await game.end_round(bus, room.id)
            await wait_for(partial(says, f"Round {rnd.id} · final standings"), timeout=30, step=0.1)
            assert "Bob" in await board_text()
            second = await game.start_round(bus, room.id, starts_in_ms=0)
            await wait_for(partial(says, f"Round {second.id} · this round's best"), timeout=30,
                           step=0.1)  # fmt: skip
            assert await board_text() == ""  # a new round, an empty board
            assert await page.evaluate("window.__marker") == "same page"
        nursery.cancel_scope.cancel()
