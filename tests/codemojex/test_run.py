"""``python -m codemojex.run`` as a user runs it: it serves the page, delivers notices to the
Telegram stand-in, exits cleanly on SIGTERM, and a second start resumes; a SIGTERM amid a backlog
hands the updates in hand back without spending their attempts; a start on data written before
the room index lists those rooms."""

import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
import trio

from codemojex import ids
from codemojex import run as service
from codemojex.chat import UPDATES_QUEUE, admit
from codemojex.chat.directory import room_of_chat
from codemojex.game.rooms import room_key
from codemojex.run import STAND_IN_TOKEN, telegram_endpoint
from echomq_trio import events, jobs, open_bus
from echomq_trio.server import start_server
from tests.support import (
    ROOT,
    Lines,
    parse,
    server_has_waitaof,
    server_is_valkey,
    start_and_stop,
    start_service,
    stop_process,
    wait_for,
)

pytestmark = pytest.mark.slow


async def _start(data_dir: Path) -> trio.Process:
    return await start_service(data_dir, "--summary-every", "0.5")


@pytest.mark.timeout_s(120)
async def test_run_serves_delivers_and_stops_cleanly_then_resumes(tmp_path: Path) -> None:
    proc = await _start(tmp_path)
    try:
        out = Lines(proc)
        page_url = (await out.until(r"Leaderboard: (http://\S+)"))[1]
        dashboard, token = (await out.until(r"bus dashboard: (http://\S+)/#token=(\S+)")).groups()
        assert dashboard == page_url + "/bus"
        await out.until(r"telegram: local stand-in at http://127\.0\.0\.1:\d+ \(no bot token")
        await out.until(r"daily digest: registered, next run 20\d\d-\d\d-\d\dT.*Z \(in ")
        async with httpx.AsyncClient() as client:
            page = await client.get(page_url)
            assert page.status_code == 200 and "live leaderboard" in page.text
            assert (await client.get(page_url + "/rooms.json")).status_code == 200
            moved = await client.get(dashboard)
            assert moved.status_code == 308 and moved.headers["location"] == "/bus/"
            assert "bus dashboard" in (await client.get(dashboard + "/")).text

            async def lists_notify() -> bool:
                state = (await client.get(dashboard + "/state.json")).json()
                return "cm.notify" in [q["name"] for q in state["queues"]]

            await wait_for(lists_notify, timeout=60, step=0.2)
            job = ids.new(ids.JOB)
            refused = await client.post(f"{dashboard}/replay?queue=cm.notify&job={job}")
            assert refused.status_code == 403
            gone = await client.post(f"{dashboard}/replay?queue=cm.notify&job={job}",
                                     headers={"x-echomq-token": token})  # fmt: skip
            assert gone.json() == {"outcome": "gone"}
        with trio.fail_after(60):
            await out.until(r"notices sent [1-9]")  # the demo's notices reached the stand-in
            await out.until(r"archived [1-9]")  # and their audit rows reached the archive
        proc.send_signal(signal.SIGTERM)
        t0 = trio.current_time()
        with trio.fail_after(15):
            await out.until(r"^stopped$")
            await proc.wait()
        assert proc.returncode == 0, "\n".join(out.seen)
        assert trio.current_time() - t0 < 10
        assert not any("Traceback" in line for line in out.seen), "\n".join(out.seen)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # A second start on the same data resumes: the digest is already registered.
    await start_and_stop(tmp_path, r"daily digest: exists", "--summary-every", "0.5",
                         stop=signal.SIGINT)  # fmt: skip


BACKLOG = 3000  # updates waiting at start: more than the service handles before it is stopped
SETTLED_BEFORE_STOP = 100  # updates the service has handled when the test stops it


def help_in_private(n: int) -> dict[str, object]:
    """Update ``n``: a person's ``/help`` in a private chat of their own."""
    person = 10**9 + n
    chat = {"id": person, "type": "private"}
    sender = {"id": person, "is_bot": False, "first_name": f"P{n}"}
    return {"update_id": n, "message": {"message_id": 1, "chat": chat, "from": sender,
                                        "text": "/help"}}  # fmt: skip


@pytest.mark.timeout_s(180)
async def test_sigterm_amid_a_backlog_hands_updates_back_without_spending_attempts(
    tmp_path: Path,
) -> None:
    """cm.updates is served by the service's Worker: on SIGTERM its consumer stops claiming,
    finishes what runs, and hands every update it holds but did not start back to pending with
    its attempt not counted. Counted from the bus after the stop: nothing active, retried or
    dead, every update handled or pending, and each released one pending at attempt 0."""
    bot_id = int(STAND_IN_TOKEN.split(":")[0])
    async with open_bus(data_dir=tmp_path) as bus:  # one private chat per update: many lanes
        async with trio.open_nursery() as nursery:
            for first in range(20):  # 20 admitting tasks, each a stride of the updates

                async def admit_some(first: int) -> None:
                    for n in range(first, BACKLOG, 20):
                        await admit(bus, help_in_private(n), bot_id)

                nursery.start_soon(admit_some, first)
        assert (await jobs.counts(bus, UPDATES_QUEUE)).pending == BACKLOG
    # Stopped once its consumer has settled some updates: by then it holds jobs ahead of its
    # handlers at their pace (an untuned consumer starts with few ahead).
    proc = await start_service(tmp_path, "--demo", "off", "--summary-every", "0")
    try:
        out = Lines(proc)
        with trio.fail_after(60):
            page_url = (await out.until(r"Leaderboard: (http://\S+)"))[1]
        async with httpx.AsyncClient() as client:

            async def settled_enough() -> bool:
                samples = parse((await client.get(page_url + "/metrics")).text)
                labels = (("outcome", "acked"), ("queue", UPDATES_QUEUE))
                acked = samples.get(("echomq_consumer_jobs_total", labels), 0.0)
                return acked >= SETTLED_BEFORE_STOP

            await wait_for(settled_enough, timeout=60)
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            await proc.wait()
        assert proc.returncode == 0, "\n".join(await out.rest())
        assert "stopped" in await out.rest()
    finally:
        await stop_process(proc)
    async with open_bus(data_dir=tmp_path) as bus:
        counts = await jobs.counts(bus, UPDATES_QUEUE)
        assert (counts.active, counts.dead, counts.retried_total) == (0, 0, 0)
        assert counts.completed_total + counts.pending == BACKLOG
        assert counts.pending > 0, "the backlog was done before the stop: make it larger"
        released = [e.subject for e in await events.read(bus, UPDATES_QUEUE, count=100_000)
                    if e.kind == "released"]  # fmt: skip
        assert released, f"nothing was held at the stop: {counts}"
        for job_id in released:
            info = await jobs.get_job(bus, UPDATES_QUEUE, job_id)
            assert info is not None and (info.state, info.attempts) == ("pending", 0), info


@pytest.mark.timeout_s(90)
async def test_a_start_moves_the_rooms_of_the_old_set_into_the_index(tmp_path: Path) -> None:
    old = [(ids.new(ids.ROOM), f"Old Room {i}") for i in range(2)]
    async with open_bus(data_dir=tmp_path) as bus:  # rooms as the code before the index kept them
        for i, (room, title) in enumerate(old):
            await bus.transport.command("HSET", room_key(room, "room"), "chat", str(-70 - i),
                                   "title", title)  # fmt: skip
            await bus.transport.command("SADD", "cm:rooms", room)
        await bus.transport.command("HSET", "cm:chat-rooms", "-70", old[0][0])  # and a chat's link
    proc = await start_service(tmp_path, "--demo", "off", "--summary-every", "0")
    try:
        out = Lines(proc)
        with trio.fail_after(60):
            page_url = (await out.until(r"Leaderboard: (http://\S+)"))[1]
            await out.until(r"rooms: moved 2 room\(s\) of the old set cm:rooms into the index")
            await out.until(r"chats: moved 1 chat link\(s\) of cm:chat-rooms beside the migrated")
        async with httpx.AsyncClient() as client:
            listed = (await client.get(page_url + "/rooms.json")).json()
        assert listed == {"rooms": [{"id": r, "title": t} for r, t in old], "next": None}
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            await proc.wait()
        assert proc.returncode == 0, "\n".join(out.seen)
    finally:
        await stop_process(proc)
    async with open_bus(data_dir=tmp_path) as bus:
        assert await room_of_chat(bus, -70) == old[0][0]
        assert await bus.transport.command("EXISTS", "cm:chat-rooms") == 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--global-limit", "30"], "--global-limit must look like LIMIT/WINDOW_MS"),
        (["--page-port", "99999"], "--page-port must be a port number"),
        (["--demo", "maybe"], "--demo must be on or off"),
        (["--url", "http://x"], "--url: server URL scheme"),
        (["--summary-every", "-1"], "--summary-every must be >= 0"),
        (["--compact-segments", "1"], "--compact-segments must be >= 2"),
        (["--compact-segments", "many"], "--compact-segments must be an integer"),
        (["--round-keep", "0.5"], "--round-keep must be >= 1"),
        (["--round-keep", "nan"], "--round-keep must be >= 1"),
        (["--updates", "push"], "--updates must be poll or webhook"),
        (["--webhook-url", "http://example.org/hook"], "--webhook-url must be an https:// URL"),
        (["--updates", "webhook", "--telegram-token", "1:A"], "needs --webhook-url"),
        (["--round-length", "1"], "--round-length must be >= 5"),
        (["--telegram-hang-after", "0"], "--telegram-hang-after must be >= 0.1"),
        (["--digest-at", "9am"], "--digest-at: a digest time is HH:MM"),
        (["--digest-tz", "CEST"], "--digest-tz: unknown time zone 'CEST'"),
    ],
)
def test_bad_settings_are_one_clear_line(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``main`` in this process, as the command calls it (the logging setup left out: it would
    # outlive the test); the command itself is the test below.
    monkeypatch.setattr(service, "log_to_stderr", lambda: None)
    assert service.main(args) == 2
    out, err = capsys.readouterr()
    assert words in err and "Traceback" not in err and out == ""
    assert len(err.strip().splitlines()) == 1


async def test_a_bad_setting_is_one_line_and_exit_2_from_the_command() -> None:
    done = await trio.run_process(
        [sys.executable, "-m", "codemojex.run", "--round-length", "1"], cwd=ROOT,
        capture_stdout=True, capture_stderr=True, check=False,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err and done.stdout == b""
    assert err.splitlines() == ["codemojex: --round-length must be >= 5, got '1'"]


async def test_an_s3_replica_without_boto3_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """boto3 made unimportable (``sys.modules["boto3"] = None``): refused before anything starts
    (no server, no archive), one line naming the replica and the fix."""
    no_boto3 = ("import runpy, sys; sys.modules['boto3'] = None; "
                "sys.argv[0] = 'codemojex.run'; runpy.run_module('codemojex.run', "
                "run_name='__main__', alter_sys=True)")  # fmt: skip
    done = await trio.run_process(
        [sys.executable, "-c", no_boto3, "--data-dir", str(tmp_path), "--page-port", "0",
         "--feed-port", "0", "--replica", "s3://audit-bucket/cm"],
        cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.splitlines() == [
        "codemojex: the replica s3://audit-bucket/cm needs boto3, which cannot be imported "
        "(import of boto3 halted; None in sys.modules): install it with pip install "
        "'codemojex[s3]', or name a directory as the replica"
    ]
    assert not (tmp_path / "server.log").exists() and not (tmp_path / "audit.sqlite").exists()


async def test_help_documents_every_setting() -> None:
    done = await trio.run_process(
        [sys.executable, "-m", "codemojex.run", "--help"], cwd=ROOT, capture_stdout=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    text = done.stdout.decode()
    for flag in ("--url", "--data-dir", "--telegram-token", "--global-limit", "--private-limit",
                 "--group-limit", "--host", "--page-port", "--feed-port", "--demo",
                 "--archive", "--archive-db", "--replica", "--summary-every",
                 "--compact-segments", "--round-keep", "--updates", "--webhook-url",
                 "--round-length", "--telegram-hang-after", "--digest-at",
                 "--digest-tz"):  # fmt: skip
        assert flag in text
    assert "CODEMOJEX_TELEGRAM_TOKEN" in text


def test_the_first_screen_names_the_telegram_endpoint_in_use() -> None:
    local = telegram_endpoint("http://127.0.0.1:4000", local=True)
    assert local.startswith("local stand-in at http://127.0.0.1:4000")
    assert "nothing reaches Telegram" in local
    assert telegram_endpoint("https://api.telegram.org/", local=False) == (
        "Telegram's Bot API at https://api.telegram.org"
    )
    assert telegram_endpoint("http://bot-api.internal:8081", local=False) == (
        "the Bot API server at http://bot-api.internal:8081 (--telegram-api-url)"
    )


@pytest.mark.timeout_s(120)
async def test_the_first_screen_says_when_notices_wait_for_the_disk_and_when_they_cannot(
    tmp_path: Path,
) -> None:
    """Its own server keeps an append-only file: notify() waits for it, synced. A server given by
    --url: where its WAITAOF answers before its sync (Valkey), the notice is written, not
    synced; where it keeps no file, in its memory only; the first screen says which."""
    out = await start_and_stop(tmp_path / "own", r"durability: ", "--summary-every", "0",
                               "--demo", "off")  # fmt: skip
    assert "durability: notify() returns a notice's id once the server's append-only file " in (
        out.text()
    )
    # Valkey answers WAITAOF before its sync (storage.waitaof_syncs): the bus syncs its own
    # server's file itself, so notices are synced; through --url it cannot, and says so.
    assert "written but not yet synced" not in out.text()
    async with start_server(tmp_path / "aof") as server:
        out = await start_and_stop(tmp_path / "url-aof", r"durability: ", "--summary-every", "0",
                                   "--demo", "off", "--url", server.url)  # fmt: skip
    assert ("written but not yet synced" in out.text()) == server_is_valkey()
    async with start_server(tmp_path / "d", extra_config=[("appendonly", "no")]) as server:
        out = await start_and_stop(tmp_path / "url", r"durability: ", "--summary-every", "0",
                                   "--demo", "off", "--url", server.url)  # fmt: skip
    assert "keeps no append-only file, so a notice is in its memory only" in out.text()


@pytest.mark.timeout_s(120)
@pytest.mark.skipif(server_has_waitaof(), reason="a server without WAITAOF (Redis 7.0) only")
async def test_a_server_without_waitaof_holds_notices_in_memory_and_the_first_screen_says_so(
    tmp_path: Path,
) -> None:
    """A server given by --url that keeps an append-only file but has no WAITAOF to wait for
    it (Redis 7.0): the service runs, notices in memory, and says so; no refusal."""
    async with start_server(tmp_path / "d") as server:
        out = await start_and_stop(tmp_path / "url", r"durability: ", "--summary-every", "0",
                                   "--demo", "off", "--url", server.url)  # fmt: skip
    assert "has no WAITAOF (a Redis before 7.2), so notify() returns once a notice is in its " \
        "memory" in out.text()  # fmt: skip


def test_the_digest_time_and_zone_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from codemojex.settings import parse_settings

    default = parse_settings([])
    assert (default.digest_at, default.digest_tz) == ("00:10", "UTC")
    monkeypatch.setenv("CODEMOJEX_DIGEST_TZ", "Europe/Berlin")
    s = parse_settings(["--digest-at", "09:30"])
    assert (s.digest_at, s.digest_tz) == ("09:30", "Europe/Berlin")
