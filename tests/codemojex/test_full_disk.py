"""``python -m codemojex.run`` whose data directory's disk fills mid-burst (a tmpfs of its own,
filled for real), counted where the sends arrive (the Bot API stand-in, in this test process).
What must hold: the service stays up and says why (one line naming the data directory, its file
system and its free space; the summary line); it resumes by itself once there is room; every
notice whose id ``notify`` returned is delivered exactly once, in order per chat (a send whose
ack met the full disk is settled once writes return, never sent again)."""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import trio

from codemojex.notify.notifier import notify
from codemojex.run import DURABILITY
from codemojex.standin.bot_api import open_stand_in
from echomq_trio import Bus, ConnectionLost, RequestTimedOut, WritesRefused, open_bus
from tests.codemojex.test_operations import SERVER_LINE, bus_url
from tests.support import (
    Lines,
    parse,
    server_pid,
    start_service,
    stop_process,
    value,
    wait_for,
)

pytestmark = pytest.mark.slow

TOKEN = "123456:FULLDISK"
CHATS = list(range(8_000_001, 8_000_021))
TEXT = "x" * 3_500  # notices of 3.5 KB, as in the report
# The one line that says why: the data directory, its file system, its free space.
REFUSED_LINE = (
    r"refuses writes: it cannot write its append-only file in .*data "
    r"\(file system .*disk, tmpfs\): 0 B free of 64 MiB"
)


@contextmanager
def small_disk(path: Path, mib: int) -> Iterator[Path]:
    """A tmpfs of ``mib`` MiB mounted at ``path`` (needs root, as CI runs), unmounted after."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(path)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the test (root needed): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file; the file, to free them again."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 1 << 20
        while size:
            try:
                os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                size //= 2
    finally:
        os.close(fd)
    return filler


async def _notify_until_taken(bus: Bus, chat: int, text: str) -> None:
    """A user's enqueue while the disk is full: refused (nothing written), tried again."""
    while True:
        try:
            await notify(bus, chat, text)
            return
        except WritesRefused:
            await trio.sleep(0.2)


@pytest.mark.timeout_s(240)
async def test_a_full_disk_is_an_outage_the_service_rides_out_delivering_each_notice_once(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", 64) as disk:
        data = disk / "data"
        async with open_stand_in(TOKEN, keep=10_000) as tg:
            proc = await start_service(
                data, "--telegram-token", TOKEN, "--telegram-api-url", tg.api_url,
                "--demo", "off", "--summary-every", "1",
            )  # fmt: skip
            try:
                out = Lines(proc)
                page = (await out.until(r"Leaderboard: (http://\S+)"))[1]
                port = (await out.until(SERVER_LINE))[1]
                await out.until(r"daily digest")
                sent: list[tuple[int, str]] = []
                async with open_bus(bus_url(data, port)) as bus:
                    for i in range(3):
                        for chat in CHATS:
                            text = f"before {chat} #{i} {TEXT}"
                            await notify(bus, chat, text)
                            sent.append((chat, text))
                    with trio.fail_after(60):
                        await tg.wait_deliveries(10)
                    filler = fill(disk)
                    # The burst goes on while the disk is full: each notice once taken.
                    async with trio.open_nursery() as nursery:
                        for chat in CHATS:
                            text = f"during {chat} {TEXT}"
                            sent.append((chat, text))
                            nursery.start_soon(_notify_until_taken, bus, chat, text)
                        with trio.fail_after(60):
                            await out.until(REFUSED_LINE)
                            await out.until(r"WRITES REFUSED")
                        # The metrics and the dashboard say so too.
                        async with httpx.AsyncClient() as http:
                            got = parse((await http.get(page + "/metrics")).text)
                            state = (await http.get(page + "/bus/state.json")).json()
                        assert value(got, "echomq_server_writes_refused") == 1
                        assert value(got, "echomq_server_disk_free_bytes") == 0
                        assert value(got, "echomq_server_disk_size_bytes") == 64 * 2**20
                        assert state["alert"].startswith("WRITES REFUSED"), state["alert"]
                        assert "0 B free of 64 MiB" in state["alert"]
                        with trio.move_on_after(3):  # it stays up while the disk is full
                            await proc.wait()
                        assert proc.returncode is None, out.text()
                        filler.unlink()
                    with trio.fail_after(60):
                        await out.until(r"writes its append-only file again")
                    async with httpx.AsyncClient() as http:
                        got = parse((await http.get(page + "/metrics")).text)
                        state = (await http.get(page + "/bus/state.json")).json()
                    assert value(got, "echomq_server_writes_refused") == 0
                    assert state["alert"] == ""
                    with trio.fail_after(120):
                        await tg.wait_deliveries(len(sent))
                # Each notice exactly once, in order within its chat.
                delivered = [(d.chat_id, d.text) for d in tg.deliveries]
                assert collections.Counter(delivered) == collections.Counter(sent)
                by_chat = tg.by_chat()
                for chat in CHATS:
                    assert [t.split(" ")[0] for t in by_chat[chat]] == ["before"] * 3 + ["during"]
                proc.send_signal(signal.SIGTERM)
                with trio.fail_after(30):
                    assert await proc.wait() == 0, out.text()
            finally:
                await stop_process(proc)


async def _notify_taken_once(bus: Bus, chat: int, text: str, key: str) -> None:
    """As a careful user retries: the same idempotency key each time, so a notice that was
    taken (in memory) before a refusal is not taken twice."""
    while True:
        try:
            await notify(bus, chat, text, key=key)
            return
        except (ConnectionLost, RequestTimedOut):  # NotDurable too: in memory, not on disk
            await trio.sleep(0.2)


@pytest.mark.timeout_s(240)
async def test_with_admissions_on_disk_a_server_killed_while_the_disk_is_full_loses_no_notice(
    tmp_path: Path,
) -> None:
    """``codemojex.run`` admits on disk (``durability.OnDisk``): ``notify`` returns once the
    server's append-only file holds the notice. Killed with SIGKILL while the disk is full, the
    server comes back with every notice whose ``notify`` returned; each is delivered. A notice
    whose send was in flight when the disk filled may be sent once more (its acknowledgement,
    in memory only, died with the server): counted, and bounded by the sends in flight."""
    with small_disk(tmp_path / "disk", 64) as disk:
        data = disk / "data"
        async with open_stand_in(TOKEN, keep=10_000) as tg:
            proc = await start_service(
                data, "--telegram-token", TOKEN, "--telegram-api-url", tg.api_url,
                "--demo", "off", "--summary-every", "1",
            )  # fmt: skip
            try:
                out = Lines(proc)
                port = (await out.until(SERVER_LINE))[1]
                await out.until(r"durability: notify\(\) returns a notice's id once")
                sent: list[tuple[int, str]] = []
                # This process notifies as the service does: admissions on disk.
                async with open_bus(bus_url(data, port), durability=DURABILITY) as bus:
                    # A round of every chat's notices at a time, together: a notify on disk waits
                    # for the server's next fsync (once a second), so 60 in a row took a minute.
                    for i in range(3):  # each chat's in order
                        async with trio.open_nursery() as nursery:
                            for chat in CHATS:
                                text = f"before {chat} #{i} {TEXT}"
                                nursery.start_soon(notify, bus, chat, text)
                                sent.append((chat, text))
                    with trio.fail_after(60):
                        await tg.wait_deliveries(10)
                    filler = fill(disk)
                    taken: list[tuple[int, str]] = []
                    async with trio.open_nursery() as nursery:

                        async def one(chat: int) -> None:
                            text = f"during {chat} {TEXT}"
                            await _notify_taken_once(bus, chat, text, f"during:{chat}")
                            taken.append((chat, text))

                        for chat in CHATS:
                            nursery.start_soon(one, chat)
                        await out.until(REFUSED_LINE, timeout_s=60)
                        killed = server_pid(data)
                        os.kill(killed, signal.SIGKILL)
                        # On a loaded machine (CI's three workers) this line once took over 30 s:
                        # a miss prints what the service said meanwhile.
                        await out.until(rf"embedded server \(pid {killed}\) was killed",
                                        timeout_s=90)  # fmt: skip
                        with trio.move_on_after(2):
                            await proc.wait()
                        assert proc.returncode is None, out.text()
                        filler.unlink()
                    sent += taken

                    def every_one_came() -> bool:  # not a count: one may come twice (below)
                        return {(d.chat_id, d.text) for d in tg.deliveries} >= set(sent)

                    with contextlib.suppress(AssertionError):  # the asserts below say which
                        await wait_for(every_one_came, timeout=120, step=0.1)
                # Every notice that notify returned (and every one taken before the fill) came.
                delivered = collections.Counter((d.chat_id, d.text) for d in tg.deliveries)
                assert set(sent) - set(delivered) == set(), "notices that never came"
                assert set(delivered) == set(sent)
                twice = sum(n - 1 for n in delivered.values())
                in_flight = 8  # the worker's concurrency: at most this many sends unsettled
                print("sent twice:", twice)
                assert twice <= in_flight, twice
                proc.send_signal(signal.SIGTERM)
                with trio.fail_after(30):
                    assert await proc.wait() == 0, out.text()
            finally:
                await stop_process(proc)
