"""A damaged append-only file, repaired with the documented command, sends nothing twice:
``python -m codemojex.run`` on a temp data directory delivers notices to the test's Bot API
stand-in (which counts every ``sendMessage``) and archives them; stopped, its server's file gets
24 bytes of garbage in the middle; the next start is refused in one line that names
``echomq repair``; after the repair, notices delivered before the damage are pending again on
the server, yet the restarted service sends none of them again (the audit archive is its
ledger) while notices not delivered before arrive once."""

import collections
import re
import signal
from pathlib import Path

import httpx
import pytest
import trio

from codemojex.audit import read_archive
from codemojex.notify import NOTIFY_QUEUE, job_id_of, notify
from codemojex.standin import open_stand_in
from echomq_trio import jobs, lanes, open_bus
from tests.support import (
    Lines,
    damage_aof,
    echomq,
    parse,
    start_service,
    stop_process,
    value,
    wait_for,
)

pytestmark = pytest.mark.slow

TOKEN = "123456:REPAIR-TEST"
CHATS = 40  # private chats, 3 notices each: delivered before the damage
PER_CHAT = 3
WAITING = 20  # chats whose lane is paused until after the repair: one notice each


def text_of(chat: int, n: int) -> str:
    return f"notice {n} to {chat}"


@pytest.mark.timeout_s(240)
async def test_after_a_repair_no_delivered_notice_is_sent_again(tmp_path: Path) -> None:
    chats = [10_000 + c for c in range(CHATS)]
    paused = [20_000 + c for c in range(WAITING)]
    async with open_stand_in(TOKEN) as tg:  # Telegram's own flood rules
        service = ("--telegram-token", TOKEN, "--telegram-api-url", tg.api_url, "--demo", "off",
                   "--summary-every", "0.5")  # fmt: skip
        async with open_bus(data_dir=tmp_path) as bus:
            for chat in paused:
                await lanes.pause(bus, NOTIFY_QUEUE, str(chat))
                await notify(bus, chat, text_of(chat, 0))
            sent = [await notify(bus, chat, text_of(chat, n))
                    for n in range(PER_CHAT) for chat in chats]  # fmt: skip
        (incr,) = (tmp_path / "appendonlydir").glob("*.incr.aof")
        before_service = incr.stat().st_size

        # The service delivers them and archives them; a clean stop drains the archiver.
        proc = await start_service(tmp_path, *service)
        try:
            out = Lines(proc)
            await out.until(r"codemojex is running")
            await wait_for(lambda: tg.delivered() >= len(sent), timeout=60)
            await out.until(rf"archived {len(sent)}\b")
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                await proc.wait()
            assert proc.returncode == 0, "\n".join(await out.rest())
        finally:
            await stop_process(proc)
        archived = read_archive(tmp_path / "audit.sqlite", lambda db: db.counts())
        assert archived == {"delivered": len(sent)}

        # Garbage in the middle of what the service wrote: the next start is refused.
        damage_aof(tmp_path, after=before_service)
        proc = await start_service(tmp_path, *service)
        try:
            with trio.fail_after(60):
                lines = await Lines(proc).rest()
                await proc.wait()
        finally:
            await stop_process(proc)
        assert proc.returncode == 1, lines
        refusal = [line for line in lines if line.startswith("codemojex:")]
        assert len(refusal) == 1 and not any("Traceback" in line for line in lines), lines
        assert f"`echomq repair --data-dir {tmp_path}`" in refusal[0], refusal

        repaired = await echomq("repair", "--data-dir", str(tmp_path))
        assert repaired.returncode == 0, repaired.stderr
        assert re.search(r"cut [\d,]+ bytes", repaired.stdout.decode())

        # What the repair cut: notices delivered (and archived) are pending or held again.
        async with open_bus(data_dir=tmp_path) as bus:
            again = [n for n in sent if await jobs.get_job(bus, NOTIFY_QUEUE, job_id_of(n))]
            for chat in paused:
                await lanes.resume(bus, NOTIFY_QUEUE, str(chat))
        assert again, "the damage cut no delivered notice's ack: the test shows nothing"

        proc = await start_service(tmp_path, *service)
        try:
            out = Lines(proc)
            page_url = (await out.until(r"Leaderboard: (http://\S+)"))[1]
            port = (await out.until(r"server: redis://:\*\*\*@127\.0\.0\.1:(\d+)"))[1]
            await out.until(r"ledger: notices from before .* are checked against")
            password = (tmp_path / "password").read_text().strip()
            total = len(sent) + WAITING
            async with open_bus(f"redis://:{password}@127.0.0.1:{port}") as bus:

                async def settled() -> bool:
                    for notice in again:
                        if await jobs.get_job(bus, NOTIFY_QUEUE, job_id_of(notice)):
                            return False
                    return tg.delivered() >= total

                await wait_for(settled, timeout=90, step=0.2)
            async with httpx.AsyncClient() as client:
                metrics = parse((await client.get(page_url + "/metrics")).text)
            skipped = value(metrics, "codemojex_notices_total", outcome="already_delivered")
            assert skipped == len(again)  # each settled without a send, and counted
            await out.until(rf"already delivered {len(again)}\b")  # on the summary line
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                await proc.wait()
            assert proc.returncode == 0, "\n".join(await out.rest())
        finally:
            await stop_process(proc)

        arrived = collections.Counter((d.chat_id, d.text) for d in tg.deliveries)
        expected = {(chat, text_of(chat, n)) for n in range(PER_CHAT) for chat in chats}
        expected |= {(chat, text_of(chat, 0)) for chat in paused}
        assert tg.delivered() == total == len(tg.deliveries)
        assert set(arrived) == expected and set(arrived.values()) == {1}, arrived.most_common(3)

    counts, (deliveries, resent) = read_archive(
        tmp_path / "audit.sqlite", lambda db: (db.counts(), db.delivery_counts())
    )
    assert counts == {"delivered": total} and (deliveries, resent) == (total, 0)
