"""Flows (``echomq_trio.flows``, ``scripts/flow_add.lua`` and the ends in ack, retry, cancel and
delete): a parent runs only after its children, reads their results, fails (or goes on, by the
child's ``on_failure``) when a child dies or is cancelled; a cancelled parent takes its waiting
children; nested flows; across queues where the slots allow; ``kill -9`` loses nothing. On a
standalone server and a 3-node cluster."""

from __future__ import annotations

import json
import re
import signal
from typing import Any

import pytest
import trio

from echomq_trio import Bus, Consumer, Job, flows, ids, jobs, open_bus, protocol
from echomq_trio.errors import BusError
from echomq_trio.flows import Flow, OnFailure
from echomq_trio.jobs import Cancelled, JobState, Outcome
from echomq_trio.resp._cluster import key_slot
from echomq_trio.states import EDGES, Place, next_place
from tests.echomq_trio.proc import done_key
from tests.support import read_line, spawn, wait_for

pytestmark = pytest.mark.cluster


def jid() -> str:
    return ids.generate("JOB")


async def state(bus: Bus, queue: str, job_id: str) -> JobState | None:
    info = await jobs.get_job(bus, queue, job_id)
    return None if info is None else info.state


async def finish(bus: Bus, queue: str, job_id: str, result: bytes | None = None) -> Outcome:
    """Claim until ``job_id`` comes, acking every other job claimed on the way: ``job_id``'s
    ack."""
    while True:
        claimed = await jobs.claim(bus, queue, 10)
        assert claimed, f"{job_id} was not pending"
        out = None
        for job in claimed:
            if job.id == job_id:
                if result is None:
                    out = await jobs.ack(bus, queue, job.id, job.token)
                else:
                    (out,) = await jobs.ack_with_results(
                        bus, queue, [(job.id, job.token, "", result)]
                    )
            else:
                await jobs.release(bus, queue, [(job.id, job.token)])
        if out is not None:
            return out


async def kill(bus: Bus, queue: str, job_id: str) -> None:
    """Claim ``job_id`` (it must be the only pending job) and bury it: dead."""
    (job,) = await jobs.claim(bus, queue)
    assert job.id == job_id
    out = await jobs.retry(bus, queue, job.id, job.token, 0, 1, "boom", buried=True)
    assert out is Outcome.DEAD


# --- order, results, nesting ---------------------------------------------------------------------


async def test_a_flow_of_three_levels_runs_in_dependency_order(bus: Bus, queue: str) -> None:
    await jobs.keep_results(bus, queue, 60_000)
    tree = Flow("root", [
        Flow("a", [Flow("a1"), Flow("a2")]),
        Flow("b", [Flow("b1"), Flow("b2"), Flow("b3")]),
        Flow("c"),
    ])  # fmt: skip
    added = await flows.add(bus, queue, tree)
    assert added.ok and len(added.root.walk()) == 9
    order = ["root", "a", "a1", "a2", "b", "b1", "b2", "b3", "c"]
    names = {j.id: name for j, name in zip(added.root.walk(), order, strict=True)}
    ledger: dict[str, list[float]] = {}  # name -> [started, finished] (trio's clock)
    seen: dict[str, dict[str, bytes | None]] = {}

    async def handler(job: Job) -> bytes:
        name = names[job.id]
        ledger[name] = [trio.current_time()]
        got = await flows.children_results(bus, queue, job.id)
        seen[name] = got
        await trio.sleep(0.01)
        ledger[name].append(trio.current_time())
        below = b"".join(sorted(v or b"" for v in got.values()))
        return name.encode() + (b"(" + below + b")" if below else b"")

    consumer = Consumer(bus, queue, handler, concurrency=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        assert await jobs.result(bus, queue, added.root.id, timeout_s=20) == (
            b"root(a(a1a2)b(b1b2b3)c)"
        )
        nursery.cancel_scope.cancel()
    # every parent started after every one of its children had finished
    for job in added.root.walk():
        for child in job.children:
            assert ledger[names[job.id]][0] >= ledger[names[child.id]][1], (job, child)
    assert seen["a"] == {added.root.children[0].children[0].id: b"a1",
                         added.root.children[0].children[1].id: b"a2"}  # fmt: skip
    assert len(seen["root"]) == 3 and seen["a1"] == {}
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.dead, c.completed_total) == (0, 0, 0, 9)


async def test_a_parent_waits_and_is_listed_until_its_last_child(bus: Bus, queue: str) -> None:
    p, c1, c2 = jid(), jid(), jid()
    added = await flows.add(bus, queue, Flow("p", [Flow("1", job_id=c1), Flow("2", job_id=c2)],
                                             job_id=p))  # fmt: skip
    assert added.ok and added.root.id == p
    assert await state(bus, queue, p) is JobState.WAITING_CHILDREN
    assert [i.id for i in await jobs.list_jobs(bus, queue, "waiting_children")] == [p]
    assert (await jobs.counts(bus, queue)).waiting_children == 1
    assert await finish(bus, queue, c1, b"one") is Outcome.ACKED
    assert await state(bus, queue, p) is JobState.WAITING_CHILDREN
    kids = await flows.children(bus, queue, p)
    assert [(k.id, k.state, k.ended, k.result) for k in kids] == [
        (c1, "completed", True, b"one"), (c2, "pending", False, None)]  # fmt: skip
    assert await finish(bus, queue, c2) is Outcome.ACKED
    assert await state(bus, queue, p) is JobState.PENDING
    assert await flows.children_results(bus, queue, p) == {c1: b"one", c2: None}
    assert await jobs.list_jobs(bus, queue, "waiting_children") == []
    assert (await jobs.counts(bus, queue)).waiting_children == 0
    assert await finish(bus, queue, p) is Outcome.ACKED
    # the parent took its children's results with it
    assert await bus.transport.command("EXISTS", bus.keys(queue).flow(p)) == 0
    assert await flows.children(bus, queue, p) == []


async def test_adding_the_same_flow_again_changes_nothing(bus: Bus, queue: str) -> None:
    p, c = jid(), jid()
    flow = Flow("p", [Flow("c", job_id=c)], job_id=p)
    assert (await flows.add(bus, queue, flow)).outcome is Outcome.ENQUEUED
    before = await jobs.counts(bus, queue)
    again = await flows.add(bus, queue, flow)
    assert again.outcome is Outcome.DUPLICATE and not again.ok
    assert await jobs.counts(bus, queue) == before
    # another flow that reuses a live job's id is refused whole, naming it
    with pytest.raises(BusError, match=f"job {c} of queue"):
        await flows.add(bus, queue, Flow("q", [Flow("new"), Flow("c", job_id=c)]))
    assert await jobs.counts(bus, queue) == before


async def test_a_child_retried_then_done_and_a_timeout_kept(bus: Bus, queue: str) -> None:
    p, c = jid(), jid()
    flow = Flow("p", [Flow("c", job_id=c, timeout_ms=5000)], job_id=p)
    assert (await flows.add(bus, queue, flow)).ok
    (job,) = await jobs.claim(bus, queue)
    assert (job.id, job.timeout_ms) == (c, 5000)
    assert await jobs.retry(bus, queue, c, job.token, 0, 5, "flaky") is Outcome.SCHEDULED
    assert await state(bus, queue, p) is JobState.WAITING_CHILDREN  # a retry ends nothing
    await jobs.promote(bus, queue)
    assert await finish(bus, queue, c, b"ok") is Outcome.ACKED
    assert await state(bus, queue, p) is JobState.PENDING
    assert await flows.children_results(bus, queue, p) == {c: b"ok"}


def test_bad_flows_are_refused_before_any_io() -> None:
    c = jid()
    with pytest.raises(ValueError, match="twice"):
        flows.plan("q", Flow("p", [Flow("a", job_id=c), Flow("b", job_id=c)]), 1000)
    with pytest.raises(TypeError, match="Flow"):
        flows.plan("q", Flow("p", ["x"]), 1000)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="job id"):
        flows.plan("q", Flow("p", job_id="nope"), 1000)
    with pytest.raises(ValueError, match="over the bus's limit"):
        flows.plan("q", Flow("p", [Flow("x" * 2000)]), 1000)
    with pytest.raises(ValueError, match="timeout_ms"):
        flows.plan("q", Flow("p", timeout_ms=0), 1000)
    with pytest.raises(ValueError, match="not in the slot"):
        flows.plan("a", Flow("p", [Flow("c", queue="b")]), 1000, cluster=True)
    root, args = flows.plan("a", Flow("p", [Flow("c", queue="b")]), 1000)
    assert [a.keys.name for a in args] == ["a", "b"] and args[0].children == (
        "emq:{b}:" + root.children[0].id,)  # fmt: skip


def same_slot(queue: str) -> str:
    """Another queue name in ``queue``'s cluster slot (found by trying suffixes)."""
    slot = key_slot("emq:{" + queue + "}:")
    n = 0
    while key_slot("emq:{" + f"{queue}.{n}" + "}:") != slot:
        n += 1
    return f"{queue}.{n}"


async def test_children_in_other_queues(bus: Bus, queue: str) -> None:
    other = same_slot(queue) if bus.transport.spec.cluster else queue + ".other"
    p, c1, c2 = jid(), jid(), jid()
    flow = Flow("p", [Flow("1", job_id=c1, queue=other), Flow("2", job_id=c2)], job_id=p)
    assert (await flows.add(bus, queue, flow)).ok
    assert await state(bus, other, c1) is JobState.PENDING
    assert await finish(bus, queue, c2, b"two") is Outcome.ACKED
    assert await finish(bus, other, c1, b"one") is Outcome.ACKED
    assert await state(bus, queue, p) is JobState.PENDING
    assert await flows.children_results(bus, queue, p) == {c1: b"one", c2: b"two"}
    tree = await flows.tree(bus, queue, p)
    assert tree is not None and [(t.queue, t.id) for t in tree.children] == [
        (other, c1),
        (queue, c2),
    ]
    if bus.transport.spec.cluster:
        far = queue + ".far"
        if key_slot("emq:{" + far + "}:") != key_slot("emq:{" + queue + "}:"):
            with pytest.raises(ValueError, match="share one slot"):
                await flows.add(bus, queue, Flow("p", [Flow("c", queue=far)]))


# --- failures and the policy ---------------------------------------------------------------------


async def test_a_dead_child_fails_its_parent_and_theirs(bus: Bus, queue: str) -> None:
    root, mid, leaf, other = jid(), jid(), jid(), jid()
    flow = Flow("root", [Flow("mid", [Flow("leaf", job_id=leaf)], job_id=mid),
                         Flow("other", job_id=other)], job_id=root)  # fmt: skip
    assert (await flows.add(bus, queue, flow)).ok
    assert await finish(bus, queue, other) is Outcome.ACKED
    await kill(bus, queue, leaf)
    info = await jobs.get_job(bus, queue, mid)
    assert info is not None and info.state is JobState.DEAD
    assert info.last_error == f"child {leaf} (queue {queue}) dead: boom"
    info = await jobs.get_job(bus, queue, root)
    assert info is not None and info.state is JobState.DEAD
    assert (
        info.last_error
        == f"child {mid} (queue {queue}) dead: child {leaf} (queue {queue}) dead: boom"
    )
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.dead) == (0, 0, 3)
    assert await jobs.claim(bus, queue) == []  # no parent ever runs
    # a dead parent discarded takes its children's ends with it
    assert await jobs.discard(bus, queue, root) is Outcome.DISCARDED
    assert await bus.transport.command("EXISTS", bus.keys(queue).flow(root)) == 0


async def test_an_ignored_failure_lets_the_parent_go_on(bus: Bus, queue: str) -> None:
    p, bad, good = jid(), jid(), jid()
    flow = Flow("p", [Flow("bad", job_id=bad, on_failure=OnFailure.IGNORE),
                      Flow("good", job_id=good)], job_id=p)  # fmt: skip
    assert (await flows.add(bus, queue, flow)).ok
    await finish(bus, queue, good, b"fine")
    await kill(bus, queue, bad)
    assert await state(bus, queue, p) is JobState.PENDING
    assert await flows.children_results(bus, queue, p) == {good: b"fine"}
    ended = {k.id: (k.state, k.error) for k in await flows.children(bus, queue, p)}
    assert ended == {bad: ("dead", "boom"), good: ("completed", None)}


async def test_a_child_that_died_ignored_then_replayed_is_counted_once(
    bus: Bus, queue: str
) -> None:
    """A child dead under ``IGNORE`` has ended for its parent; replayed and done, it ends again
    but is not counted again: the parent still waits for its other child."""
    p, bad, other = jid(), jid(), jid()
    flow = Flow("p", [Flow("bad", job_id=bad, on_failure=OnFailure.IGNORE),
                      Flow("other", job_id=other)], job_id=p)  # fmt: skip
    assert (await flows.add(bus, queue, flow)).ok
    held = {j.id: j for j in await jobs.claim(bus, queue, 2)}
    assert await jobs.retry(bus, queue, bad, held[bad].token, 0, 1, "boom") is Outcome.DEAD
    assert await jobs.replay(bus, queue, bad) is Outcome.REPLAYED
    (again,) = await jobs.claim(bus, queue, 1)
    assert again.id == bad
    assert await jobs.ack(bus, queue, bad, again.token) is Outcome.ACKED
    assert await state(bus, queue, p) is JobState.WAITING_CHILDREN
    ended = {k.id: k.state for k in await flows.children(bus, queue, p)}
    assert ended == {bad: "completed", other: "active"}  # its record is its latest end
    assert await jobs.ack(bus, queue, other, held[other].token) is Outcome.ACKED
    assert await state(bus, queue, p) is JobState.PENDING


async def test_a_cancelled_or_deleted_child_fails_or_is_ignored(bus: Bus, queue: str) -> None:
    p, a, b = jid(), jid(), jid()
    assert (await flows.add(bus, queue, Flow("p", [Flow("a", job_id=a), Flow("b", job_id=b)],
                                             job_id=p))).ok  # fmt: skip
    assert await jobs.cancel(bus, queue, a, reason="no") is Cancelled.CANCELLED
    info = await jobs.get_job(bus, queue, p)
    assert info is not None and info.state is JobState.DEAD
    assert info.last_error == f"child {a} (queue {queue}) cancelled: cancelled: no"
    # the other child runs on; its end moves nothing
    assert await finish(bus, queue, b) is Outcome.ACKED
    assert await state(bus, queue, p) is JobState.DEAD
    q, x, y = jid(), jid(), jid()
    flow = Flow("q", [Flow("x", job_id=x, on_failure=OnFailure.IGNORE),
                      Flow("y", job_id=y, on_failure=OnFailure.IGNORE)], job_id=q)  # fmt: skip
    assert (await flows.add(bus, queue, flow)).ok
    assert await jobs.cancel(bus, queue, x) is Cancelled.CANCELLED
    assert await state(bus, queue, q) is JobState.WAITING_CHILDREN
    assert await jobs.delete(bus, queue, y) is Outcome.DELETED
    assert await state(bus, queue, q) is JobState.PENDING
    ended = {k.id: (k.state, k.error) for k in await flows.children(bus, queue, q)}
    assert ended == {x: ("cancelled", "cancelled"), y: ("cancelled", "deleted")}
    # a parent waiting for its children is not waiting to run: not deleted
    r = jid()
    assert (await flows.add(bus, queue, Flow("r", [Flow("z")], job_id=r))).ok
    assert await jobs.delete(bus, queue, r) is Outcome.NOT_WAITING


async def test_cancel_of_a_parent_takes_its_waiting_children(bus: Bus, queue: str) -> None:
    root, mid, l1, l2, l3, running = jid(), jid(), jid(), jid(), jid(), jid()
    flow = Flow("root", [
        Flow("mid", [Flow("l1", job_id=l1), Flow("l2", job_id=l2)], job_id=mid),
        Flow("l3", job_id=l3),
        Flow("running", job_id=running),
    ], job_id=root)  # fmt: skip
    assert (await flows.add(bus, queue, flow)).ok
    claimed = {j.id: j for j in await jobs.claim(bus, queue, 10)}
    assert set(claimed) == {l1, l2, l3, running}
    job = claimed[running]  # runs on
    assert await jobs.release(bus, queue, [(i, claimed[i].token) for i in (l1, l2)]) == 2
    # l3 waits out a retry's backoff: scheduled, and cancelled with the rest
    assert await jobs.retry(bus, queue, l3, claimed[l3].token, 60_000, 5, "e") is Outcome.SCHEDULED
    assert await jobs.cancel(bus, queue, root, reason="stop", by="ops") is Cancelled.CANCELLED
    for job_id in (root, mid, l1, l2, l3):
        info = await jobs.get_job(bus, queue, job_id)
        assert info is not None and info.state is JobState.CANCELLED, job_id
    info = await jobs.get_job(bus, queue, l1)
    assert info is not None and info.last_error == f"cancelled by ops: parent {mid} cancelled: stop"
    # the running child runs on; its end moves nothing
    assert await state(bus, queue, running) is JobState.ACTIVE
    assert await jobs.ack(bus, queue, running, job.token) is Outcome.ACKED
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.scheduled, c.active, c.cancelled) == (0, 0, 0, 5)
    assert await jobs.list_jobs(bus, queue, "waiting_children") == []


# --- every move of the table's flow edges, on the server ----------------------------------------


async def test_every_flow_move_of_the_table(bus: Bus, queue: str) -> None:
    walked: set[tuple[Any, str, str]] = set()

    async def moved(job_id: str, before: Place, script: str, case: str) -> None:
        want = next_place(before, script, case)
        got = await state(bus, queue, job_id)
        assert got is want.state, (job_id, before, script, case, got)
        walked.add((before, script, case))

    async def parent_of(*on_failure: OnFailure) -> tuple[str, list[str]]:
        p, kids = jid(), [jid() for _ in on_failure]
        flow = Flow("p", [Flow("c", job_id=k, on_failure=f) for k, f in zip(kids, on_failure,
                                                                            strict=True)],
                    job_id=p)  # fmt: skip
        assert (await flows.add(bus, queue, flow)).ok
        await moved(p, Place.NONE, "flow_add", "a parent")
        for k in kids:
            await moved(k, Place.NONE, "flow_add", "a child without children")
        return p, kids

    W, F, IG = Place.WAITING_CHILDREN, OnFailure.FAIL, OnFailure.IGNORE
    p, (k,) = await parent_of(F)
    await finish(bus, queue, k)
    await moved(p, W, "ack", "its last child completed")
    await finish(bus, queue, p)
    p, (k,) = await parent_of(F)
    await kill(bus, queue, k)
    await moved(p, W, "retry", "a child died (on_fail fail)")
    await jobs.discard(bus, queue, p)
    p, (k,) = await parent_of(IG)
    await kill(bus, queue, k)
    await moved(p, W, "retry", "its last child died (on_fail ignore)")
    await finish(bus, queue, p)
    p, (k,) = await parent_of(F)
    await jobs.cancel(bus, queue, p)
    await moved(p, W, "cancel", "")
    p, (k,) = await parent_of(F)
    await jobs.cancel(bus, queue, k)
    await moved(p, W, "cancel", "a child cancelled (on_fail fail)")
    p, (k,) = await parent_of(IG)
    await jobs.cancel(bus, queue, k)
    await moved(p, W, "cancel", "its last child cancelled (on_fail ignore)")
    await jobs.delete(bus, queue, p)
    p, (k,) = await parent_of(F)
    await jobs.delete(bus, queue, k)
    await moved(p, W, "delete", "a child deleted (on_fail fail)")
    p, (k,) = await parent_of(IG)
    await jobs.delete(bus, queue, k)
    await moved(p, W, "delete", "its last child deleted (on_fail ignore)")
    flow_moves = {(e.source, e.script, e.case) for e in EDGES
                  if e.script == "flow_add" or W in (e.source, e.target)}  # fmt: skip
    assert walked == flow_moves


# --- kill -9 mid-flow ----------------------------------------------------------------------------


@pytest.mark.timeout_s(120)
async def test_sigkill_of_a_worker_mid_flow_loses_nothing(
    bus: Bus, queue: str, server_url: str
) -> None:
    # 3 levels: a root, 8 parents, 8 children each (73 jobs); handlers of 50 ms, 5 at once
    tree = Flow("root", [Flow(f"p{i}", [Flow(f"c{i}.{j}") for j in range(8)]) for i in range(8)])
    added = await flows.add(bus, queue, tree)
    every = {j.id for j in added.root.walk()}
    async with spawn(
        "worker", server_url, queue, "--handle-ms", "50", "--lease-ms", "1000",
        "--concurrency", "5",
    ) as first:  # fmt: skip
        assert await read_line(first) == "ready"

        async def enough() -> bool:
            return int(await bus.transport.command("LLEN", done_key(queue))) >= 20

        await wait_for(enough, timeout=60)
        first.send_signal(signal.SIGKILL)
        await first.wait()
    c = await jobs.counts(bus, queue)
    assert c.active > 0, "the kill should have left leased jobs behind"

    async def root_done() -> bool:
        return await state(bus, queue, added.root.id) is None

    async with spawn("worker", server_url, queue, "--metronome") as second:
        assert await read_line(second) == "ready"
        await wait_for(root_done, timeout=60)
    # The events stream (on the server, through the kill) is the ledger of completions: every
    # job of the flow acked exactly once, each parent after all its children.
    acked: list[str] = []
    raw = await bus.transport.command("XRANGE", bus.keys(queue).events, "-", "+")
    for entry in protocol.stream_entries(raw):
        if entry.fields["e"] == b"acked":
            acked.append(entry.fields["id"].decode())
    assert sorted(acked) == sorted(every) and len(acked) == len(every)
    at = {job_id: i for i, job_id in enumerate(acked)}
    for job in added.root.walk():
        for child in job.children:
            assert at[child.id] < at[job.id]
    # the handlers' own ledger: every job ran, a parent's first run after its children's acks
    ran = [x.decode() for x in await bus.transport.command("LRANGE", done_key(queue), "0", "-1")]
    assert set(ran) == every and len(ran) - len(every) <= 5  # the kill's in-flight jobs, twice
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.scheduled, c.dead, c.completed_total) == (0, 0, 0, 0, 73)
    assert c.waiting_children == 0
    async with open_bus(server_url) as other:  # nothing of the flow is left behind
        assert await jobs.list_jobs(other, queue, "waiting_children") == []


# --- the CLI --------------------------------------------------------------------------------------


async def test_the_cli_shows_a_flow_as_a_tree(standalone_only: str, queue: str) -> None:
    from tests.echomq_trio.test_cli import echomq

    root, mid, leaf, other = jid(), jid(), jid(), jid()
    async with open_bus(standalone_only) as bus:
        flow = Flow("root", [Flow("mid", [Flow("leaf", job_id=leaf)], job_id=mid),
                             Flow("other", job_id=other, on_failure=OnFailure.IGNORE)],
                    job_id=root)  # fmt: skip
        assert (await flows.add(bus, queue, flow)).ok
        await finish(bus, queue, leaf, b"leafy")
        await jobs.cancel(bus, queue, other, reason="no")
    out = await echomq("flow", queue, root, url=standalone_only)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == [
        f"{root}  waiting_children  waits for 1 of 2",
        f"  {mid}  pending",
        f"    {leaf}  completed  result: leafy",
        f"  {other}  cancelled  ignored: cancelled: no",
    ]
    out = await echomq("show", queue, mid, url=standalone_only)
    assert out.returncode == 0, out.stderr
    assert f"parent      {root} (waiting_children)" in out.stdout.decode()
    assert f"children    0 of 1 not ended: {leaf} completed" in out.stdout.decode()
    out = await echomq("show", queue, root, url=standalone_only)
    assert f"children    1 of 2 not ended: {mid} pending, {other} cancelled" in out.stdout.decode()
    out = await echomq("--json", "flow", queue, mid, url=standalone_only)
    tree = json.loads(out.stdout)
    assert (tree["parent"], tree["parent_state"]) == ([queue, root], "waiting_children")
    assert [c["id"] for c in tree["children"]] == [leaf]
    # stats counts the parents waiting (root; mid is pending now)
    out = await echomq("stats", queue, url=standalone_only)
    assert re.search(r"^waiting_children +1$", out.stdout.decode(), re.M), out.stdout.decode()
    out = await echomq("--json", "stats", queue, url=standalone_only)
    assert json.loads(out.stdout)["waiting_children"] == 1


# --- the dashboard --------------------------------------------------------------------------------


async def test_the_dashboard_shows_a_job_s_parent_and_children(bus: Bus, queue: str) -> None:
    import httpx

    from echomq_trio.dashboard import Dashboard

    root, mid, leaf, alone = jid(), jid(), jid(), jid()
    flow = Flow("root", [Flow("mid", [Flow("leaf", job_id=leaf)], job_id=mid)], job_id=root)
    assert (await flows.add(bus, queue, flow)).ok
    await jobs.enqueue(bus, queue, "alone", job_id=alone)
    dashboard = Dashboard(bus, "t" * 32, sample_s=0.2, names_every_s=0.2)
    async with trio.open_nursery() as nursery, httpx.AsyncClient() as client:
        url = await nursery.start(dashboard.serve, "127.0.0.1", 0)
        got = (await client.get(f"{url}/state.json?queue={queue}&job={mid}")).json()
        f = got["queue"]["job"]["flow"]
        assert f["parent"] == {"queue": queue, "id": root, "state": "waiting_children"}
        assert [(r["depth"], r["id"], r["state"], r["unfinished"]) for r in f["rows"]] == [
            (0, mid, "waiting_children", 1), (1, leaf, "pending", None)]  # fmt: skip
        got = (await client.get(f"{url}/state.json?queue={queue}&job={alone}")).json()
        assert got["queue"]["job"]["flow"] is None  # a job in no flow
        nursery.cancel_scope.cancel()


def test_the_view_of_a_job_in_no_flow_or_a_flow() -> None:
    from echomq_trio.dashboard import view

    assert view.flow_view(None) is None
    assert view.flow_view(flows.FlowTree("q", "JOB0SY9STaY1rM", "pending")) is None
    tree = flows.FlowTree("q", "JOB0SY9STaY1rM", "waiting_children", unfinished=1, children=(
        flows.FlowTree("r", "JOB0SY9STaY1rN", "completed", result=b"ok"),
        flows.FlowTree("q", "JOB0SY9STaY1rO", "dead", error="boom", more=2)))  # fmt: skip
    rows = view.flow_view(tree)
    assert rows is not None and rows["parent"] is None
    assert [(r["depth"], r["queue"], r["kept"], r["more"]) for r in rows["rows"]] == [
        (0, "q", "", 0), (1, "r", "ok", 0), (1, "q", "boom", 2)]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout_s(90)
async def test_the_dashboard_page_draws_the_tree(standalone_only: str, queue: str) -> None:
    from echomq_trio.dashboard import Dashboard
    from tools.browser import open_page

    root, mid, leaf = jid(), jid(), jid()
    queue = "!" + queue  # first by name, so in the first page of the list of queues
    async with open_bus(standalone_only) as bus:
        flow = Flow("root", [Flow("mid", [Flow("leaf", job_id=leaf)], job_id=mid)], job_id=root)
        assert (await flows.add(bus, queue, flow)).ok
        token = "t" * 32
        dashboard = Dashboard(bus, token, sample_s=0.2, names_every_s=0.2)
        async with trio.open_nursery() as nursery:
            url = await nursery.start(dashboard.serve, "127.0.0.1", 0)
            async with open_page() as page:
                await page.goto(f"{url}/?queue={queue}#token={token}")
                title = "(document.getElementById('detail-title') || {}).textContent || ''"

                async def detailed() -> bool:
                    return queue in await page.evaluate(title)

                await wait_for(detailed, timeout=30, step=0.1)  # the page is live
                # the queue's list counts its two parents waiting: root and mid
                flows_count = (
                    f'(document.querySelector(\'tr[data-queue="{queue}"] '
                    'td[data-count="waiting_children"]\') || {}).textContent || null'
                )

                async def counted() -> bool:
                    return await page.evaluate(flows_count) == "2"

                await wait_for(counted, timeout=30, step=0.1)
                await page.evaluate(f"document.getElementById('job-id').value = '{mid}'")
                await page.evaluate("document.querySelector('#job-find button').click()")
                tree = "(document.getElementById('flow-tree') || {}).innerText || ''"

                async def drawn() -> bool:
                    return leaf in await page.evaluate(tree)

                await wait_for(drawn, timeout=30, step=0.1)
                text = await page.evaluate("document.getElementById('job-view').innerText")
                assert f"{root} waiting_children" in text
                assert f"{mid} waiting_children waits for 1" in text
                assert f"{leaf} pending" in text
                # a child's id opens its view
                await page.evaluate(f"document.querySelector('li[data-job=\"{leaf}\"] a').click()")

                async def leaf_shown() -> bool:
                    shown = await page.evaluate(
                        "(document.getElementById('job-view') || {}).innerText || ''"
                    )
                    return f"parent\n{mid} waiting_children" in shown

                await wait_for(leaf_shown, timeout=30, step=0.1)
            nursery.cancel_scope.cancel()
