"""The game on a real server: rounds, guesses and their errors, results, the digest."""

import contextlib
import datetime as dt
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest
import trio

from codemojex import game, ids
from codemojex.game import board, days
from codemojex.game.rooms import round_key
from codemojex.game.scoring import ALPHABET
from codemojex.notify import notifier
from codemojex.notify.notice import decode
from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.standin import open_stand_in
from codemojex.telegram import Delivered, markup, open_bot, telegram_length
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
from echomq_trio.wire import Wire
from tests.support import wait_for


async def _lane_texts(bus: Bus, chat: int) -> list[str]:
    return [decode(j.payload).text for j in await lanes.jobs(bus, NOTIFY_QUEUE, str(chat))]


def _notify_to(
    queue: str,
    before: Callable[[int], None],
    after: Callable[[int, str | None], None] = lambda chat, out: None,
) -> game.Notify:
    """The game's ``notify`` seam: ``before(chat)`` (which may raise), then the real ``notify``
    onto ``queue``, then ``after(chat, its answer)``."""

    async def notify(
        bus: Bus,
        chat: int,
        text: str,
        opts: dict[str, Any] | None = None,
        *,
        key: str | None = None,
    ) -> str | None:
        before(chat)
        out = await notifier.notify(bus, chat, text, opts, queue=queue, key=key)
        after(chat, out)
        return out

    return notify


async def _fresh(bus: Bus) -> None:
    # The game uses fixed queue names; start each test from an empty notification queue.
    for key in ("cm:room-index", "cm:rooms", "cm:players"):
        await bus.transport.command("DEL", key)


@pytest.fixture
async def room_and_player(bus: Bus) -> tuple[game.Room, game.Player]:
    await _fresh(bus)
    chat = -1_000_000 - random.randrange(10**6)
    room = await game.create_room(bus, chat, "Test Room")
    player = await game.create_player(bus, "Alice", 10**9 + random.randrange(10**6))
    return room, player


@pytest.mark.cluster  # slot routing: see tests/conftest.py
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
    # Due when the round starts (a wait of a length from now: at most a moment later).
    due = reminder[0].score_ms if len(reminder) == 1 else None
    assert due is not None and rnd.starts_at_ms <= due <= rnd.starts_at_ms + 5_000
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


async def test_an_ended_round_and_its_board_expire_after_their_keep(
    bus: Bus, room_and_player: tuple[game.Room, game.Player]
) -> None:
    room, player = room_and_player

    async def ttls(rnd: game.Round) -> list[int]:
        keys = (round_key(room.id, rnd.id), board.round_board(room.id, rnd.id).key)
        return [int(await bus.transport.command("PTTL", key)) for key in keys]

    # By default an ended round is kept ENDED_ROUND_KEEP_MS; an open one has no lifetime.
    first = await game.start_round(bus, room.id, starts_in_ms=0)
    await game.guess(bus, room.id, player.id, first.secret)
    assert await ttls(first) == [-1, -1]
    await game.end_round(bus, room.id)
    assert all(
        game.ENDED_ROUND_KEEP_MS - 5_000 < t <= game.ENDED_ROUND_KEEP_MS for t in await ttls(first)
    )
    # With a short keep: the results are sent, the page shows the round as final, then both
    # keys are gone and the room has nothing to show.
    rnd = await game.start_round(bus, room.id, starts_in_ms=0)
    await game.guess(bus, room.id, player.id, rnd.secret)
    standings = await game.end_round(bus, room.id, keep_ms=1_500)
    assert [(s.player, s.percentage) for s in standings] == [(player.id, 100)]
    assert "Alice 100%" in (await _lane_texts(bus, room.chat))[-1]
    assert all(0 < t <= 1_500 for t in await ttls(rnd))
    assert await game.latest_round(bus, room.id) == game.LatestRound(rnd.id, open=False)

    async def expired() -> bool:
        return await ttls(rnd) == [-2, -2]  # -2: no such key

    await wait_for(expired, timeout=15, step=0.1)
    assert await game.latest_round(bus, room.id) is None
    with pytest.raises(game.GameError, match="no round is open"):
        await game.guess(bus, room.id, player.id, rnd.secret)
    with pytest.raises(ValueError, match="keep_ms must be an int >= 1000"):
        await game.end_round(bus, room.id, keep_ms=10)


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
    with pytest.raises(game.GameError, match=r"starts_in_ms must be an int in 0\.\.604800000"):
        await game.start_round(bus, room.id, starts_in_ms=game.MAX_START_DELAY_MS + 1)


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
    assert len(regs) == 1 and (regs[0].cron, regs[0].tz) == ("10 0 * * *", "UTC")


async def test_a_changed_digest_time_or_zone_replaces_the_registration(bus: Bus) -> None:
    await repeat.cancel(bus, game.GAME_QUEUE, game.DIGEST_NAME)
    # A registration of an earlier version (every day from its first run) is replaced too.
    await repeat.register(bus, game.GAME_QUEUE, game.DIGEST_NAME, game.DAY_MS, "digest")
    answer, first = await game.register_digest(bus, at="09:30", tz="Europe/Berlin")
    assert answer is Registered.REPLACED
    local = dt.datetime.fromtimestamp(first / 1000, ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute, local.second) == (9, 30, 0)
    again = await game.register_digest(bus, at="09:30", tz="Europe/Berlin")
    assert again == (Registered.EXISTS, first)
    answer, _ = await game.register_digest(bus, at="09:30", tz="America/New_York")
    assert answer is Registered.REPLACED
    reg = await repeat.get(bus, game.GAME_QUEUE, game.DIGEST_NAME)
    assert reg is not None and (reg.cron, reg.tz) == ("30 9 * * *", "America/New_York")
    for bad in ("9", "24:00", "09:60", "9:5"):
        with pytest.raises(ValueError, match="a digest time is HH:MM"):
            await game.register_digest(bus, at=bad)
    with pytest.raises(ValueError, match="unknown time zone"):
        await game.register_digest(bus, tz="Berlin")
    await repeat.cancel(bus, game.GAME_QUEUE, game.DIGEST_NAME)


async def test_digest_sends_every_room_its_top_ten(
    bus: Bus, room_and_player: tuple[game.Room, game.Player]
) -> None:
    room, player = room_and_player
    other = await game.create_room(bus, room.chat - 1, "Other Room")
    # The digest reports the day before it fires: yesterday's board (written as board_record
    # packs a score), not today's, which is not over yet.
    yesterday = days.digest_day(await bus.transport.server_time_ms())
    yesterdays = board.day_board(room.id, yesterday).key
    await bus.transport.command("ZADD", yesterdays, str(42 * 10**13), player.id)
    rnd = await game.start_round(bus, room.id, starts_in_ms=0)
    await game.guess(bus, room.id, player.id, rnd.secret)  # 100% today
    handler = game.game_handler(bus)
    await repeat.cancel(bus, game.GAME_QUEUE, game.DIGEST_NAME)
    # Registered a day ago: its first run has come.
    await game.register_digest(bus, clock=lambda now: now - game.DAY_MS)
    await repeat.fire(bus, game.GAME_QUEUE)
    (job,) = await jobs.claim(bus, game.GAME_QUEUE, 10)
    assert await handler(job) is None
    text = (await _lane_texts(bus, room.chat))[-1]
    assert "Alice 42%" in text and "100%" not in text
    assert f"({days.day_label(yesterday)} UTC)" in text
    assert "no scores yet" in (await _lane_texts(bus, other.chat))[-1]
    await jobs.ack(bus, game.GAME_QUEUE, job.id, job.token)


async def test_a_new_digest_first_fires_just_after_a_utc_midnight(bus: Bus) -> None:
    await repeat.cancel(bus, game.GAME_QUEUE, game.DIGEST_NAME)
    before = await bus.transport.server_time_ms()
    _, first_run = await game.register_digest(bus)
    assert first_run % game.DAY_MS == days.DIGEST_AFTER_MIDNIGHT_MS
    assert before < first_run <= before + game.DAY_MS
    await repeat.cancel(bus, game.GAME_QUEUE, game.DIGEST_NAME)


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

    def before(chat: int) -> None:
        if attempt == 1 and chat == third.chat:
            sent.append((attempt, chat, False))
            raise ConnectionLost("injected: the connection dropped")

    def after(chat: int, out: str | None) -> None:
        sent.append((attempt, chat, out is not None))

    inner = game.game_handler(bus, notify=_notify_to(notices, before, after))

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
    # First attempt: the third room fails and the others still go; the retry admits only it
    # (the rooms go several at a time, so in any order within an attempt).
    assert sorted(sent) == sorted([(1, c, c != third.chat) for c in chats]
                                  + [(2, c, c == third.chat) for c in chats])  # fmt: skip
    assert [a for a, _, _ in sent] == sorted(a for a, _, _ in sent)  # attempt 1, then 2
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
    await bus.transport.command("ZADD", "cm:room-index", "0", ghost)
    notices = queue + ".notices"

    def before(chat: int) -> None:
        if chat == rooms[1].chat:
            raise ValueError("notice text is 5000 characters; Telegram allows 4096")

    picky = _notify_to(notices, before)

    await jobs.enqueue(bus, queue, "digest")
    (job,) = await jobs.claim(bus, queue)
    with caplog.at_level(logging.WARNING, "codemojex.game"):
        assert await game.game_handler(bus, notify=picky)(job) is None  # acked, not retried
    assert [len(await lanes.jobs(bus, notices, str(r.chat))) for r in rooms] == [1, 0, 1]
    assert f"room {rooms[1].id} skipped" in caplog.text and f"room {ghost} skipped" in caplog.text
    assert await game.send_digest(bus, job.id, notify=picky) == 2  # the same occurrence again
    assert [len(await lanes.jobs(bus, notices, str(r.chat))) for r in rooms] == [1, 0, 1]


async def test_a_second_round_is_refused_while_one_is_open(
    bus: Bus, room_and_player: tuple[game.Room, game.Player]
) -> None:
    room, _ = room_and_player
    first = await game.start_round(bus, room.id, starts_in_ms=0)
    with pytest.raises(game.GameError, match=r"^a round is already open in Test Room$"):
        await game.start_round(bus, room.id, starts_in_ms=0)
    assert (await game.current_round(bus, room.id)).id == first.id
    announced = [t for t in await _lane_texts(bus, room.chat) if t.startswith("🎲")]
    assert len(announced) == 1
    await game.end_round(bus, room.id)
    second = await game.start_round(bus, room.id, starts_in_ms=0)
    assert (await game.current_round(bus, room.id)).id == second.id != first.id


async def test_two_concurrent_end_rounds_send_one_results_message(
    bus: Bus, room_and_player: tuple[game.Room, game.Player]
) -> None:
    room, player = room_and_player
    rnd = await game.start_round(bus, room.id, starts_in_ms=0)
    await game.guess(bus, room.id, player.id, rnd.secret)
    outcomes: list[str] = []

    async def end() -> None:
        try:
            await game.end_round(bus, room.id)
            outcomes.append("ended")
        except game.GameError as exc:
            outcomes.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(end)
        nursery.start_soon(end)
    assert sorted(outcomes) == ["ended", "no round is open in Test Room"]
    results = [t for t in await _lane_texts(bus, room.chat) if t.startswith("Round over")]
    assert len(results) == 1 and "".join(rnd.secret) in results[0]


class _FailingWire:
    """The real wire, except that call number ``fail_at`` raises ``ConnectionLost``: before it
    is sent, or (``after``) once the server has run it, as when a reply is lost. Records the
    keys each call names."""

    def __init__(self, wire: Wire, fail_at: int, after: bool) -> None:
        self._wire = wire
        self.fail_at = fail_at
        self.after = after
        self.calls = 0
        self.keys: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wire, name)

    async def _run(self, call: Awaitable[Any]) -> Any:
        self.calls += 1
        if self.calls == self.fail_at and not self.after:
            cast(Any, call).close()
            raise ConnectionLost("injected before the call")
        out = await call
        if self.calls == self.fail_at:
            raise ConnectionLost("injected after the call")
        return out

    async def command(self, *args: str | bytes) -> Any:
        self.keys.update(a for a in args if isinstance(a, str))
        return await self._run(self._wire.command(*args))

    async def script(self, name: str, keys: list[str], args: list[str | bytes]) -> Any:
        self.keys.update(keys)
        return await self._run(self._wire.script(name, keys, args))


async def _assert_whole(bus: Bus, room: game.Room, rounds: set[str]) -> None:
    """Every round is whole: open and pointed at by its room, or ended and not pointed at."""
    pointer = await bus.transport.command("HGET", f"cm:{{{room.id}}}:room", "round")
    if pointer is not None:
        rounds.add(pointer.decode())
    for rid in rounds:
        status = await bus.transport.command("HGET", f"cm:{{{room.id}}}:round:{rid}", "status")
        if status == b"open":
            assert pointer == rid.encode(), f"round {rid} is open but its room points at {pointer}"
        else:
            assert pointer != rid.encode(), f"the room points at round {rid}, which is {status}"


async def test_a_failure_at_any_step_leaves_every_round_whole(
    bus: Bus, room_and_player: tuple[game.Room, game.Player]
) -> None:
    room, _ = room_and_player
    rounds: set[str] = set()
    for after in (False, True):
        for fail_at in range(1, 20):
            reached = False
            for step in (game.start_round, game.end_round):
                # Start from the state the step expects, then run it with one call failing.
                if step is game.start_round:
                    with contextlib.suppress(game.GameError):
                        await game.end_round(bus, room.id)
                elif (
                    await bus.transport.command("HGET", f"cm:{{{room.id}}}:room", "round")
                ) is None:
                    await game.start_round(bus, room.id, starts_in_ms=0)
                wire = _FailingWire(bus.transport, fail_at, after)
                with contextlib.suppress(ConnectionLost):
                    await step(Bus(cast(Wire, wire)), room.id)
                reached |= wire.calls >= fail_at
                rounds |= {k.rsplit(":", 1)[1] for k in wire.keys if ":round:" in k}
                await _assert_whole(bus, room, rounds)
            if not reached:  # both steps ran to the end before call number fail_at
                break
        else:
            raise AssertionError("the steps make more calls than the sweep covers")
    assert len(rounds) > 10


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("player name", "Eve\n1. Mallory 100%\n2."),
        ("player name", "Eve\r"),
        ("player name", "Tab\there"),
        ("player name", "Line\u2028break"),  # Zl
        ("player name", "\u202eevE"),  # right-to-left override (Cf)
        ("player name", ""),
        ("player name", "   "),
        ("player name", "x" * (game.MAX_NAME + 1)),
        ("player name", 42),
        ("room title", "x" * 4050),
        ("room title", "x" * (game.MAX_TITLE + 1)),
        ("room title", "Room\n1. Mallory 100%"),
        ("room title", "Null\x00"),
        ("room title", ""),
    ],
)
async def test_names_and_titles_are_refused_over_the_limit_or_with_control_characters(
    bus: Bus, field: str, value: object
) -> None:
    await _fresh(bus)
    limit = game.MAX_NAME if field == "player name" else game.MAX_TITLE
    message = f"^{field} must be 1-{limit} characters without control characters or newlines$"
    with pytest.raises(ValueError, match=message):
        if field == "player name":
            await game.create_player(bus, value, 5)  # type: ignore[arg-type]
        else:
            await game.create_room(bus, -5, value)  # type: ignore[arg-type]
    assert await bus.transport.command("EXISTS", "cm:players", "cm:room-index") == 0


@pytest.mark.parametrize("chat", [0, 1 << 40, -1_000_000_000_000, -(2**52), True, "-5"])
async def test_a_room_or_player_for_an_id_no_chat_has_is_refused(bus: Bus, chat: object) -> None:
    await _fresh(bus)
    with pytest.raises(ValueError, match=r"^a room's chat must be a Telegram chat id, an int in"):
        await game.create_room(bus, chat, "Room")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^a player's chat must be a Telegram user id"):
        await game.create_player(bus, "Pat", chat)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^a player's chat must be a Telegram user id"):
        await game.create_player(bus, "Pat", -5)  # a group: a player is reached in private
    assert await bus.transport.command("EXISTS", "cm:players", "cm:room-index") == 0


async def test_names_and_titles_at_the_limit_are_accepted(bus: Bus) -> None:
    await _fresh(bus)
    assert (await game.create_player(bus, "x" * game.MAX_NAME, 5)).name == "x" * game.MAX_NAME
    assert (await game.create_player(bus, "  Zoë 🧑\u200d💻  ", 6)).name == "Zoë 🧑\u200d💻"
    assert (await game.create_room(bus, -5, "y" * game.MAX_TITLE)).title == "y" * game.MAX_TITLE


async def test_every_message_fits_telegram_at_the_input_limits(bus: Bus) -> None:
    await _fresh(bus)
    wide, tall = "𝕎", "𝔗"  # outside the BMP: two UTF-16 units, the most a character counts
    assert telegram_length(wide) == telegram_length(tall) == 2
    chat = -4_000_000_000 - random.randrange(10**6)
    room = await game.create_room(bus, chat, tall * game.MAX_TITLE)
    players = [
        await game.create_player(bus, wide * game.MAX_NAME, 10**11 - chat * 100 - n)
        for n in range(game.TOP_N + 1)
    ]
    # The longest announcement: the latest start allowed. Then a round to play at once.
    await game.start_round(bus, room.id, starts_in_ms=game.MAX_START_DELAY_MS)
    await game.end_round(bus, room.id)
    rnd = await game.start_round(bus, room.id, starts_in_ms=0)
    s = rnd.secret
    adjacent = [s[1], s[0], s[3], s[2], s[5], s[4]]  # the longest mark at every position
    for player in players:
        await game.guess(bus, room.id, player.id, adjacent)
        await game.guess(bus, room.id, player.id, s)  # 100%: the widest percentage
    await game.end_round(bus, room.id)
    # Tomorrow's digest reports today: today's board as yesterday's, for a digest sent now.
    today = days.day_of(await bus.transport.server_time_ms())
    await bus.transport.command("COPY", board.day_board(room.id, today).key,
                           board.day_board(room.id, today - 1).key)  # fmt: skip
    await game.send_digest(bus, ids.new(ids.JOB))

    room_texts = await _lane_texts(bus, chat)
    reminders = [
        decode(r.payload).text
        for r in await jobs.list_jobs(bus, NOTIFY_QUEUE, "scheduled", limit=10_000)
        if decode(r.payload).chat == chat
    ]
    replies = [t for p in players for t in await _lane_texts(bus, p.chat)]
    kinds = {
        "announcement": [t for t in room_texts if t.startswith("🎲 New round")],
        "reminder": reminders,
        "guess reply": [t for t in replies if "ADJACENT" in t],
        "results": [t for t in room_texts if t.startswith("Round over") and "100%" in t],
        "digest": [t for t in room_texts if t.startswith("🏆 Daily standings")],
    }
    for kind, texts in kinds.items():
        assert texts, f"no {kind} was sent"
        longest = max(texts, key=telegram_length)
        size = telegram_length(longest)
        assert size <= 4096, f"the {kind} is {size} UTF-16 units"
    for kind in ("results", "digest"):
        (text,) = kinds[kind]
        assert text.count(wide * game.MAX_NAME) == game.TOP_N  # ten standings, full names
        assert tall * game.MAX_TITLE in text


async def test_names_and_titles_with_markup_characters_are_shown_as_written(bus: Bus) -> None:
    # The game's texts go as HTML; a user's "<" or "&" must be escaped, or Telegram answers
    # 400 "can't parse entities" and the notice is dropped. markup.apply is the parser the
    # Bot API stand-in delivers with, and check_notice refuses at enqueue what does not parse.
    await _fresh(bus)
    chat = -1_000_000 - random.randrange(10**6)
    room = await game.create_room(bus, chat, "R&D <b>team</b>")
    player = await game.create_player(bus, "<Tom & Jerry>", 10**9 + random.randrange(10**6))
    rnd = await game.start_round(bus, room.id, starts_in_ms=0)
    await game.guess(bus, room.id, player.id, rnd.secret)
    await game.end_round(bus, room.id)
    notices = [decode(j.payload) for j in await lanes.jobs(bus, NOTIFY_QUEUE, str(chat))]
    assert [n.opts for n in notices] == [{"parse_mode": "HTML"}] * 2
    announced, results = (markup.apply(n.text, "HTML") for n in notices)
    assert f"New round {rnd.id} in R&D <b>team</b>: it starts in" in announced.text
    assert [e.type for e in announced.entities] == ["bold"]  # the title, as one bold run
    assert results.text.endswith(f"🏆 R&D <b>team</b>, round {rnd.id}\n1. <Tom & Jerry> 100%")
    # And over HTTP: the stand-in, as strict as Telegram, takes them and shows them so.
    async with open_stand_in("123456:TEST", None) as tg, open_bot("123456:TEST", tg.api_url) as bot:
        for n in notices:
            assert isinstance(await bot.send_message(n.chat, n.text, **n.opts), Delivered)
        assert [d.shown for d in tg.deliveries] == [announced.text, results.text]
    units = results.text.encode("utf-16-le")  # entities count UTF-16 units
    assert [(e.type, units[2 * e.offset : 2 * (e.offset + e.length)].decode("utf-16-le"))
            for e in results.entities] == [("bold", "".join(rnd.secret))]  # fmt: skip
