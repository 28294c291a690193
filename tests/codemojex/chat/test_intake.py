"""Updates and their answers are made once by their chat's numbered stream (``intake``): an
update admitted again or out of order within the window is handled once, and what the bus keeps
for it grows with the chats, not with the updates (counted on a real server, key by key)."""

from __future__ import annotations

import json
from collections import Counter

from codemojex.chat import ChatGame, admit
from echomq_trio import Bus, Outcome, jobs, lanes, open_bus
from echomq_trio._replies import as_text
from echomq_trio.sequence import DEFAULT_WINDOW
from tests.codemojex.chat.conftest import BOT, BOT_ID, group_id


def update(update_id: int, chat: int, text: str = "/help") -> dict[str, object]:
    return {"update_id": update_id, "message": {"message_id": 1, "date": 0, "text": text,
            "chat": {"id": chat, "type": "group", "title": "G"},
            "from": {"id": 1, "is_bot": False, "first_name": "A"}}}  # fmt: skip


async def handle_all(bus: Bus, queue: str, game: ChatGame | None) -> int:
    """Claim, handle (with ``game``, else as delivered) and ack every job waiting on ``queue``;
    how many."""
    handled = 0
    while claimed := await jobs.claim(bus, queue, 100):
        for job in claimed:
            assert game is None or await game.handle(job) is None
            assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
            handled += 1
    return handled


async def test_again_and_out_of_order_within_the_window_each_once(bus: Bus, queue: str) -> None:
    chat, other = group_id(), group_id()
    notices = queue + ".notify"
    game = ChatGame(bus, BOT_ID, BOT, queue=queue, notify_queue=notices)

    async def send(*numbers: int, to: int = chat) -> list[Outcome | None]:
        return [await admit(bus, update(n, to), BOT_ID, queue=queue) for n in numbers]

    # 101 is late (its webhook call failed and comes again after 102 and 103): admitted.
    assert await send(100, 102, 103, 101) == [Outcome.ENQUEUED] * 4
    assert await send(100, 101, 102) == [Outcome.DUPLICATE] * 3  # delivered again, waiting
    assert await send(101, to=other) == [Outcome.ENQUEUED]  # numbers are per chat
    assert await handle_all(bus, queue, game) == 5
    assert await send(103, 101, 100) == [Outcome.DUPLICATE] * 3  # again, after handling
    # One answer per update, in the order the updates were admitted.
    answers = await lanes.jobs(bus, notices, str(chat))
    assert len(answers) == 4
    # The handler run again (its lease expired after a crash) answers nothing new.
    redone = await lanes.enqueue(bus, queue, str(chat), json.dumps(update(102, chat)))
    assert redone.outcome is Outcome.ENQUEUED  # the job itself, admitted without its number
    assert await handle_all(bus, queue, game) == 1
    assert len(await lanes.jobs(bus, notices, str(chat))) == 4
    # Below the window: with DEFAULT_WINDOW later updates of the chat admitted, 99 is refused
    # (it is older than anything Telegram could still be sending, for a chat this busy).
    later = range(200, 200 + DEFAULT_WINDOW)
    assert await send(*later) == [Outcome.ENQUEUED] * DEFAULT_WINDOW
    assert await send(99, 150) == [Outcome.DUPLICATE] * 2
    assert await send(199 + DEFAULT_WINDOW + 5, 199 + DEFAULT_WINDOW + 1) == [Outcome.ENQUEUED] * 2


async def _kinds(bus: Bus, queue: str) -> Counter[str]:
    """The queue's keys on the server, counted by kind (their schema name)."""
    k = bus.keys(queue)
    kinds: Counter[str] = Counter()
    cursor = "0"
    while True:
        cursor_raw, found = await bus.transport.command(
            "SCAN", cursor, "MATCH", k.prefix + "*", "COUNT", "1000"
        )
        for key in found:
            spec = k.spec_of(as_text(key))
            kinds[spec.name if spec else as_text(key)] += 1
        cursor = as_text(cursor_raw)
        if cursor == "0":
            return kinds


async def test_keys_grow_with_the_chats_not_with_the_updates(
    standalone_only: str, queue: str
) -> None:
    chats = [group_id() for _ in range(3)]
    notices = queue + ".notify"
    async with open_bus(standalone_only) as bus:
        game = ChatGame(bus, BOT_ID, BOT, queue=queue, notify_queue=notices)
        counted = []
        next_id = 1000
        for rounds in (60, 240):
            for _ in range(rounds):
                for chat in chats:
                    assert await admit(bus, update(next_id, chat), BOT_ID, queue=queue)
                    next_id += 1
            assert await handle_all(bus, queue, game) == rounds * len(chats)
            assert await handle_all(bus, notices, None) == rounds * len(chats)  # the answers
            counted.append((await _kinds(bus, queue), await _kinds(bus, notices)))
        (updates_then, notices_then), (updates_now, notices_now) = counted
        # Four times the updates, the same keys: one numbered stream per chat on each queue,
        # no idempotency key at all.
        assert updates_now == updates_then and updates_now["seq"] == len(chats)
        assert notices_now == notices_then and notices_now["seq"] == len(chats)
        assert "idempotency" not in updates_now and "idempotency" not in notices_now
        for chat in chats:
            remembered = await bus.transport.command(
                "SMEMBERS", bus.keys(queue).seq(f"tg:{BOT_ID}:{chat}")
            )
            assert len(remembered) == DEFAULT_WINDOW
            ttl = await bus.transport.command(
                "PTTL", bus.keys(notices).seq(f"reply:{BOT_ID}:{chat}")
            )
            assert int(ttl) > 0  # it expires when the chat is quiet
