"""Priorities: higher first within the flat set and within each lane, equal ones in id order,
kept by every path that puts a job back where it waits; lanes keep their round-robin turns."""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echomq_trio import Bus, ids, jobs, lanes, open_bus, protocol, repeat
from echomq_trio.jobs import PRIORITY_MAX, PRIORITY_MIN, Job, Outcome
from tests.support import echomq, wait_for

pytestmark = pytest.mark.cluster


HOUR_MS = 3_600_000
OLD = ids.IdMinter(7)  # mints ids of a chosen time


def jid() -> str:
    return ids.generate("JOB")


async def claim_ids(bus: Bus, queue: str, n: int = 100) -> list[str]:
    return [j.id for j in await jobs.claim(bus, queue, n)]


async def test_higher_first_and_equal_priorities_in_id_order(bus: Bus, queue: str) -> None:
    a, b, c, d, e = (jid() for _ in range(5))
    await jobs.enqueue(bus, queue, "a", job_id=a)  # 0, the default
    await jobs.enqueue(bus, queue, "b", job_id=b, priority=5)
    await jobs.enqueue_many(bus, queue, [(c, "c"), (d, "d")], priority=5)
    await jobs.enqueue(bus, queue, "e", job_id=e, priority=-2)
    assert [j.id for j in await jobs.list_jobs(bus, queue, "pending")] == [b, c, d, a, e]
    assert await claim_ids(bus, queue) == [b, c, d, a, e]


async def test_a_job_keeps_its_priority_through_retry_release_reap_and_replay(
    bus: Bus, queue: str
) -> None:
    low, high = jid(), jid()
    await jobs.enqueue(bus, queue, "low", job_id=low)
    await jobs.enqueue(bus, queue, "high", job_id=high, priority=3)

    async def head(lease_ms: int = 30_000) -> Job:
        (job,) = await jobs.claim(bus, queue, 1, lease_ms)
        assert job.id == high  # ahead of the older job of priority 0, every time
        assert job.priority == 3  # and the claimed job knows it, every time
        return job

    # retry: to the schedule, and back at its place when due
    job = await head()
    assert await jobs.retry(bus, queue, high, job.token, 0, 10, "boom") is Outcome.SCHEDULED
    assert (await jobs.promote(bus, queue)).moved == 1
    # release: back at once
    job = await head()
    assert await jobs.release(bus, queue, [(high, job.token)]) == 1
    # reap: its lease runs out
    await head(lease_ms=1)
    await wait_for(lambda: _reaped(bus, queue), timeout=10)
    # take back: its holder is known dead
    await head()
    assert await jobs.take_back(bus, queue, bus.holder) == 1
    # defer of a flat job: on the schedule, then back
    job = await head()
    assert await jobs.defer(bus, queue, high, job.token, 0) is Outcome.DEFERRED
    assert (await jobs.promote(bus, queue)).moved == 1
    # replay of a dead job
    job = await head()
    assert await jobs.retry(bus, queue, high, job.token, 0, 1, "dead") is Outcome.DEAD
    assert await jobs.replay(bus, queue, high) is Outcome.REPLAYED
    info = await jobs.get_job(bus, queue, high)
    assert info is not None and info.priority == 3
    assert await claim_ids(bus, queue) == [high, low]


async def _reaped(bus: Bus, queue: str) -> bool:
    return (await jobs.reap(bus, queue)).reaped == 1


async def test_scheduled_and_recurring_jobs_wait_at_their_priority(bus: Bus, queue: str) -> None:
    plain, at, later = jid(), jid(), jid()
    await jobs.enqueue(bus, queue, "plain", job_id=plain)
    await jobs.enqueue_in(bus, queue, "in", 0, job_id=later, priority=2)
    await jobs.enqueue_at(bus, queue, "at", 0, job_id=at, priority=9)
    assert (await jobs.promote(bus, queue)).moved == 2
    await repeat.register(bus, queue, "tick", 60_000, "tock", priority=5)
    (reg,) = await repeat.list_repeats(bus, queue)
    assert reg.priority == 5
    assert await repeat.register(bus, queue, "tick", 60_000, "tock", priority=5) == (
        repeat.Registered.EXISTS, reg.next_run_ms)  # fmt: skip
    got, _ = await repeat.register(bus, queue, "tick", 60_000, "tock", priority=6, replace=True)
    assert got is repeat.Registered.REPLACED  # another priority is another registration
    assert (await repeat.fire(bus, queue)).fired == 1
    claimed = await jobs.claim(bus, queue, 10)
    assert [j.payload for j in claimed] == [b"at", b"tock", b"in", b"plain"]
    fired = await jobs.get_job(bus, queue, claimed[1].id)
    assert fired is not None and fired.priority == 6
    await repeat.register(bus, queue, "daily", template="d", cron="0 9 * * *", priority=-4)
    regs = {r.name: r.priority for r in await repeat.list_repeats(bus, queue)}
    assert regs == {"tick": 6, "daily": -4}


async def test_in_a_lane_and_across_lanes(bus: Bus, queue: str) -> None:
    # Priorities order a lane's jobs; the ring still gives each lane its turn, and the flat set
    # its place between turns: a high priority does not take another lane's turn.
    a1, a2, a3, b1, f1 = (jid() for _ in range(5))
    await lanes.enqueue(bus, queue, "A", "a1", job_id=a1)
    await lanes.enqueue(bus, queue, "A", "a2", job_id=a2, priority=PRIORITY_MAX)
    await lanes.enqueue_many(bus, queue, "A", [(a3, "a3")], priority=1)
    await lanes.enqueue(bus, queue, "B", "b1", job_id=b1, priority=PRIORITY_MIN)
    await jobs.enqueue(bus, queue, "f1", job_id=f1, priority=-1)
    assert [j.id for j in await lanes.jobs(bus, queue, "A")] == [a2, a3, a1]
    assert await claim_ids(bus, queue) == [a2, f1, b1, a3, a1]


async def test_a_strict_lane_keeps_its_order_by_priority_across_retries_and_deferrals(
    bus: Bus, queue: str
) -> None:
    first, second, urgent = jid(), jid(), jid()
    await lanes.enqueue(bus, queue, "chat", "1", job_id=first, limit=1, priority=1)
    await lanes.enqueue(bus, queue, "chat", "2", job_id=second, priority=1)
    (job,) = await jobs.claim(bus, queue, 5)
    assert job.id == first and await claim_ids(bus, queue) == []  # limit 1
    assert await jobs.retry(bus, queue, first, job.token, 0, 10, "429") is Outcome.SCHEDULED
    (job,) = await jobs.claim(bus, queue, 5)
    assert job.id == first  # back at its head, ahead of an equal priority
    await lanes.enqueue(bus, queue, "chat", "3", job_id=urgent, priority=2)
    assert await jobs.defer(bus, queue, first, job.token, 0) is Outcome.DEFERRED
    assert [j.id for j in await lanes.jobs(bus, queue, "chat")] == [urgent, first, second]


async def test_a_claimed_job_knows_its_priority_on_every_path(bus: Bus, queue: str) -> None:
    flat, timed, lane, scheduled, plain = (jid() for _ in range(5))
    await jobs.enqueue(bus, queue, "flat", job_id=flat, priority=-3)
    await jobs.enqueue(bus, queue, "timed", job_id=timed, priority=4, timeout_ms=250)
    await lanes.enqueue(bus, queue, "L", "lane", job_id=lane, priority=PRIORITY_MAX)
    await jobs.enqueue_in(bus, queue, "scheduled", 0, job_id=scheduled, priority=PRIORITY_MIN)
    await jobs.enqueue(bus, queue, "plain", job_id=plain, timeout_ms=900)
    await repeat.register(bus, queue, "every", 60_000, "fired", group="R", priority=2)
    assert (await jobs.promote(bus, queue)).moved == 1
    assert (await repeat.fire(bus, queue)).fired == 1
    claimed = {j.payload.decode(): j for j in await jobs.claim(bus, queue, 10)}
    assert {name: (j.priority, j.timeout_ms) for name, j in claimed.items()} == {
        "flat": (-3, None), "timed": (4, 250), "lane": (PRIORITY_MAX, None),
        "scheduled": (PRIORITY_MIN, None), "plain": (0, 900), "fired": (2, None),
    }  # fmt: skip
    # retried (to the schedule and back), and in its lane after a deferral: still known
    job = claimed["timed"]
    assert await jobs.retry(bus, queue, job.id, job.token, 0, 10, "again") is Outcome.SCHEDULED
    job = claimed["lane"]
    assert await jobs.defer(bus, queue, job.id, job.token, 0) is Outcome.DEFERRED
    assert (await jobs.promote(bus, queue)).moved == 1
    again = {j.id: j.priority for j in await jobs.claim(bus, queue, 10)}
    assert again == {timed: 4, lane: PRIORITY_MAX}


async def test_the_claim_answers_a_job_without_a_priority_as_before_priorities(
    bus: Bus, queue: str
) -> None:
    # The options field of a job without a priority is '' or its timeout, as it was before
    # priorities (no byte more on the hot path); a job with one answers a pair.
    plain, timed, high = jid(), jid(), jid()
    await jobs.enqueue(bus, queue, "plain", job_id=plain)
    await jobs.enqueue(bus, queue, "timed", job_id=timed, timeout_ms=700)
    await jobs.enqueue(bus, queue, "high", job_id=high, priority=9, timeout_ms=800)
    call = protocol.claim_call(bus.keys(queue), 10, 30_000)
    raw = await bus.run(protocol.Call(call.script, call.keys, call.args))
    width = len(protocol.REPLY_FIELDS["claim/job"])
    at = protocol.REPLY_FIELDS["claim/job"].index("options")
    options = {bytes(raw[i]).decode(): raw[i + at] for i in range(1, len(raw), width)}
    assert {k: v if isinstance(v, list) else bytes(v) for k, v in options.items()} == {
        plain: b"",
        timed: b"700",
        high: [b"800", 9],
    }


async def test_the_priority_shows_in_get_job_and_lists(bus: Bus, queue: str) -> None:
    job_id = jid()
    await jobs.enqueue(bus, queue, "x", job_id=job_id, priority=-7)
    info = await jobs.get_job(bus, queue, job_id)
    assert info is not None and info.priority == -7
    (listed,) = await jobs.list_jobs(bus, queue, "pending")
    assert listed.priority == -7
    plain = (await jobs.enqueue(bus, queue, "y")).id
    info = await jobs.get_job(bus, queue, plain)
    assert info is not None and info.priority == 0


@pytest.mark.parametrize(
    "bad", [PRIORITY_MAX + 1, PRIORITY_MIN - 1, True, 2.0, "1"], ids=["over", "under", "bool",
                                                                      "float", "str"]
)  # fmt: skip
async def test_a_bad_priority_is_refused_before_anything_is_written(
    bus: Bus, queue: str, bad: Any
) -> None:
    calls = [
        lambda: jobs.enqueue(bus, queue, "x", priority=bad),
        lambda: jobs.enqueue_many(bus, queue, ["x"], priority=bad),
        lambda: jobs.enqueue_at(bus, queue, "x", 0, priority=bad),
        lambda: jobs.enqueue_in(bus, queue, "x", 0, priority=bad),
        lambda: lanes.enqueue(bus, queue, "g", "x", priority=bad),
        lambda: lanes.enqueue_many(bus, queue, "g", ["x"], priority=bad),
        lambda: repeat.register(bus, queue, "r", 1000, "x", priority=bad),
        lambda: repeat.register(bus, queue, "r", None, "x", cron="* * * * *", priority=bad),
    ]
    for call in calls:
        with pytest.raises((ValueError, TypeError), match=r"^priority must be "):
            await call()
    assert not (await jobs.counts(bus, queue)).exists


async def test_delete_page_by_age_walks_every_priority(bus: Bus, queue: str) -> None:
    # The pending set is in id order only within a priority: a job too young ends the walk of
    # its priority, not the whole walk.
    now = await bus.transport.server_time_ms()
    old_high, old_low = OLD.generate("JOB", now - 2 * HOUR_MS), OLD.generate("JOB", now - HOUR_MS)
    young = jid()
    await jobs.enqueue_many(bus, queue, [(old_high, "oh"), (young, "y")], priority=2)
    await jobs.enqueue(bus, queue, "ol", job_id=old_low)
    deleted, cursor = 0, None
    while True:
        page = await jobs.delete_page(bus, queue, "pending", older_than_ms=HOUR_MS // 2, limit=1,
                                      cursor=cursor)  # fmt: skip
        deleted += page.deleted
        if page.next is None:
            break
        cursor = page.next
    assert deleted == 2
    assert [j.id for j in await jobs.list_jobs(bus, queue, "pending")] == [young]


# --- the claimed order against a model queue --------------------------------------------------


@attrs.define
class Model:
    """The claim's order, one job at a time: the lanes in turn order (a ring), one job of the
    lane whose turn it is, then one of the flat set; each set highest priority first, then
    lowest id. A job put back (retried, deferred, released) goes to its place in its set, and
    its lane to the ring's end if it was off it."""

    ring: list[str] = attrs.Factory(list)
    waiting: dict[str, list[tuple[int, str]]] = attrs.Factory(dict)  # '' is the flat set
    priority: dict[str, int] = attrs.Factory(dict)
    group: dict[str, str] = attrs.Factory(dict)

    def put(self, job_id: str) -> None:
        g = self.group[job_id]
        queue = self.waiting.setdefault(g, [])
        if g and not queue and g not in self.ring:
            self.ring.append(g)
        queue.append((-self.priority[job_id], job_id))
        queue.sort()

    def take(self, g: str) -> str:
        return self.waiting[g].pop(0)[1]

    def claim(self, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            if not self.ring:
                while len(out) < n and self.waiting.get(""):
                    out.append(self.take(""))
                break
            g = self.ring.pop(0)
            out.append(self.take(g))
            if self.waiting[g]:
                self.ring.append(g)
            if len(out) < n and self.waiting.get(""):
                out.append(self.take(""))
        return out


steps = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.sampled_from(["", "A", "B", "C"]), st.integers(-2, 2)),
        st.tuples(st.just("claim"), st.integers(1, 6), st.just(0)),
        st.tuples(st.just("retry"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("release"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("defer"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("ack"), st.integers(0, 5), st.just(0)),
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=steps)
async def test_the_claimed_order_is_the_model_s(
    server_url: str, steps: list[tuple[str, Any, int]]
) -> None:
    async with open_bus(server_url) as bus:
        queue = "prio." + jid()
        model = Model()
        held: list[Job] = []
        for step, arg, prio in steps:
            if step == "admit":
                job_id = jid()
                model.priority[job_id], model.group[job_id] = prio, arg
                if arg:
                    await lanes.enqueue(bus, queue, arg, "x", job_id=job_id, priority=prio)
                else:
                    await jobs.enqueue(bus, queue, "x", job_id=job_id, priority=prio)
                model.put(job_id)
            elif step == "claim":
                got = await jobs.claim(bus, queue, arg)
                assert [j.id for j in got] == model.claim(arg)
                assert [j.priority for j in got] == [model.priority[j.id] for j in got]
                held += got
            elif held:
                job = held.pop(arg % len(held))
                if step == "retry":
                    await jobs.retry(bus, queue, job.id, job.token, 0, 1000, "again")
                    assert (await jobs.promote(bus, queue)).moved == 1
                    model.put(job.id)
                elif step == "release":
                    assert await jobs.release(bus, queue, [(job.id, job.token)]) == 1
                    model.put(job.id)
                elif step == "defer":  # a lane job back in its lane, a flat one via the schedule
                    assert await jobs.defer(bus, queue, job.id, job.token, 0) is Outcome.DEFERRED
                    if not job.group:
                        assert (await jobs.promote(bus, queue)).moved == 1
                    model.put(job.id)
                else:
                    assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
        assert [j.id for j in await jobs.claim(bus, queue, 1000)] == model.claim(1000)


# --- where the priority shows ---------------------------------------------------------------


@pytest.mark.slow
async def test_echomq_show_prints_the_priority(standalone_url: str, queue: str) -> None:
    async with open_bus(standalone_url) as bus:
        job_id = (await jobs.enqueue(bus, queue, "x", priority=42)).id
    out = await echomq("--url", standalone_url, "show", queue, job_id)
    assert out.returncode == 0, out.stderr
    assert re.search(r"^priority\s+42$", out.stdout.decode(), re.MULTILINE), out.stdout
    out = await echomq("--url", standalone_url, "--json", "show", queue, job_id)
    assert json.loads(out.stdout)["priority"] == 42
    out = await echomq("--url", standalone_url, "ls", queue, "pending")
    header, row = out.stdout.decode().splitlines()[:2]
    assert header.split()[:3] == ["id", "attempts", "priority"]
    assert row.split()[:3] == [job_id, "0", "42"]


async def test_the_dashboard_s_job_view_shows_the_priority(bus: Bus, queue: str) -> None:
    from echomq_trio.dashboard import Dashboard, view

    job_id = (await lanes.enqueue(bus, queue, "g", "x", priority=-3)).id
    state = await Dashboard(bus, "token").state(view.Query(queue=queue, job=job_id))
    found = state["queue"]["job"]["found"]
    assert (found["id"], found["priority"], found["group"]) == (job_id, -3, "g")


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_the_dashboard_page_shows_the_priority(bus: Bus, queue: str) -> None:
    from echomq_trio.dashboard import Dashboard
    from tools.browser import open_page

    job_id = (await jobs.enqueue(bus, queue, "x", priority=17)).id
    dashboard = Dashboard(bus, "token", sample_s=0.2, names_every_s=0.2)
    async with trio.open_nursery() as nursery, open_page() as page:
        url = await nursery.start(dashboard.serve, "127.0.0.1", 0)
        await page.goto(f"{url}/?queue={queue}#token=token")

        async def rendered() -> bool:  # its script runs and has drawn the queue once
            return bool(await page.evaluate("document.body.dataset.updates || ''"))

        await wait_for(rendered, timeout=30, step=0.1)
        await page.evaluate(f"document.querySelector('#job-id').value = '{job_id}'")
        await page.evaluate("document.querySelector('#job-find button').click()")
        job_view = "(document.querySelector('#job-view') || {}).innerText || ''"

        async def shown() -> bool:
            text: str = await page.evaluate(job_view)
            return re.search(r"priority\s+17\b", text) is not None

        await wait_for(shown, timeout=30, step=0.1)
        nursery.cancel_scope.cancel()
