"""The leaderboard page in a real headless Chromium: it shows the current round's board and says
so, a new score appears without a reload, a new round starts an empty board, and the room list
loads a page at a time. ``rooms.json`` over real HTTP: pages that follow ``next``, and 400 with a
one-line JSON error for a bad query."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from codemojex import game
from codemojex.game import board
from codemojex.game.feed import Feed
from codemojex.game.page import PageServer, page_parameters
from codemojex.game.rooms import DEFAULT_ROOM_PAGE, MAX_ROOM_PAGE
from echomq_trio import Bus
from tests.support import wait_for
from tools.browser import Page, open_page


@pytest.mark.slow
async def test_page_shows_the_board_and_updates_in_place(bus: Bus) -> None:
    await bus.transport.command("DEL", "cm:room-index")
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


@pytest.mark.slow
async def test_page_lists_the_first_page_of_rooms_and_more_on_demand(bus: Bus) -> None:
    await bus.transport.command("DEL", "cm:room-index")
    rooms = [await game.create_room(bus, -900 - i, f"R{i}") for i in range(DEFAULT_ROOM_PAGE + 3)]
    async with trio.open_nursery() as nursery:
        feed_port = await nursery.start(Feed(bus).serve, "127.0.0.1", 0)
        page_url = await nursery.start(PageServer(bus, feed_port).serve, "127.0.0.1", 0)
        async with open_page() as page:
            await page.goto(f"{page_url}/")
            links = "[...document.querySelectorAll('#rooms a')].map((a) => a.textContent)"
            more_shown = "!document.querySelector('#more').hidden"

            async def links_are(n: int) -> bool:
                return len(await page.evaluate(links)) == n

            await wait_for(partial(links_are, DEFAULT_ROOM_PAGE), timeout=30, step=0.1)
            assert await page.evaluate(links) == [r.title for r in rooms[:DEFAULT_ROOM_PAGE]]
            assert await page.evaluate(more_shown) is True
            current = "document.querySelector('#rooms a.current').textContent"
            assert await page.evaluate(current) == "R0"  # no room asked for: the first one
            await page.evaluate("document.querySelector('#more').click()")
            await wait_for(partial(links_are, len(rooms)), timeout=30, step=0.1)
            assert await page.evaluate(links) == [r.title for r in rooms]
            assert await page.evaluate(more_shown) is False
        nursery.cancel_scope.cancel()


def test_page_parameters_are_read_or_refused_with_the_reason() -> None:
    assert page_parameters(b"") == (None, DEFAULT_ROOM_PAGE)
    assert page_parameters(b"after=RMMx&count=7") == ("RMMx", 7)  # room_page checks the cursor
    refused = {
        b"count=": "count must be an integer",
        b"count=abc": "count must be an integer",
        b"count=-1": "count must be an integer",
        b"count=1e3": "count must be an integer",
        b"count=99999999999999999999": "count must be an integer",
        b"count=1&count=2": "parameter count given twice",
        b"cursor=x": "unknown parameter 'cursor'",
        b"count=%FF": "count must be an integer",
        b"\xff": "the query must be ASCII",
    }
    for query, reason in refused.items():
        with pytest.raises(game.GameError, match=reason):
            page_parameters(query)


async def test_rooms_json_pages_follow_next_and_bad_queries_get_400(bus: Bus) -> None:
    await bus.transport.command("DEL", "cm:room-index")
    rooms = [await game.create_room(bus, -800 - i, f"Room {i}") for i in range(5)]
    async with trio.open_nursery() as nursery, httpx.AsyncClient() as client:
        url = await nursery.start(PageServer(bus, 0).serve, "127.0.0.1", 0)
        listed: list[dict[str, str]] = []
        bodies = []
        query = "?count=2"
        while True:
            reply = await client.get(f"{url}/rooms.json{query}")
            assert reply.status_code == 200 and reply.headers["cache-control"] == "no-store"
            bodies.append(reply.json())
            listed += reply.json()["rooms"]
            if reply.json()["next"] is None:
                break
            query = f"?after={reply.json()['next']}&count=2"
        assert listed == [{"id": r.id, "title": r.title} for r in rooms]
        assert [len(b["rooms"]) for b in bodies] == [2, 2, 1]
        whole = (await client.get(f"{url}/rooms.json")).json()  # the default count: all five
        assert whole == {"rooms": listed, "next": None}
        for query in ("count=0", f"count={MAX_ROOM_PAGE + 1}", "count=x", "after=nope", "x=1",
                      "count=1&count=1", f"after={rooms[0].id}&after={rooms[1].id}"):  # fmt: skip
            reply = await client.get(f"{url}/rooms.json?{query}")
            assert reply.status_code == 400, query
            assert reply.text.count("\n") == 0 and set(reply.json()) == {"error"}, reply.text
        reason = json.loads((await client.get(f"{url}/rooms.json?count=0")).text)["error"]
        assert reason == f"count must be an integer 1-{MAX_ROOM_PAGE}, got 0"
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_page_recovers_from_a_feed_restart_and_says_it_is_down(bus: Bus) -> None:
    await bus.transport.command("DEL", "cm:room-index")
    room = await game.create_room(bus, -778, "Restart Room")
    alice = await game.create_player(bus, "Alice", 11)
    bob = await game.create_player(bus, "Bob", 12)
    rnd = await game.start_round(bus, room.id, starts_in_ms=0, lasts_ms=600_000)
    await board.record(bus, room.id, rnd.id, alice.id, 40)
    async with trio.open_nursery() as nursery:
        first_feed = trio.CancelScope()
        feed_port = await nursery.start(_feed_in, bus, first_feed, 0)
        page_url = await nursery.start(PageServer(bus, feed_port).serve, "127.0.0.1", 0)
        async with open_page() as page:
            await page.goto(f"{page_url}/?room={room.id}")
            status = "document.querySelector('#status').textContent"
            await wait_for(partial(_has, page, "#board", "Alice"), timeout=30, step=0.1)
            assert await page.evaluate(status) == "live"
            assert "left" in await page.evaluate("document.querySelector('#time-left').textContent")
            assert "1 guess so far by 1 player" in str(
                await page.evaluate("document.querySelector('#guesses').textContent")
            )
            first_feed.cancel()  # the feed goes away
            await wait_for(partial(_has, page, "#status", "feed down"), timeout=30, step=0.1)
            assert "live feed is down" in await page.evaluate(
                "document.querySelector('#banner').innerText"
            )
            await board.record(bus, room.id, rnd.id, bob.id, 90)  # while nobody pushes
            await nursery.start(_feed_in, bus, trio.CancelScope(), feed_port)  # back, same port
            await wait_for(partial(_has, page, "#board", "Bob"), timeout=30, step=0.1)
            assert await page.evaluate(status) == "live"
            assert await page.evaluate("document.body.classList.contains('down')") is False
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_page_opened_before_any_room_shows_rooms_as_they_come(bus: Bus) -> None:
    await bus.transport.command("DEL", "cm:room-index")
    async with _served_page(bus, "/") as page:
        await wait_for(partial(_has, page, "#status", "no rooms yet"), timeout=30, step=0.1)
        room = await game.create_room(bus, -779, "Late Room")
        rnd = await game.start_round(bus, room.id, starts_in_ms=0)
        dana = await game.create_player(bus, "Dana", 13)
        await board.record(bus, room.id, rnd.id, dana.id, 55)
        await wait_for(partial(_has, page, "#board", "Dana"), timeout=30, step=0.1)
        title = "document.querySelector('#title').textContent"
        assert await page.evaluate(title) == "Late Room"
        current = "document.querySelector('#rooms a.current').textContent"
        assert await page.evaluate(current) == "Late Room"
        await game.create_room(bus, -780, "Later Room")
        links = "[...document.querySelectorAll('#rooms a')].map((a) => a.textContent)"
        await wait_for(partial(_is, page, links, ["Late Room", "Later Room"]), timeout=30, step=0.2)


@pytest.mark.slow
async def test_page_escapes_names_and_bundles_its_emoji_font(bus: Bus) -> None:
    await bus.transport.command("DEL", "cm:room-index")
    room = await game.create_room(bus, -781, "<b>Room</b>")
    rnd = await game.start_round(bus, room.id, starts_in_ms=0)
    evil = '<img src=x onerror="window.__xss = 1">🦊'
    mallory = await game.create_player(bus, evil, 14)
    await board.record(bus, room.id, rnd.id, mallory.id, 70)
    async with _served_page(bus, f"/?room={room.id}") as page:
        await wait_for(partial(_has, page, "#board", "onerror"), timeout=30, step=0.1)
        assert evil in await page.evaluate("document.querySelector('#board').innerText")
        assert await page.evaluate("document.querySelectorAll('#board img').length") == 0
        title = "document.querySelector('#title').textContent"
        assert await page.evaluate(title) == "<b>Room</b>"
        assert await page.evaluate("window.__xss") is None
        # The trophy and the game's emoji come from the bundled font, not the machine's.
        faces = (
            "[...document.fonts].filter((f) => f.family.includes('cm-emoji')).map((f) => f.status)"
        )
        await wait_for(partial(_is, page, faces, ["loaded"]), timeout=30, step=0.1)


@asynccontextmanager
async def _served_page(bus: Bus, path: str) -> AsyncIterator[Page]:
    """A feed, the page server and a browser on ``path`` of it, for one test."""
    async with trio.open_nursery() as nursery:
        feed_port = await nursery.start(Feed(bus).serve, "127.0.0.1", 0)
        page_url = await nursery.start(PageServer(bus, feed_port).serve, "127.0.0.1", 0)
        async with open_page() as page:
            await page.goto(page_url + path)
            yield page
        nursery.cancel_scope.cancel()


async def _feed_in(
    bus: Bus, scope: trio.CancelScope, port: int, *, task_status: trio.TaskStatus[int]
) -> None:
    """A feed on ``port`` (0: any) until ``scope`` is cancelled."""
    with scope:
        await Feed(bus).serve("127.0.0.1", port, task_status=task_status)


async def _has(page: Any, selector: str, text: str) -> bool:
    found = await page.evaluate(f"(document.querySelector('{selector}') || {{}}).innerText || ''")
    return text in str(found)


async def _is(page: Any, expression: str, value: object) -> bool:
    return bool(await page.evaluate(expression) == value)
