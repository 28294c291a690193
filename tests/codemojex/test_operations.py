"""``python -m codemojex.run`` against an operator's ordinary mistakes and process deaths, each
caused for real, each checked against a ledger that survives it: the Telegram stand-in (run in
this test process, so it outlives the service and its server), the archive on disk, and the
server's own log.

- two starts on one data directory: one runs, the other exits 2 naming the holder, and only one
  server ever started (the server log counts its starts);
- the embedded server killed with SIGKILL mid-burst: restarted, every notice delivered in order
  per chat, once but for an ack the killed server held unwritten, one archive row per notice;
- the service killed with SIGKILL: its server goes too, within 2 s; the next start resumes;
- no process the service starts shows the password; the data directory is private;
- a port in use, a second Ctrl-C, a server that keeps dying: each a clear exit.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import sqlite3
import stat
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import connect_websocket_url

from codemojex import game
from codemojex.game import board
from codemojex.notify.notifier import notify
from codemojex.standin.bot_api import Scripted, open_stand_in
from echomq_trio import Bus, BusError, jobs, open_bus
from tests.support import (
    Lines,
    all_cmdlines,
    processes_in,
    server_pid,
    start_service,
    stop_process,
    wait_for,
)

pytestmark = pytest.mark.slow

TOKEN = "123456:OPERATIONS"
SERVER_LINE = r"server: redis://:\*\*\*@127\.0\.0\.1:(\d+)/0"


def server_starts(data_dir: Path) -> int:
    """How many times a server started on ``data_dir``: its log keeps every start."""
    log = (data_dir / "server.log").read_text(errors="replace")
    return len(re.findall(r"Ready to accept connections", log))


def archive_rows(db: Path, where: str = "1 = 1") -> int:
    """Rows in the audit archive, read-only (the service may be writing it)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            return int(conn.execute(f"SELECT COUNT(*) FROM notices WHERE {where}").fetchone()[0])
        except sqlite3.OperationalError:  # not created yet
            return 0


def bus_url(data_dir: Path, port: str) -> str:
    password = (data_dir / "password").read_text().strip()
    return f"redis://:{password}@127.0.0.1:{port}"


async def settled_total(data_dir: Path) -> int:
    """Notices settled (delivered, dropped or dead) according to the bus, read after the
    service stopped by opening its data directory."""
    async with open_bus(data_dir=data_dir) as bus:
        c = await jobs.counts(bus, "cm.notify")
        return c.completed_total + c.dead_total


@pytest.mark.timeout_s(150)
async def test_two_starts_on_one_data_dir_one_runs_the_other_exits_naming_it(
    tmp_path: Path,
) -> None:
    first = await start_service(tmp_path, "--summary-every", "0.5")
    second = await start_service(tmp_path, "--summary-every", "0.5")
    try:
        outs = {first: Lines(first), second: Lines(second)}
        loser: trio.Process | None = None
        with trio.fail_after(30):
            while loser is None:  # whichever took the lock second exits 2 within seconds
                await trio.sleep(0.05)
                loser = next((p for p in outs if p.returncode is not None), None)
        winner = first if loser is second else second
        lines = await outs[loser].rest()
        assert loser.returncode == 2, lines
        assert lines == [f"codemojex: data directory {tmp_path} is in use by process "
                         f"{winner.pid}; stop it first, or use another one"]  # fmt: skip
        out = outs[winner]
        await out.until(r"codemojex is running")
        with trio.fail_after(60):
            await out.until(r"archived [1-9]")
        assert server_starts(tmp_path) == 1
        winner.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await out.until(r"^stopped$")
            assert await winner.wait() == 0, out.text()
    finally:
        await stop_process(first)
        await stop_process(second)
    assert server_starts(tmp_path) == 1, "a second server started on the same files"
    settled = await settled_total(tmp_path)
    assert settled > 0
    assert archive_rows(tmp_path / "audit.sqlite") == settled


async def _burst(bus: Bus, chats: list[int], per_chat: int) -> list[tuple[int, str]]:
    sent = []
    for i in range(per_chat):
        for chat in chats:
            text = f"burst {chat} #{i}"
            await notify(bus, chat, text)
            sent.append((chat, text))
    return sent


async def _record(bus: Bus, room: str, round_id: str, player: str, percentage: int) -> bool:
    try:
        await board.record(bus, room, round_id, player, percentage)
    except BusError:  # our own connection may not be back yet
        return False
    return True


@pytest.mark.timeout_s(180)
async def test_a_server_killed_mid_burst_is_restarted_and_every_notice_arrives_in_order(
    tmp_path: Path,
) -> None:
    async with open_stand_in(TOKEN) as tg:
        proc = await start_service(
            tmp_path, "--telegram-token", TOKEN, "--telegram-api-url", tg.api_url,
            "--demo", "off", "--summary-every", "1",
        )  # fmt: skip
        try:
            out = Lines(proc)
            page = (await out.until(r"Leaderboard: (http://\S+)"))[1]
            port = (await out.until(SERVER_LINE))[1]
            await out.until(r"daily digest")
            async with httpx.AsyncClient() as http:
                ws_port = (await http.get(page + "/config.json")).json()["ws_port"]
            chats = list(range(7_000_001, 7_000_041))
            async with (
                open_bus(bus_url(tmp_path, port)) as bus,
                trio.open_nursery() as nursery,
            ):
                room = await game.create_room(bus, -1009000000001, "Chaos")
                player = await game.create_player(bus, "Pat", 7_100_001)
                # The page shows the round's board; the round sends the room two notices (its
                # announcement and its start reminder), counted apart from the burst's.
                rnd = await game.start_round(bus, room.id, starts_in_ms=0)
                ws = await connect_websocket_url(
                    nursery, f"ws://127.0.0.1:{ws_port}/rooms/{room.id}"
                )
                assert json.loads(await ws.get_message())["top"] == []
                sent = await _burst(bus, chats, 3)
                # Mid-burst: some delivered, most not.
                with trio.fail_after(30):
                    await tg.wait_deliveries(20)
                killed = server_pid(tmp_path)
                os.kill(killed, signal.SIGKILL)
                before_kill = {(d.chat_id, d.text) for d in tg.deliveries}
                await out.until(rf"embedded server \(pid {killed}\) was killed by SIGKILL; "
                                r"restarted it", timeout_s=60)  # fmt: skip
                assert len(tg.deliveries) < len(sent), "the burst was over before the kill"
                # The live feed resumed too: a score recorded now reaches the viewer.
                await wait_for(partial(_record, bus, room.id, rnd.id, player.id, 42), timeout=30)
                with trio.fail_after(30):
                    top = json.loads(await ws.get_message())["top"]
                assert [(t["name"], t["percentage"]) for t in top] == [("Pat", 42)]
                await ws.aclose()
            with trio.fail_after(90):
                await tg.wait_deliveries(len(sent) + 2)
            # The ledger: every notice, in order within its chat, each once; but an ack the
            # killed server held unwritten (its sync still running: "held writes" in
            # docs/guide/durability.md) sends its notice again once its lease is out: only a
            # notice sent before the kill, and a chat's order holds with repeats taken out.
            delivered = collections.Counter(
                (d.chat_id, d.text) for d in tg.deliveries if d.chat_id != room.chat
            )
            assert set(delivered) == set(sent), "notices lost, or sent that were not asked"
            to_room = collections.Counter(d.text for d in tg.deliveries if d.chat_id == room.chat)
            assert sorted(text[0] for text in to_room) == sorted("🎲⏰"), "the round's notices"
            again = {n for n, times in delivered.items() if times > 1}
            again |= {(room.chat, text) for text, times in to_room.items() if times > 1}
            assert again <= before_kill, "a notice sent twice that had not been sent before"
            print("sent again after the kill:", len(again))
            by_chat = tg.by_chat()
            for chat in chats:
                once_each = list(dict.fromkeys(by_chat[chat]))
                assert once_each == [f"burst {chat} #{i}" for i in range(3)]
            # And one archive row per notice.
            await wait_for(
                lambda: archive_rows(tmp_path / "audit.sqlite", "text LIKE 'burst %'") == len(sent),
                timeout=30,
            )
            await wait_for(
                lambda: (
                    archive_rows(tmp_path / "audit.sqlite", "outcome = 'delivered'")
                    == len(sent) + 2
                ),
                timeout=30,
            )
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                assert await proc.wait() == 0, out.text()
        finally:
            await stop_process(proc)


@pytest.mark.timeout_s(120)
async def test_a_killed_service_leaves_no_server_and_shows_no_password(tmp_path: Path) -> None:
    proc = await start_service(tmp_path, "--summary-every", "0")
    try:
        out = Lines(proc)
        await out.until(r"daily digest: registered")
        server = server_pid(tmp_path)
        assert processes_in(tmp_path) == [server]
        password = (tmp_path / "password").read_text().strip()
        assert password and not any(password.encode() in line for line in all_cmdlines())
        assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o700
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        t0 = trio.current_time()
        await wait_for(lambda: processes_in(tmp_path) == [], timeout=2)
        assert trio.current_time() - t0 < 2
    finally:
        await stop_process(proc)
    # The next start resumes on the same data: the digest registration is still there.
    proc = await start_service(tmp_path, "--summary-every", "0")
    try:
        out = Lines(proc)
        with trio.fail_after(60):
            await out.until(r"daily digest: exists")
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(20):
            assert await proc.wait() == 0, out.text()
    finally:
        await stop_process(proc)


async def test_a_port_in_use_is_named_with_its_flag_before_anything_starts(
    tmp_path: Path,
) -> None:
    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await start_service(tmp_path / "data", "--page-port", str(port))
        try:
            lines = await Lines(proc).rest()
            assert await proc.wait() == 2
        finally:
            await stop_process(proc)
    assert lines == [f"codemojex: port {port} on 127.0.0.1 is in use; choose another with "
                     "--page-port (or CODEMOJEX_PAGE_PORT; 0 picks a free port)"]  # fmt: skip
    assert not (tmp_path / "data" / "server.log").exists(), "a server was started anyway"


@pytest.mark.timeout_s(120)
async def test_a_second_ctrl_c_during_shutdown_exits_130_at_once(tmp_path: Path) -> None:
    async with open_stand_in(TOKEN) as tg:
        proc = await start_service(
            tmp_path, "--telegram-token", TOKEN, "--telegram-api-url", tg.api_url,
            "--demo", "off", "--summary-every", "0",
        )  # fmt: skip
        try:
            out = Lines(proc)
            port = (await out.until(SERVER_LINE))[1]
            await out.until(r"daily digest")
            # A send that hangs keeps the shutdown busy (the worker's grace period).
            tg.script(42, Scripted.hang(60))
            async with open_bus(bus_url(tmp_path, port)) as bus:
                await notify(bus, 42, "hangs")
            await wait_for(lambda: tg.pending_scripts(42) == 0, timeout=30)
            proc.send_signal(signal.SIGINT)
            await out.until(r"SIGINT: shutting down")
            proc.send_signal(signal.SIGINT)
            with trio.fail_after(5):
                lines = await out.rest()
                assert await proc.wait() == 130
            assert not any("Traceback" in line for line in lines), "\n".join(lines)
        finally:
            await stop_process(proc)
    await wait_for(lambda: processes_in(tmp_path) == [], timeout=5)


@pytest.mark.timeout_s(120)
async def test_a_server_that_keeps_dying_ends_the_service_with_a_clear_message(
    tmp_path: Path,
) -> None:
    proc = await start_service(tmp_path, "--summary-every", "0")
    try:
        out = Lines(proc)
        await out.until(r"daily digest")
        for n in range(6):  # the budget is 5 restarts a minute: the 6th death ends it
            pid = server_pid(tmp_path)
            os.kill(pid, signal.SIGKILL)
            if n < 5:
                with trio.fail_after(30):
                    await out.until(rf"\(pid {pid}\) was killed by SIGKILL; restarted it")
        with trio.fail_after(30):
            lines = await out.rest()
            assert await proc.wait() == 1
    finally:
        await stop_process(proc)
    text = "\n".join(lines)
    assert "codemojex: the embedded server" in text and "6 deaths within 60 s" in text, text
    assert "Traceback" not in text, text
    assert processes_in(tmp_path) == []


async def test_rooms_json_answers_503_while_the_server_is_unavailable(tmp_path: Path) -> None:
    from codemojex.game.page import PageServer

    async with open_bus(data_dir=tmp_path) as owner:
        assert owner.server is not None and owner.server.pid is not None
        async with open_bus(owner.server.url + "?timeout_ms=300") as bus, trio.open_nursery() as n:
            url = await n.start(PageServer(bus, 0).serve, "127.0.0.1", 0)
            async with httpx.AsyncClient() as client:
                assert (await client.get(url + "/rooms.json")).status_code == 200
                os.kill(owner.server.pid, signal.SIGSTOP)  # the server stops answering
                try:
                    reply = await client.get(url + "/rooms.json", timeout=10)
                finally:
                    os.kill(owner.server.pid, signal.SIGCONT)
                assert reply.status_code == 503
                assert reply.json() == {"error": "the server is unavailable"}
                assert (await client.get(url + "/rooms.json")).status_code == 200
            n.cancel_scope.cancel()
