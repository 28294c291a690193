"""``python -m echomq_trio`` against a live server: each subcommand's output, and its errors."""

import json
import os
import re
import signal
import subprocess
import sys

import httpx
import pytest
import trio

from echomq_trio import Bus, ids, jobs, open_bus, partitions, repeat, retention
from echomq_trio.server import free_port
from tests.support import ROOT

pytestmark = pytest.mark.slow


async def echomq(*args: str, url: str | None = None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if url is not None:
        env["ECHOMQ_URL"] = url
    return await trio.run_process(
        [sys.executable, "-m", "echomq_trio", *args],
        capture_stdout=True, capture_stderr=True, check=False, env=env, cwd=ROOT,
    )  # fmt: skip


async def _fill(bus: Bus, queue: str) -> tuple[str, str]:
    dead, pend = ids.generate("JOB"), ids.generate("JOB")  # dead first: claimed first
    await jobs.enqueue_many(bus, queue, [(dead, "doomed"), (pend, "hello")])
    (job,) = await jobs.claim(bus, queue, 1)
    assert job.id == dead
    await jobs.retry(bus, queue, dead, job.token, 0, 1, "ValueError: bad input")
    await repeat.register(bus, queue, "nightly", 86_400_000, "digest")
    return pend, dead


async def _kill(bus: Bus, queue: str, error: str) -> str:
    job_id = ids.generate("JOB")
    await jobs.enqueue(bus, queue, "x", job_id=job_id)
    (job,) = await jobs.claim(bus, queue, 1)
    await jobs.retry(bus, queue, job.id, job.token, 0, 1, error)
    return job_id


async def test_replay_all_dead_jobs_or_those_of_a_reason_a_page_at_a_time(
    standalone_url: str, queue: str
) -> None:
    async with open_bus(standalone_url) as bus:
        blocked = [await _kill(bus, queue, "Forbidden: bot was blocked by the user")
                   for _ in range(3)]  # fmt: skip
        others = [await _kill(bus, queue, "HTTP 502") for _ in range(250)]  # pages of 100
        out = await echomq("replay", queue, "--all", "--reason", "blocked", url=standalone_url)
        assert out.returncode == 0 and "replayed 3 dead jobs" in out.stdout.decode()
        assert {j.id for j in await jobs.dead_jobs(bus, queue, 0, 1000)} == set(others)
        out = await echomq("--json", "replay", queue, "--all", url=standalone_url)
        assert json.loads(out.stdout) == {"replayed": 250}
        assert (await jobs.counts(bus, queue)).dead == 0
        assert (await jobs.counts(bus, queue)).pending == len(blocked) + len(others)
        out = await echomq("replay", queue, url=standalone_url)
        assert out.returncode == 2 and "JOB_ID or --all" in out.stderr.decode()


async def test_show_and_replay_take_a_notice_id_for_the_job_minted_with_it(
    standalone_url: str, queue: str
) -> None:
    async with open_bus(standalone_url) as bus:
        job_id = await _kill(bus, queue, "Bad Request: chat not found")
        notice_id = "NOT" + job_id[3:]
        out = await echomq("show", queue, notice_id, url=standalone_url)
        assert out.returncode == 0 and job_id in out.stdout.decode(), out.stderr
        out = await echomq("replay", queue, notice_id, url=standalone_url)
        assert out.returncode == 0 and f"replayed {job_id}" in out.stdout.decode()


async def test_stats_ls_show_replay_cancel(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        pend, dead = await _fill(bus, queue)
        out = await echomq("stats", queue, url=standalone_url)
        assert out.returncode == 0, out.stderr
        text = out.stdout.decode()
        assert "pending" in text and "dead" in text and queue in text
        assert "retention.dead_max" in text and "retention.events_max_len" in text
        await retention.configure(bus, queue, dead_max=50, events=False)
        out = await echomq("--url", standalone_url, "--json", "stats", queue)
        stats = json.loads(out.stdout)
        assert (stats["pending"], stats["dead"], stats["repeats"]) == (1, 1, 1)
        assert stats["retention"] == {
            "dead_max": 50, "dead_max_age_ms": None, "events": False, "events_max_len": 10_000
        }  # fmt: skip

        out = await echomq("ls", queue, "dead", url=standalone_url)
        assert dead in out.stdout.decode() and "ValueError: bad input" in out.stdout.decode()
        out = await echomq("--json", "ls", queue, "pending", url=standalone_url)
        assert [r["id"] for r in json.loads(out.stdout)] == [pend]
        out = await echomq("ls", queue, "repeat", url=standalone_url)
        listed = out.stdout.decode()
        assert "nightly" in listed and "1 d" in listed  # every 86400000 ms
        assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \((now|in .+|.+ ago)\)", listed)

        out = await echomq("show", queue, dead, url=standalone_url)
        assert "dead" in out.stdout.decode() and "doomed" in out.stdout.decode()
        assert re.search(r"Z \((now|.+ ago)\)", out.stdout.decode())  # the time of death
        out = await echomq("--json", "show", queue, pend, url=standalone_url)
        assert json.loads(out.stdout)["state"] == "pending"

        out = await echomq("replay", queue, dead, url=standalone_url)
        assert out.returncode == 0 and f"replayed {dead}" in out.stdout.decode()
        assert (await jobs.counts(bus, queue)).dead == 0
        out = await echomq("replay", queue, dead, url=standalone_url)
        assert out.returncode == 1 and "not dead" in out.stderr.decode()

        out = await echomq("cancel-repeat", queue, "nightly", url=standalone_url)
        assert out.returncode == 0 and await repeat.list_repeats(bus, queue) == []
        out = await echomq("cancel-repeat", queue, "nightly", url=standalone_url)
        assert out.returncode == 1 and "no recurring schedule" in out.stderr.decode()


async def test_tail_follows_events_until_ctrl_c(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        await jobs.enqueue(bus, queue, "first")  # makes the queue known
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "echomq_trio", "--url", standalone_url, "tail", queue],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
        )  # fmt: skip
        try:
            sent: list[str] = []
            buf = b""
            assert proc.stdout is not None
            with trio.fail_after(30):  # the tail starts at "now": keep enqueuing until it shows
                while not any(s.encode() in buf for s in sent):
                    sent.append(ids.generate("JOB"))
                    await jobs.enqueue(bus, queue, "x", job_id=sent[-1])
                    with trio.move_on_after(0.5):
                        buf += await proc.stdout.receive_some(4096)
            line = next(x for x in buf.decode().splitlines() if any(s in x for s in sent))
            assert "enqueued" in line
            proc.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop, status 128 + SIGINT
            with trio.fail_after(10):
                assert await proc.wait() == 130
            assert await _read_all(proc.stderr) == b""
        finally:
            proc.kill()
            await proc.wait()


async def test_show_prints_emoji_as_text(standalone_url: str, queue: str) -> None:
    job_id = ids.generate("JOB")
    async with open_bus(standalone_url) as bus:
        payload = json.dumps({"text": "🏆 Dana wins 🎉"})  # as stored: "\\ud83c\\udfc6 ..."
        assert "\\ud83c" in payload
        await jobs.enqueue(bus, queue, payload, job_id=job_id)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8")
    out = await trio.run_process(
        [sys.executable, "-m", "echomq_trio", "--url", standalone_url, "show", queue, job_id],
        capture_stdout=True, capture_stderr=True, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert '{"text": "🏆 Dana wins 🎉"}' in out.stdout.decode()


async def test_queues_lists_every_queue_with_its_counts(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        await _fill(bus, queue)
    out = await echomq("queues", url=standalone_url)
    assert out.returncode == 0, out.stderr
    (line,) = [x for x in out.stdout.decode().splitlines() if x.startswith(queue + " ")]
    assert line.split()[1:5] == ["1", "0", "0", "1"]  # pending, scheduled, active, dead
    listed = json.loads((await echomq("--json", "queues", url=standalone_url)).stdout)
    (mine,) = [q for q in listed if q["queue"] == queue]
    assert (mine["pending"], mine["dead"], mine["repeats"]) == (1, 1, 1)


async def test_dashboard_prints_its_url_and_token_and_stops_on_ctrl_c(
    standalone_url: str, queue: str
) -> None:
    async with open_bus(standalone_url) as bus:
        _, dead = await _fill(bus, queue)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ECHOMQ_DASHBOARD_TOKEN", None)
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "echomq_trio", "--url", standalone_url, "dashboard", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        buf = b""
        with trio.fail_after(30):
            while b"#token=" not in buf or not buf.endswith(b"\n"):
                buf += await proc.stdout.receive_some(4096)
        first = buf.decode().splitlines()[0]
        assert "127.0.0.1" in first and standalone_url.split("@")[-1] in first
        url, token = first.split(": ", 1)[1].split("/#token=")
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/state.json?queue={queue}")).status_code == 200
            refused = await client.post(f"{url}/replay?queue={queue}&job={dead}")
            assert refused.status_code == 403
            replayed = await client.post(f"{url}/replay?queue={queue}&job={dead}",
                                         headers={"x-echomq-token": token})  # fmt: skip
            assert replayed.json() == {"outcome": "replayed"}
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await proc.wait() == 130
    finally:
        proc.kill()
        await proc.wait()


async def test_errors_are_one_clear_line(standalone_url: str) -> None:
    out = await echomq("stats", "never-used-queue", url=standalone_url)
    assert out.returncode == 1
    assert out.stderr.decode().strip().startswith("echomq: unknown queue 'never-used-queue'")
    assert "Traceback" not in out.stderr.decode()
    port = free_port()
    out = await echomq("stats", "q", url=f"redis://127.0.0.1:{port}")
    assert out.returncode == 1 and f"127.0.0.1:{port}" in out.stderr.decode()
    assert "Traceback" not in out.stderr.decode()
    out = await echomq("stats", "bad queue", url=standalone_url)
    assert out.returncode == 1 and "queue name" in out.stderr.decode()
    out = await echomq("stats", "q", url="http://nope")
    assert out.returncode == 1 and "scheme" in out.stderr.decode()
    out = await echomq("show", "q", "JOB", url=standalone_url)
    assert out.returncode == 1
    out = await echomq("bogus", url=standalone_url)
    assert out.returncode == 2


async def _read_all(stream: trio.abc.ReceiveStream | None) -> bytes:
    assert stream is not None
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


async def test_a_reader_that_stops_early_ends_ls_quietly(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        await jobs.enqueue_many(bus, queue, [(ids.generate("JOB"), "p" * 40) for _ in range(3000)])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "echomq_trio", "--url", standalone_url, "ls", queue, "pending",
         "--limit", "3000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        head = await proc.stdout.receive_some(100)  # about 300 KB follow: more than a pipe holds
        assert head.startswith(b"id")
        await proc.stdout.aclose()  # what `| head` does
        stderr = await _read_all(proc.stderr)
        assert await proc.wait() == 141, stderr
        assert b"Traceback" not in stderr and stderr == b"", stderr
    finally:
        proc.kill()
        await proc.wait()


async def test_a_reader_that_stops_early_ends_tail_quietly(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        await jobs.enqueue(bus, queue, "first")  # makes the queue known
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "echomq_trio", "--url", standalone_url, "tail", queue],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            with trio.fail_after(30):  # the tail starts at "now": enqueue until a line shows
                while True:
                    await jobs.enqueue(bus, queue, "x")
                    with trio.move_on_after(0.2):
                        if await proc.stdout.receive_some(4096):
                            break
            await proc.stdout.aclose()
            with trio.fail_after(30):  # each new event is a line it cannot write
                while proc.poll() is None:
                    await jobs.enqueue(bus, queue, "x")
                    with trio.move_on_after(0.2):
                        await proc.wait()
            stderr = await _read_all(proc.stderr)
            assert proc.returncode == 141, stderr
            assert b"Traceback" not in stderr and stderr == b"", stderr
        finally:
            proc.kill()
            await proc.wait()


async def test_a_partitioned_queue_is_one_row_and_its_stats_add_up(
    standalone_url: str, queue: str
) -> None:
    async with open_bus(standalone_url) as bus:
        pq = await partitions.create(bus, queue, 3)
        await pq.enqueue_many([f"j{i}" for i in range(9)])
        await pq.lane_enqueue("chat1", "x")
    out = await echomq("queues", url=standalone_url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    (line,) = [x for x in lines if x.startswith(queue + " ")]
    assert line.split()[1] == "10" and line.split()[-1] == "3"  # pending, partitions
    assert not [x for x in lines if x.startswith(queue + "~p")], "partitions folded in"
    listed = json.loads((await echomq("--json", "queues", url=standalone_url)).stdout)
    (mine,) = [q for q in listed if q["queue"].startswith(queue)]
    assert (mine["queue"], mine["pending"], mine["lanes"], mine["partitions"]) == (queue, 10, 1, 3)
    stats = json.loads((await echomq("--json", "stats", queue, url=standalone_url)).stdout)
    assert (stats["pending"], stats["partitions"]) == (10, 3)
    text = (await echomq("stats", queue, url=standalone_url)).stdout.decode()
    assert re.search(r"^partitions\s+3$", text, re.M), text
