"""``python -m echomq_trio`` on a partitioned queue of 3, named by its name: each command sees
(or sets) every partition, as one queue; a partition's own name still names that partition
alone, and says so on stderr. (A plain queue's output is ``test_cli.py``'s, unchanged.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
import trio
import trio.lowlevel

from echomq_trio import Bus, Job, jobs, open_bus, partitions, queues
from echomq_trio.partitions import PartitionedQueue
from tests.echomq_trio.test_cli import echomq
from tests.support import ROOT

pytestmark = pytest.mark.slow


def _one_lane_each(pq: PartitionedQueue) -> list[str]:
    """A lane in each partition, in partition order."""
    by = {pq.partition_of(g): g for g in (f"chat{i}" for i in range(60))}
    return [by[q] for q in pq.names]


async def _dead_in(bus: Bus, queue: str, error: str) -> str:
    job_id = (await jobs.enqueue(bus, queue, "x")).id
    (job,) = await jobs.claim(bus, queue, 1)
    await jobs.retry(bus, queue, job.id, job.token, 0, 1, error)
    return job_id


async def _run(url: str, *args: str) -> str:
    out = await echomq(*args, url=url)
    assert out.returncode == 0, out.stderr
    assert out.stderr == b"", out.stderr
    return out.stdout.decode()


async def test_ls_and_show_see_every_partition(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        pq = await partitions.create(bus, queue, 3)
        dead = await _dead_in(bus, pq.names[2], "HTTP 502")  # first: the claim takes it
        flat = [a.id for a in await pq.enqueue_many([f"f{i}" for i in range(6)])]
        groups = _one_lane_each(pq)
        laned = [(await pq.lane_enqueue(g, f"in {g}")).id for g in groups]
        for i, g in enumerate(groups):
            await pq.register(f"r{i}", every_ms=60_000 * (i + 1), template="x", group=g)
        later = (await pq.enqueue_in("later", 3_600_000, job_id=None)).id
    text = await _run(standalone_url, "ls", queue, "pending")
    assert all(j in text for j in flat + laned), text
    listed = json.loads(await _run(standalone_url, "--json", "ls", queue, "pending"))
    assert {r["id"] for r in listed} == {*flat, *laned}
    lanes = json.loads(await _run(standalone_url, "--json", "ls", queue, "lanes"))
    assert [s["group"] for s in lanes] == sorted(groups)
    repeats = json.loads(await _run(standalone_url, "--json", "ls", queue, "repeat"))
    assert [r["name"] for r in repeats] == ["r0", "r1", "r2"]
    assert dead in await _run(standalone_url, "ls", queue, "dead")
    assert later in await _run(standalone_url, "ls", queue, "scheduled")
    shown = await _run(standalone_url, "show", queue, dead)
    assert re.search(rf"^partition\s+2 \({re.escape(pq.names[2])}\)$", shown, re.M), shown
    assert "HTTP 502" in shown
    flow = await _run(standalone_url, "flow", queue, dead)
    assert flow.strip() == f"{dead}  dead", "a job of any partition is of this queue"
    as_json = json.loads(await _run(standalone_url, "--json", "show", queue, laned[1]))
    assert as_json["group"] == groups[1]
    out = await echomq("ls", pq.names[1], "pending", url=standalone_url)
    assert out.returncode == 0 and laned[1] in out.stdout.decode()
    assert laned[0] not in out.stdout.decode(), "a partition's own name: that partition"
    note = out.stderr.decode()
    assert f"{pq.names[1]} is partition 1 of queue {queue}" in note, note


async def test_repairs_and_controls_reach_every_partition(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        pq = await partitions.create(bus, queue, 3)
        blocked = [await _dead_in(bus, q, "Forbidden: bot was blocked") for q in pq.names]
        others = [await _dead_in(bus, q, "HTTP 502") for q in pq.names]
        out = await _run(standalone_url, "replay", queue, blocked[2])
        assert out.strip() == f"replayed {blocked[2]}"
        out = await _run(standalone_url, "replay", queue, "--all", "--reason", "blocked")
        assert out.strip() == "replayed 2 dead jobs"
        assert {j.id for j in await pq.dead_jobs()} == set(others)
        assert json.loads(await _run(standalone_url, "--json", "replay", queue, "--all")) == {
            "replayed": 3
        }
        out = await _run(standalone_url, "cancel", queue, others[1], "--reason", "no")
        assert out.strip() == f"cancelled {others[1]}"
        assert (await pq.counts()).cancelled == 1
        await pq.register("nightly", every_ms=86_400_000, template="x", group=_one_lane_each(pq)[2])
        assert (await _run(standalone_url, "cancel-repeat", queue, "nightly")).strip() == (
            "cancelled nightly"
        )
        assert (await _run(standalone_url, "pause", queue)).strip() == f"paused {queue}"
        assert [(await queues.control(bus, q)).paused for q in pq.names] == [True] * 3
        assert (await _run(standalone_url, "resume", queue)).strip() == f"resumed {queue}"
        assert [(await queues.control(bus, q)).paused for q in pq.names] == [False] * 3
        await _run(standalone_url, "expired", queue, "drop")
        assert [(await queues.control(bus, q)).expired for q in pq.names] == ["drop"] * 3
        assert (await _run(standalone_url, "delete", queue, blocked[1])).strip() == (
            f"deleted {blocked[1]}"
        )
        out = await _run(standalone_url, "delete", queue, "--state", "pending", "--limit", "3")
        assert out.strip() == "deleted 3 pending jobs"
        out = await _run(standalone_url, "delete", queue, "--state", "pending")
        assert out.strip() == "deleted 1 pending jobs"
        assert (await pq.counts()).pending == 0
        # limit: the whole queue's cap, shared out over the partitions (never more in all)
        out = await _run(standalone_url, "limit", queue, "10")
        assert out.strip() == f"{queue}: at most 10 jobs in flight (0 in flight now)"
        got = await pq.limit()
        assert got.total == 10 and None not in got.shares
        assert sum(s for s in got.shares if s is not None) == 10
        assert (await queues.control(bus, queue)).max_active == 10  # the total, not a share
        out = await _run(standalone_url, "limit", queue, "none")
        assert out.strip() == f"{queue}: no cap on jobs in flight (0 in flight now)"
        assert (await pq.limit()).total is None
        assert [(await queues.control(bus, q)).max_active for q in pq.names] == [None] * 3


async def test_result_is_read_from_the_job_s_partition(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        pq = await partitions.create(bus, queue, 3)
        await pq.keep_results(60_000)
        admitted = [(await pq.enqueue(f"j{i}")).id for i in range(3)]

        async def handler(job: Job) -> bytes:
            return b"done " + job.payload

        async with trio.open_nursery() as nursery:
            await nursery.start(partitions.PartitionedConsumer(pq, handler).run)
            for i, job_id in enumerate(admitted):
                out = await _run(standalone_url, "result", queue, job_id)
                assert out.strip() == f"done j{i}"
            nursery.cancel_scope.cancel()
        assert len({await pq.holder(j) for j in admitted}) == 3


async def test_tail_follows_every_partition(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        pq = await partitions.create(bus, queue, 3)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "echomq_trio", "--url", standalone_url, "--json", "tail", queue],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
        )  # fmt: skip
        try:
            sent: list[str] = []
            buf = b""
            assert proc.stdout is not None
            with trio.fail_after(30):  # the tail starts at "now": enqueue until one shows
                while not any(s.encode() in buf for s in sent):
                    sent.append((await pq.enqueue("warm-up")).id)
                    with trio.move_on_after(0.5):
                        buf += await proc.stdout.receive_some(4096)
                sent = [(await pq.enqueue(f"j{i}")).id for i in range(3)]  # one in each
                while not all(s.encode() in buf[: buf.rfind(b"\n")] for s in sent):
                    buf += await proc.stdout.receive_some(4096)  # until their lines are whole
            whole = buf[: buf.rfind(b"\n") + 1]  # the lines printed whole
            shown = [json.loads(x) for x in whole.decode().splitlines()]
            mine = [e for e in shown if e["subject"] in sent and e["kind"] == "enqueued"]
            assert {e["partition"] for e in mine} == {0, 1, 2}, mine
            times = [e["time_ms"] for e in shown]
            assert times == sorted(times)
            proc.send_signal(signal.SIGINT)
            with trio.fail_after(10):
                assert await proc.wait() == 130
        finally:
            proc.kill()
            await proc.wait()
