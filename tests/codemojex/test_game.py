"""The game on a real server: rounds, guesses and their errors, results, the digest."""

import logging
import random

import pytest
import trio

from codemojex import board, game, ids, notifier
from codemojex.notice import decode
from codemojex.notifier import NOTIFY_QUEUE
from codemojex.scoring import ALPHABET
from echomq_trio import (
    Bury,
    Bus,
    ConnectionLost,
    Consumer,
    Fixed,
    Job,
    Metronome,
    jobs,
    lanes,
    repeat,
)
from echomq_trio.repeat import Registered
from tests.conftest import wait_for


async def _lane_texts(bus: Bus, chat: int) -> list[str]:
    return [decode(j.payload).text for j in await lanes.jobs(bus, NOTIFY_QUEUE, str(chat))]


async def _fresh(bus: Bus) -> None:
    # The game uses fixed queue names; start each test from an empty notification queue.
    for key in ("cm:rooms", "cm:players"):
        await bus.wire.command("DEL", key)


@pytest.fixture
async def room_and_player(bus: Bus) -> tuple[game.Room, game.Player]:
    await _fresh(bus)
    chat = -1_000_000 - random.randrange(10**6)
    room = await game.create_room(bus, chat, "Test Room")
    player = await game.create_player(bus, "Alice", 10**9 + random.randrange(10**6))
    return room, player


async def test_a_round_announces_schedules_its_reminder_and_scores(
    bus: Bus, room_and_player: tuple[game.Room, game.Player]
) -> None:
    room, player = room_and_player
    rnd = await game.start_round(bus, room.id, starts_in_ms=0, rng=random.Random(3))
    assert len(set(rnd.secret)) == 6 and set(rnd.secret) <= set(ALPHABET)
    assert "New round" in (await _lane_texts(bus, room.chat))[-1]
    reminder = [
        r for r in await jobs.list_jobs(bus, NOTIFY_QUEUE, "scheduled", limit=1000)
        if decode(r.payload).chat == room.chat
    ]  # fmt: skip
    assert len(reminder) == 1 and reminder[0].score_ms == rnd.starts_at_ms
    assert reminder[0].group == str(room.chat)  # it lands in the room's lane when due

    result = await game.guess(bus, room.id, player.id, "".join(rnd.secret))
    summary = (result.score.percentage, result.best, result.improved, result.rank)
    assert summary == (100, 100, True, 1)
    assert "100%" in (await _lane_texts(bus, player.chat))[-1]
    worse = [*rnd.secret[1:], rnd.secret[0]]
    again = await game.guess(bus, room.id, player.id, worse)
    assert again.best == 100 and not again.improved

    standings = await game.end_round(bus, room.id)
    assert [(s.player, s.percentage) for s in standings] == [(player.id, 100)]
    last = (await _lane_texts(bus, room.chat))[-1]
    assert "".join(rnd.secret) in last and "Alice 100%" in last
    with pytest.raises(game.GameError, match="no round is open"):
        await game.guess(bus, room.id, player.id, worse)


async def test_guess_validation_errors(
    bus: Bus, room_and_player: tuple[game.Room, game.Player]
) -> None:
    room, player = room_and_player
    with pytest.raises(game.GameError, match="no round is open"):
        await game.guess(bus, room.id, player.id, ALPHABET[:6])
    await game.start_round(bus, room.id, starts_in_ms=60_000)
    with pytest.raises(game.GameError, match="starts in"):
        await game.guess(bus, room.id, player.id, ALPHABET[:6])
    with pytest.raises(game.GameError, match="exactly 6"):
        await game.guess(bus, room.id, player.id, "😀😂")
    with pytest.raises(game.GameError, match="not one of the game's emojis"):
        await game.guess(bus, room.id, player.id, "😀😂😍😎🤔A")
    with pytest.raises(game.GameError, match="no player"):
        await game.guess(bus, room.id, "USR0000000000A", ALPHABET[:6])
    with pytest.raises(game.GameError, match="not a room id"):
        await game.guess(bus, "room", player.id, ALPHABET[:6])
    with pytest.raises(game.GameError):
        await game.create_player(bus, "", 5)


async def test_digest_registers_once_across_restarts(bus: Bus, server_url: str) -> None:
    await repeat.cancel(bus, game.GAME_QUEUE, game.DIGEST_NAME)
    first = await game.register_digest(bus)
    assert first[0] is Registered.REGISTERED
    # A reboot is a new process with its own connection: it re-registers, nothing changes.
    from echomq_trio import open_bus

    async with open_bus(server_url) as other:
        assert await game.register_digest(other) == (Registered.EXISTS, first[1])
    regs = [r for r in await repeat.list_repeats(bus, game.GAME_QUEUE)
            if r.name == game.DIGEST_NAME]  # fmt: skip
    assert len(regs) == 1 and regs[0].every_ms == game.DAY_MS


async def test_digest_sends_every_room_its_top_ten(
    bus: Bus, room_and_player: tuple[game.Room, game.Player]
) -> None:
    room, player = room_and_player
    other = await game.create_room(bus, room.chat - 1, "Other Room")
    await board.record(bus, room.id, player.id, 42)
    handler = game.game_handler(bus)
    await repeat.cancel(bus, game.GAME_QUEUE, game.DIGEST_NAME)
    await game.register_digest(bus, first_in_ms=0)
    await repeat.fire(bus, game.GAME_QUEUE)
    (job,) = await jobs.claim(bus, game.GAME_QUEUE, 10)
    assert await handler(job) is None
    assert "Alice 42%" in (await _lane_texts(bus, room.chat))[-1]
    assert "no scores yet" in (await _lane_texts(bus, other.chat))[-1]
    await jobs.ack(bus, game.GAME_QUEUE, job.id, job.token)


async def _rooms(bus: Bus, n: int) -> list[game.Room]:
    await _fresh(bus)
    base = -3_000_000_000 - 100 * random.randrange(10**6)
    return [await game.create_room(bus, base - i, f"Room {i}") for i in range(n)]


async def test_a_digest_failing_on_its_third_room_is_retried_and_each_room_gets_one_notice(
    bus: Bus, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    rooms = await _rooms(bus, 5)
    third = rooms[2]  # rooms go in id order, which is creation order
    notices = queue + ".notices"
    attempt = 0
    sent: list[tuple[int, int, bool]] = []  # (attempt, chat, admitted now)

    async def flaky(bus: Bus, chat: int, text: str, *, key: str | None = None) -> str | None:
        if attempt == 1 and chat == third.chat:
            sent.append((attempt, chat, False))
            raise ConnectionLost("injected: the connection dropped")
        out = await notifier.notify(bus, chat, text, queue=notices, key=key)
        sent.append((attempt, chat, out is not None))
        return out

    inner = game.game_handler(bus, notify=flaky)

    async def handler(job: Job) -> Bury | None:
        nonlocal attempt
        attempt = job.attempts
        return await inner(job)

    await repeat.register(bus, queue, game.DIGEST_NAME, game.DAY_MS, "digest", 0)
    async with trio.open_nursery() as nursery:
        consumer = Consumer(bus, queue, handler, concurrency=1, backoff=Fixed(50))
        await nursery.start(consumer.run)
        await nursery.start(Metronome(bus, queue, beat_ms=50).run)

        async def finished() -> bool:
            return (await jobs.counts(bus, queue)).completed_total == 1

        await wait_for(finished)
        nursery.cancel_scope.cancel()
    chats = [r.chat for r in rooms]
    # First attempt: the third room fails and the others still go; the retry admits only it.
    assert sent == [(1, c, c != third.chat) for c in chats] + [(2, c, c == third.chat)
                                                                for c in chats]  # fmt: skip
    for room in rooms:
        (notice,) = await lanes.jobs(bus, notices, str(room.chat))
        assert decode(notice.payload).text.startswith(f"Daily standings, {room.title}")
    c = await jobs.counts(bus, queue)
    assert (c.retried_total, c.dead_total) == (1, 0)
    assert f"room {third.id} failed, to be retried" in caplog.text


async def test_a_room_whose_digest_is_invalid_is_skipped_and_not_retried(
    bus: Bus, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    rooms = await _rooms(bus, 3)
    ghost = ids.new(ids.ROOM)  # listed, but its record is gone
    await bus.wire.command("SADD", "cm:rooms", ghost)
    notices = queue + ".notices"

    async def picky(bus: Bus, chat: int, text: str, *, key: str | None = None) -> str | None:
        if chat == rooms[1].chat:
            raise ValueError("notice text is 5000 characters; Telegram allows 4096")
        return await notifier.notify(bus, chat, text, queue=notices, key=key)

    await jobs.enqueue(bus, queue, ids.new(ids.JOB), "digest")
    (job,) = await jobs.claim(bus, queue)
    with caplog.at_level(logging.WARNING, "codemojex.game"):
        assert await game.game_handler(bus, notify=picky)(job) is None  # acked, not retried
    assert [len(await lanes.jobs(bus, notices, str(r.chat))) for r in rooms] == [1, 0, 1]
    assert f"room {rooms[1].id} skipped" in caplog.text and f"room {ghost} skipped" in caplog.text
    assert await game.send_digest(bus, job.id, notify=picky) == 2  # the same occurrence again
    assert [len(await lanes.jobs(bus, notices, str(r.chat))) for r in rooms] == [1, 0, 1]
