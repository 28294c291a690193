"""The trio transport through a failover: a 6-node cluster (3 primaries, each with a replica),
a consumer and an enqueuer at work, and ``kill -9`` of the primary that holds the queue. Every
job admitted is handled (none lost), the calls on the queue's slot resume within seconds on the
promoted replica, and the transport reads the new slot map by itself."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from echomq_trio import Consumer, Job, Metronome, ids, jobs, open_bus
from echomq_trio._replies import as_text
from echomq_trio.errors import ConnectionLost, RequestTimedOut
from echomq_trio.resp import key_slot, open_resp
from echomq_trio.server import cluster_node_config, cluster_url, form_cluster, free_port
from tests.support import PASSWORD, server_version, start_test_server, stop_servers, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.server]


@pytest.fixture
def six_nodes(tmp_path: Path) -> Iterator[tuple[list[int], dict[int, object]]]:
    ports: list[int] = []
    procs = {}
    try:
        for i in range(6):
            folder = tmp_path / f"node{i}"
            port = free_port(with_bus_port=True)
            extra = [*cluster_node_config(folder, PASSWORD), ("cluster-node-timeout", "1000")]
            procs[port] = start_test_server(folder, extra, port)
            ports.append(port)
        yield ports, procs
    finally:
        stop_servers(list(procs.values()))  # type: ignore[arg-type]


def _url(port: int) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{port}"


async def _join_replicas(primaries: list[int], replicas: list[int]) -> None:
    for primary, replica in zip(primaries, replicas, strict=True):
        async with open_resp(_url(primary)) as p:
            primary_id = as_text(await p.command("CLUSTER", "MYID"))
        async with open_resp(_url(replica)) as r:
            await r.command("CLUSTER", "MEET", "127.0.0.1", str(primaries[0]))

            async def knows_it() -> bool:
                nodes = as_text(await r.command("CLUSTER", "NODES"))
                return primary_id in nodes  # noqa: B023

            await wait_for(knows_it, timeout=20)
            await r.command("CLUSTER", "REPLICATE", primary_id)

    async def all_replicated() -> bool:
        async with open_resp(_url(primaries[0])) as p:
            nodes = as_text(await p.command("CLUSTER", "NODES"))
        return nodes.count(" slave ") == len(replicas) and "fail" not in nodes

    await wait_for(all_replicated, timeout=30)
    for replica in replicas:  # a replica that never synced cannot take over

        async def synced() -> bool:
            async with open_resp(_url(replica)) as r:  # noqa: B023
                return "master_link_status:up" in as_text(await r.command("INFO", "replication"))

        await wait_for(synced, timeout=30)


async def _owner_of(port: int, slot: int) -> int:
    async with open_resp(_url(port)) as any_node:
        for entry in await any_node.command("CLUSTER", "SLOTS"):
            if int(entry[0]) <= slot <= int(entry[1]):
                return int(entry[2][1])
    raise AssertionError(f"no owner of slot {slot}")


@pytest.mark.timeout_s(240)
@pytest.mark.xfail(
    server_version() < (7, 2),
    reason="a known defect on Debian's Redis 7.0, open: in 2 of 4 CI runs there, not every "
    "admitted job was handled within 120 s of the kill, claims, settlements and the metronome "
    "failing on the killed primary's address (the session 40 note)",
    strict=False,
)
async def test_kill_9_of_a_primary_under_load_loses_nothing(
    six_nodes: tuple[list[int], dict[int, object]],
) -> None:
    ports, procs = six_nodes
    primaries, replicas = ports[:3], ports[3:]
    await form_cluster([_url(p) for p in primaries], primaries)
    await _join_replicas(primaries, replicas)
    queue = "failover." + uuid.uuid4().hex[:8]
    victim = await _owner_of(primaries[0], key_slot(queue))

    handled: Counter[str] = Counter()
    admitted: list[str] = []

    async def handler(job: Job) -> None:
        handled[job.id] += 1

    async def admit(count: int) -> None:
        """Enqueue ``count`` jobs, each with its own id, trying again until admitted."""
        for _ in range(count):
            job_id = ids.generate("JOB")
            while True:
                try:
                    await jobs.enqueue(bus, queue, b"x", job_id=job_id)
                    break
                except (ConnectionLost, RequestTimedOut):
                    await trio.sleep(0.05)
            admitted.append(job_id)

    async with open_bus(cluster_url(PASSWORD, primaries), transport="trio") as bus:
        await admit(200)
        async with trio.open_nursery() as nursery:
            await nursery.start(Consumer(bus, queue, handler).run)
            await nursery.start(Metronome(bus, queue, beat_ms=200).run)
            await wait_for(lambda: len(handled) >= 100)
            procs[victim].kill()  # type: ignore[attr-defined]
            killed_at = trio.current_time()
            # The next jobs reach the queue's slot once the replica has taken over.
            await admit(100)
            resumed_s = trio.current_time() - killed_at
            # A claim whose answer died with the primary holds its job until its lease (30 s)
            # runs out and the reaper returns it (30 s more after a refused write, should the
            # failover answer READONLY: REAP_GRACE_MS); on a loaded machine the failover's own
            # seconds come on top.
            await wait_for(lambda: set(admitted) <= set(handled), timeout=120)
            nursery.cancel_scope.cancel()
    lost = set(admitted) - set(handled)
    assert not lost, f"{len(lost)} admitted jobs never handled"
    assert len(admitted) == 300
    assert resumed_s < 20, resumed_s
    twice = [job for job, n in handled.items() if n > 1]
    # At least once: a job whose ack the dead primary took but had not passed on runs again.
    assert len(twice) <= 2, f"{len(twice)} jobs handled twice"
