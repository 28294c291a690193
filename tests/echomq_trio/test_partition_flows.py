"""Flows on a partitioned queue (``PartitionedQueue.add_flow``): a whole flow goes into one
partition, its jobs of the queue renamed to that partition's, and is read back by its root's id
from whichever partition holds it. On a standalone server and on the 3-node cluster (where each
partition is on a primary of its own, so a flow split over partitions could not be one
script)."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio import Bus, Job, ids, jobs, partitions
from echomq_trio.flows import Flow, OnFailure
from echomq_trio.jobs import Outcome
from echomq_trio.partitions import _flow_in_partition
from echomq_trio.states import JobState
from tests.support import wait_for

pytestmark = pytest.mark.cluster


def jid() -> str:
    return ids.generate("JOB")


# --- pure -----------------------------------------------------------------------------------------

queues = st.sampled_from([None, "q", "other", "q~p1.0"])


def trees(depth: int = 3) -> st.SearchStrategy[Flow]:
    leaf = st.builds(Flow, st.text(max_size=3), queue=queues)
    if depth == 0:
        return leaf
    return st.builds(Flow, st.text(max_size=3), st.lists(trees(depth - 1), max_size=3),
                     queue=queues)  # fmt: skip


def walk(flow: Flow) -> list[Flow]:
    return [flow, *(n for c in flow.children for n in walk(c))]


@given(trees())
def test_a_flow_in_a_partition_renames_the_queue_s_jobs_only(flow: Flow) -> None:
    moved = _flow_in_partition(flow, "q", "q~p2.7")
    before, after = walk(flow), walk(moved)
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        assert (new.payload, new.job_id, len(new.children)) == (
            old.payload, old.job_id, len(old.children))  # fmt: skip
        assert new.queue == ("q~p2.7" if old.queue == "q" else old.queue)


# --- on the server --------------------------------------------------------------------------------


async def test_a_two_level_flow_runs_in_dependency_order(bus: Bus, queue: str) -> None:
    """A root with two children, each with two of its own, all of the partitioned queue: the
    whole flow lands in the partition of the root's id; a ``PartitionedConsumer`` runs every
    job once, each parent after all of its children, and the root's handler reads its
    children's results where its job is; the flow is read back by the root's id."""
    pq = await partitions.create(bus, queue, 3)
    root = jid()
    kids = {jid(): [jid(), jid()] for _ in range(2)}
    flow = Flow("root", [Flow("mid", [Flow("leaf", job_id=g) for g in grand], job_id=k)
                         for k, grand in kids.items()], job_id=root)  # fmt: skip
    added = await pq.add_flow(flow)
    home = pq.partition_of(root)
    assert added.ok and {j.queue for j in added.root.walk()} == {home}
    assert (await pq.add_flow(flow)).outcome is Outcome.DUPLICATE  # meets the first
    c = await pq.counts()
    assert (c.pending, c.waiting_children) == (4, 3)
    ran: list[str] = []
    seen: dict[str, dict[str, bytes | None]] = {}

    async def handler(job: Job) -> bytes:
        if job.id == root or job.id in kids:
            seen[job.id] = await pq.children_results(job.id)
        ran.append(job.id)
        return job.id.encode()

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: root in ran, timeout=30)
        nursery.cancel_scope.cancel()
    assert sorted(ran) == sorted([root, *kids, *(g for grand in kids.values() for g in grand)])
    for k, grand in kids.items():
        assert all(ran.index(g) < ran.index(k) for g in grand)
        assert ran.index(k) < ran.index(root)
        assert seen[k] == {g: g.encode() for g in grand}
    assert seen[root] == {k: k.encode() for k in kids}


async def test_a_dead_child_fails_its_parent_and_the_flow_is_read_by_the_root_s_id(
    bus: Bus, queue: str
) -> None:
    """A child that fails its only attempt is dead and fails its parent (and that one's), in
    the flow's partition; ``flow_tree`` and ``flow_children`` by the root's id find it there; a
    child whose failure is ignored lets its parent go on. A flow without ids goes round-robin."""
    pq = await partitions.create(bus, queue, 3)
    root, mid, bad, fine = jid(), jid(), jid(), jid()
    flow = Flow("root", [Flow("mid", [Flow("bad", job_id=bad)], job_id=mid),
                         Flow("fine", job_id=fine)], job_id=root)  # fmt: skip
    assert (await pq.add_flow(flow)).ok

    async def handler(job: Job) -> None:
        if job.payload == b"bad":
            raise RuntimeError("boom")

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=2, max_attempts=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)

        async def root_dead() -> bool:
            info = await pq.get_job(root)
            return info is not None and info.state is JobState.DEAD

        await wait_for(root_dead, timeout=30, step=0.05)
        nursery.cancel_scope.cancel()
    home = pq.partition_of(root)
    info = await jobs.get_job(bus, home, root)
    assert info is not None and info.last_error is not None
    assert info.last_error.startswith(f"child {mid} (queue {home}) dead: child {bad}")
    tree = await pq.flow_tree(root)
    assert tree is not None and (tree.queue, tree.state) == (home, "dead")
    assert {c.id: c.state for c in tree.children} == {mid: "dead", fine: "completed"}
    assert {c.id for c in await pq.flow_children(root)} == {mid, fine}
    assert await pq.flow_tree(jid()) is None
    # Without ids: one partition after another.
    spread = [await pq.add_flow(Flow("p", [Flow("c", on_failure=OnFailure.IGNORE)]))
              for _ in range(3)]  # fmt: skip
    assert sorted(a.root.queue for a in spread) == sorted(pq.names)


async def test_a_flow_that_cannot_be_in_one_partition_is_refused_in_one_line(
    bus: Bus, queue: str
) -> None:
    """A root of another queue, or a non-flow, is refused before any I/O; on a cluster so is a
    child of a queue outside the partition's slot (``flows.add``'s rule), while a job that
    names the queue itself goes to the flow's partition."""
    pq = await partitions.create(bus, queue, 3)
    with pytest.raises(ValueError, match=r"use flows\.add"):
        await pq.add_flow(Flow("p", queue="elsewhere"))
    with pytest.raises(TypeError, match="must be a Flow"):
        await pq.add_flow("p")  # type: ignore[arg-type]
    if bus.transport.spec.cluster:
        root = jid()
        # another partition's name (the queue's own name would be renamed to the flow's)
        other = next(q for q in pq.names[1:] if q != pq.partition_of(root))
        with pytest.raises(ValueError, match="share one slot"):
            await pq.add_flow(Flow("p", [Flow("c", queue=other)], job_id=root))
    c = await pq.counts()
    assert (c.pending, c.waiting_children) == (0, 0)
    # Jobs that name the queue itself are the flow's partition's, wherever that is.
    root = jid()
    added = await pq.add_flow(Flow("p", [Flow("c", queue=pq.name)], queue=pq.name, job_id=root))
    assert {j.queue for j in added.root.walk()} == {pq.partition_of(root)}
